package facts

// Target resolution, as the runbook does it: pod -> PVC -> PV, the binding checked
// from both sides, and an ephemeral volume's claim checked to be its pod's.

import (
	"context"
	"fmt"
	"slices"
	"strings"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/component-helpers/storage/ephemeral"

	"github.com/remediator/remediator/api/v1alpha1"
)

// resolveVolume follows pod -> PVC -> PV. It returns an empty PV name, with
// Target.Message set, when the chain breaks, and the claim only when it is the PV's.
func (s *gathering) resolveVolume(ctx context.Context, t v1alpha1.Target) (*corev1.PersistentVolumeClaim, string, error) {
	switch {
	case t.PersistentVolume != "":
		pv := &corev1.PersistentVolume{}
		found, err := s.g.get(ctx, types.NamespacedName{Name: t.PersistentVolume}, pv)
		if err != nil {
			return nil, "", err
		}
		if !found { // its Lease, named after it, can outlive it
			s.f.Target.Message = fmt.Sprintf("PersistentVolume %s not found; the Lease of that name is still looked up", t.PersistentVolume)
			return nil, t.PersistentVolume, nil
		}
		s.f.Target.Found = true
		// The PV resolves even when its claim does not, so that its Lease is reported.
		pvc, why, err := s.g.volumeClaim(ctx, pv)
		if err != nil {
			return nil, "", err
		}
		if why != "" {
			s.f.Target.Message = why + "; the claim is not the volume's, so no pods are looked up as affected"
		}
		return pvc, pv.Name, nil

	case t.PersistentVolumeClaim != nil:
		key := types.NamespacedName{Namespace: t.PersistentVolumeClaim.Namespace, Name: t.PersistentVolumeClaim.Name}
		pvc, pv, err := s.claimVolume(ctx, key)
		if err != nil || pv == "" {
			return nil, "", err
		}
		s.f.Target.Found = true
		return pvc, pv, nil

	case t.Pod != nil:
		return s.resolvePod(ctx, types.NamespacedName{Namespace: t.Pod.Namespace, Name: t.Pod.Name})
	}
	s.f.Target.Message = "release-luks-lease needs a PersistentVolume, PersistentVolumeClaim or Pod target"
	return nil, "", nil
}

// volumeClaim reads the claim pv's claimRef names, and returns it only when it is
// bound to pv; otherwise nil and why. The claim decides which pods are affected (and
// moved off a healthy holder), and a claimRef can name a claim deleted, or created
// again under the same name for another volume.
func (g *Gatherer) volumeClaim(ctx context.Context, pv *corev1.PersistentVolume) (*corev1.PersistentVolumeClaim, string, error) {
	ref := pv.Spec.ClaimRef
	if ref == nil {
		return nil, "", nil
	}
	key := types.NamespacedName{Namespace: ref.Namespace, Name: ref.Name}
	pvc := &corev1.PersistentVolumeClaim{}
	found, err := g.get(ctx, key, pvc)
	if err != nil {
		return nil, "", err
	}
	if !found {
		return nil, fmt.Sprintf("PersistentVolume %s has claimRef %s, but that PersistentVolumeClaim does not exist", pv.Name, key), nil
	}
	if why := bindingMismatch(pv, pvc); why != "" {
		return nil, why, nil
	}
	return pvc, "", nil
}

// claimVolume returns a claim and the PV it is bound to from both sides
// (bindingMismatch), or "" with Target.Message set.
func (s *gathering) claimVolume(ctx context.Context, key types.NamespacedName) (*corev1.PersistentVolumeClaim, string, error) {
	pvc := &corev1.PersistentVolumeClaim{}
	found, err := s.g.get(ctx, key, pvc)
	if err != nil {
		return nil, "", err
	}
	if !found {
		s.f.Target.Message = fmt.Sprintf("PersistentVolumeClaim %s not found", key)
		return nil, "", nil
	}
	if pvc.Spec.VolumeName == "" {
		s.f.Target.Message = fmt.Sprintf("PersistentVolumeClaim %s is not bound to a PersistentVolume", key)
		return nil, "", nil
	}
	pv := &corev1.PersistentVolume{}
	found, err = s.g.get(ctx, types.NamespacedName{Name: pvc.Spec.VolumeName}, pv)
	if err != nil {
		return nil, "", err
	}
	if !found {
		s.f.Target.Message = fmt.Sprintf("PersistentVolumeClaim %s names PersistentVolume %s, which does not exist, so the binding cannot be verified; "+
			"target the PersistentVolume to look up its Lease", key, pvc.Spec.VolumeName)
		return nil, "", nil
	}
	if why := bindingMismatch(pv, pvc); why != "" {
		s.f.Target.Message = why + "; the claim does not lead to that volume's Lease"
		return nil, "", nil
	}
	return pvc, pv.Name, nil
}

