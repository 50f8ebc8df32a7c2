package facts

// Target resolution, the way the runbook does it: pod -> PVC -> PV, with the binding
// checked from both sides (claimRef, its UID, and the claim's volumeName).

import (
	"context"
	"fmt"
	"strings"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/remediator/remediator/api/v1alpha1"
)

// resolveVolume follows pod -> PVC -> PV. It returns an empty PV name, with
// Target.Message set, when the chain breaks.
func (s *gathering) resolveVolume(ctx context.Context, t v1alpha1.Target) (*types.NamespacedName, string, error) {
	switch {
	case t.PersistentVolume != "":
		pv := &corev1.PersistentVolume{}
		found, err := s.get(ctx, types.NamespacedName{Name: t.PersistentVolume}, pv)
		if err != nil {
			return nil, "", err
		}
		if !found {
			// The Lease is named after the PV, so it can outlive a deleted PV and is
			// still worth reporting.
			s.f.Target.Message = fmt.Sprintf("PersistentVolume %s not found; the Lease of that name is still looked up", t.PersistentVolume)
			return nil, t.PersistentVolume, nil
		}
		s.f.Target.Found = true
		ref := pv.Spec.ClaimRef
		if ref == nil {
			return nil, pv.Name, nil
		}
		// The claim decides which pods count as affected (and are moved off a healthy
		// holder), so it must be the volume's own: a claimRef can name a claim that was
		// deleted, or deleted and created again under the same name for another volume.
		// The PV itself still resolves, so that its Lease is reported.
		key := types.NamespacedName{Namespace: ref.Namespace, Name: ref.Name}
		pvc := &corev1.PersistentVolumeClaim{}
		found, err = s.get(ctx, key, pvc)
		if err != nil {
			return nil, "", err
		}
		if !found {
			s.f.Target.Message = fmt.Sprintf("PersistentVolume %s has claimRef %s, but that PersistentVolumeClaim does not exist; "+
				"the claim is not the volume's, so no pods are looked up as affected", pv.Name, key)
			return nil, pv.Name, nil
		}
		if why := bindingMismatch(pv, pvc); why != "" {
			s.f.Target.Message = why + "; the claim is not the volume's, so no pods are looked up as affected"
			return nil, pv.Name, nil
		}
		return &key, pv.Name, nil

	case t.PersistentVolumeClaim != nil:
		key := types.NamespacedName{Namespace: t.PersistentVolumeClaim.Namespace, Name: t.PersistentVolumeClaim.Name}
		pv, err := s.claimVolume(ctx, key)
		if err != nil || pv == "" {
			return nil, "", err
		}
		s.f.Target.Found = true
		return &key, pv, nil

	case t.Pod != nil:
		return s.resolvePod(ctx, types.NamespacedName{Namespace: t.Pod.Namespace, Name: t.Pod.Name})
	}
	s.f.Target.Message = "release-luks-lease needs a PersistentVolume, PersistentVolumeClaim or Pod target"
	return nil, "", nil
}

// claimVolume returns the PV a claim is bound to, or "" with Target.Message set. The
// binding must hold from both sides: the claim's volumeName names the PV, and the
// PV's claimRef names the claim back (its UID too, when set). A claim that names a PV
// bound to another claim, or to an earlier claim of the same name, does not lead to
// that PV's Lease.
func (s *gathering) claimVolume(ctx context.Context, key types.NamespacedName) (string, error) {
	pvc := &corev1.PersistentVolumeClaim{}
	found, err := s.get(ctx, key, pvc)
	if err != nil {
		return "", err
	}
	if !found {
		s.f.Target.Message = fmt.Sprintf("PersistentVolumeClaim %s not found", key)
		return "", nil
	}
	if pvc.Spec.VolumeName == "" {
		s.f.Target.Message = fmt.Sprintf("PersistentVolumeClaim %s is not bound to a PersistentVolume", key)
		return "", nil
	}
	pv := &corev1.PersistentVolume{}
	found, err = s.get(ctx, types.NamespacedName{Name: pvc.Spec.VolumeName}, pv)
	if err != nil {
		return "", err
	}
	if !found {
		s.f.Target.Message = fmt.Sprintf("PersistentVolumeClaim %s names PersistentVolume %s, which does not exist, so the binding cannot be verified; "+
			"target the PersistentVolume to look up its Lease", key, pvc.Spec.VolumeName)
		return "", nil
	}
	if why := bindingMismatch(pv, pvc); why != "" {
		s.f.Target.Message = why + "; the claim does not lead to that volume's Lease"
		return "", nil
	}
	return pv.Name, nil
}

// bindingMismatch says why pv and pvc are not bound to each other, or "" when they
// are: the PV's claimRef names the claim (namespace, name, and UID when set) and the
// claim's volumeName names the PV.
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

// resolvePod follows a pod's PVC volumes to the one PV that has a Trident Lease.
func (s *gathering) resolvePod(ctx context.Context, key types.NamespacedName) (*types.NamespacedName, string, error) {
	pod := &corev1.Pod{}
	found, err := s.get(ctx, key, pod)
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

	// A pod can mount several claims; the runbook cares about the one whose PV has a
	// Lease. Several candidates are ambiguous and the operator must pick one.
	type candidate struct {
		claim types.NamespacedName
		pv    string
	}
	var bound, leased []candidate
	var problems []string
	for _, name := range claims {
		ck := types.NamespacedName{Namespace: pod.Namespace, Name: name}
		pv, err := s.claimVolume(ctx, ck)
		if err != nil {
			return nil, "", err
		}
		if pv == "" {
			problems = append(problems, s.f.Target.Message)
			continue
		}
		c := candidate{claim: ck, pv: pv}
		bound = append(bound, c)
		found, err := s.get(ctx, types.NamespacedName{Namespace: s.f.TridentNamespace, Name: pv}, &coordinationv1.Lease{})
		if err != nil {
			return nil, "", err
		}
		if found {
			leased = append(leased, c)
		}
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
			// The claim that did not resolve may be the one whose volume is stuck (a
			// PV bound to an earlier claim of that name, say); say so, so that "no
			// Lease" on the picked volume is not read as "nothing is stuck".
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
	return &pick.claim, pick.pv, nil
}