// ClaimsOf lists, sorted, the names of the claims pod's volumes name in its
// namespace, generic ephemeral volumes' (<pod>-<volume>) included: candidates only,
// the claim of a name is the pod's when VolumesUsing says so.
func ClaimsOf(pod *corev1.Pod) []string {
	var claims []string
	for i := range pod.Spec.Volumes {
		if name := claimOf(pod, &pod.Spec.Volumes[i]); name != "" && !slices.Contains(claims, name) {
			claims = append(claims, name)
		}
	}
	slices.Sort(claims)
	return claims
}

// claimOf is the name of the claim volume v of pod names, "" for none.
func claimOf(pod *corev1.Pod, v *corev1.Volume) string {
	switch {
	case v.PersistentVolumeClaim != nil:
		return v.PersistentVolumeClaim.ClaimName
	case v.Ephemeral != nil:
		return ephemeral.VolumeClaimName(pod, v)
	}
	return ""
}

// VolumesUsing names pod's volumes that use claim: a persistentVolumeClaim volume
// that names it, or a generic ephemeral volume whose claim it is. Pod "a" with volume
// "b-c" and pod "a-b" with volume "c" name the same claim, which anyone may create
// first; kubelet mounts it only for the pod that controls it, and so it counts here.
func VolumesUsing(pod *corev1.Pod, claim *corev1.PersistentVolumeClaim) []string {
	var out []string
	for i := range pod.Spec.Volumes {
		v := &pod.Spec.Volumes[i]
		if pod.Namespace == claim.Namespace && claimOf(pod, v) == claim.Name &&
			(v.Ephemeral == nil || ephemeral.VolumeIsForPod(pod, claim) == nil) {
			out = append(out, v.Name)
		}
	}
	return out
}

// notThePods says why claim, named by one of pod's volumes, is not the pod's, or "".
func notThePods(pod *corev1.Pod, claim *corev1.PersistentVolumeClaim) string {
	if len(VolumesUsing(pod, claim)) > 0 {
		return ""
	}
	for i := range pod.Spec.Volumes {
		if v := &pod.Spec.Volumes[i]; v.Ephemeral != nil && claimOf(pod, v) == claim.Name {
			return fmt.Sprintf("PersistentVolumeClaim %s/%s is named like the claim of Pod %s/%s's ephemeral volume %s, but that pod does not control it (%v): it is not the pod's volume",
				claim.Namespace, claim.Name, pod.Namespace, pod.Name, v.Name, ephemeral.VolumeIsForPod(pod, claim))
		}
	}
	return fmt.Sprintf("no volume of Pod %s/%s uses PersistentVolumeClaim %s/%s", pod.Namespace, pod.Name, claim.Namespace, claim.Name)
}

// bindingMismatch says why pv and pvc are not bound to each other, or "" when the
// PV's claimRef names the claim (its UID too, when set) and the claim names the PV.
func bindingMismatch(pv *corev1.PersistentVolume, pvc *corev1.PersistentVolumeClaim) string {
	claim := pvc.Namespace + "/" + pvc.Name
	ref := pv.Spec.ClaimRef
	switch {
	case ref == nil:
		return fmt.Sprintf("PersistentVolumeClaim %s names PersistentVolume %s, but that volume has no claimRef", claim, pv.Name)
	case ref.Namespace != pvc.Namespace || ref.Name != pvc.Name:
		return fmt.Sprintf("PersistentVolumeClaim %s names PersistentVolume %s, but that volume's claimRef is %s/%s", claim, pv.Name, ref.Namespace, ref.Name)
	case ref.UID != "" && ref.UID != pvc.UID:
		return fmt.Sprintf("PersistentVolume %s has claimRef %s with UID %s, but PersistentVolumeClaim %s has UID %s: "+
			"the claim was deleted and created again under the same name", pv.Name, claim, ref.UID, claim, pvc.UID)
	case pvc.Spec.VolumeName != pv.Name:
		return fmt.Sprintf("PersistentVolume %s has claimRef %s, but that PersistentVolumeClaim is bound to PersistentVolume %q", pv.Name, claim, pvc.Spec.VolumeName)
	}
	return ""
}

// resolvePod follows a pod's claims to the one PV that has a Trident Lease: a pod can
// mount several, and the runbook cares about the one whose PV has a Lease. Several
// candidates are ambiguous and the operator must pick one.
func (s *gathering) resolvePod(ctx context.Context, key types.NamespacedName) (*corev1.PersistentVolumeClaim, string, error) {
	pod := &corev1.Pod{}
	found, err := s.g.get(ctx, key, pod)
	if err != nil {
		return nil, "", err
	}
	if !found {
		s.f.Target.Message = fmt.Sprintf("Pod %s not found", key)
		return nil, "", nil
	}
	claims := ClaimsOf(pod)
	if len(claims) == 0 {
		s.f.Target.Message = fmt.Sprintf("Pod %s mounts no PersistentVolumeClaim", key)
		return nil, "", nil
	}
	bound, leased, problems, err := s.podVolumes(ctx, pod, claims)
	if err != nil {
		return nil, "", err
	}
	s.f.Target.Message = ""
	var pick *candidate
	switch {
	case len(leased) == 1:
		pick = &leased[0]
	case len(leased) > 1:
		var names []string
		for _, c := range leased {
			names = append(names, c.claim.Name+" ("+c.pv+")")
		}
		s.f.Target.Message = fmt.Sprintf("Pod %s mounts %d claims whose PersistentVolumes have Trident Leases: %s; target the PersistentVolumeClaim instead", key, len(leased), strings.Join(names, ", "))
		return nil, "", nil
	case len(bound) == 1:
		pick = &bound[0]
		if len(problems) > 0 {
			// The claim that did not resolve may be the stuck one (a PV bound to an
			// earlier claim of that name): "no Lease" on the pick is not "nothing stuck".
			s.f.Target.Message = fmt.Sprintf("Pod %s: only claim %s resolved; the others did not: %s", key, pick.claim.Name, strings.Join(problems, "; "))
		}
	case len(bound) == 0:
		s.f.Target.Message = strings.Join(problems, "; ")
		return nil, "", nil
	default:
		var names []string
		for _, c := range bound {
			names = append(names, c.pv)
		}
		s.f.Target.Found = true
		s.f.Target.Message = fmt.Sprintf("none of the PersistentVolumes mounted by Pod %s (%s) has a Lease in namespace %s", key, strings.Join(names, ", "), s.f.TridentNamespace)
		return nil, "", nil
	}
	s.f.Target.Found = true
	return pick.claim, pick.pv, nil
}

// candidate is a claim of a pod bound to a PV.
type candidate struct {
	claim *corev1.PersistentVolumeClaim
	pv    string
}

// podVolumes resolves each of pod's claims: those bound to a PV and the pod's own,
// those among them whose PV has a Trident Lease, and why the others do not count.
func (s *gathering) podVolumes(ctx context.Context, pod *corev1.Pod, claims []string) (bound, leased []candidate, problems []string, err error) {
	for _, name := range claims {
		pvc, pv, err := s.claimVolume(ctx, types.NamespacedName{Namespace: pod.Namespace, Name: name})
		if err != nil {
			return nil, nil, nil, err
		}
		if pv == "" {
			problems = append(problems, s.f.Target.Message)
			continue
		}
		if why := notThePods(pod, pvc); why != "" {
			problems = append(problems, why)
			continue
		}
		c := candidate{claim: pvc, pv: pv}
		bound = append(bound, c)
		found, err := s.g.get(ctx, types.NamespacedName{Namespace: s.f.TridentNamespace, Name: pv}, &coordinationv1.Lease{})
		if err != nil {
			return nil, nil, nil, err
		}
		if found {
			leased = append(leased, c)
		}
	}
	return bound, leased, problems, nil
}
