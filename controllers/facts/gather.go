package facts

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/remediator/remediator/api/v1alpha1"
)

// Defaults follow Trident's own names (docs/safety.md, the incidents).
const (
	DefaultTridentNamespace     = "trident"
	DefaultDriverName           = "csi.trident.netapp.io"
	DefaultNodePluginSelector   = "app=node.csi.trident.netapp.io"
	DefaultRetainedEventReason  = "LeaseRetained"
	DefaultNodeLeaseGracePeriod = 50 * time.Second
)

// Config holds the controller-wide defaults; a request may override the Trident
// namespace (within AllowedTridentNamespaces) and driver name.
type Config struct {
	TridentNamespace string
	// AllowedTridentNamespaces are the other namespaces a request may name in
	// spec.tridentNamespace (--allowed-trident-namespaces); nothing is read in any other.
	AllowedTridentNamespaces []string
	DriverName               string
	NodePluginSelector       labels.Selector
	// NodeLeaseGracePeriod is how old a kube-node-lease renewal may be before the
	// node counts as unreachable (kube-controller-manager's --node-monitor-grace-period).
	NodeLeaseGracePeriod time.Duration
	RetainedEventReason  string
}

// DefaultConfig returns the Trident defaults.
func DefaultConfig() Config {
	sel, _ := labels.Parse(DefaultNodePluginSelector)
	return Config{
		TridentNamespace:     DefaultTridentNamespace,
		DriverName:           DefaultDriverName,
		NodePluginSelector:   sel,
		NodeLeaseGracePeriod: DefaultNodeLeaseGracePeriod,
		RetainedEventReason:  DefaultRetainedEventReason,
	}
}

func (g *Gatherer) now() time.Time {
	if g.Clock == nil {
		return time.Now()
	}
	return g.Clock.Now()
}

// TridentNamespaces are the namespaces the controller acts in: TridentNamespace and
// AllowedTridentNamespaces, sorted, without duplicates.
func (c Config) TridentNamespaces() []string {
	out := append([]string{c.TridentNamespace}, c.AllowedTridentNamespaces...)
	slices.Sort(out)
	return slices.Compact(out)
}

// notTridentNamespace says why a request may not name ns as its Trident namespace,
// or "" when it may.
func (c Config) notTridentNamespace(ns string) string {
	allowed := c.TridentNamespaces()
	if slices.Contains(allowed, ns) {
		return ""
	}
	quoted := make([]string, len(allowed))
	for i, a := range allowed {
		quoted[i] = fmt.Sprintf("%q", a)
	}
	return fmt.Sprintf("spec.tridentNamespace %q is not a Trident namespace of this controller, which acts only in %s "+
		"(--trident-namespace; other namespaces only when listed in --allowed-trident-namespaces, the settings key allowed-trident-namespaces), "+
		"so nothing was read in it: remove spec.tridentNamespace, or ask the controller's administrators to allow %q",
		ns, strings.Join(quoted, ", "), ns)
}

// NodePluginPods lists, through reader, the node-plugin pods in namespace on node,
// sorted by name: pods with the node-plugin labels that a DaemonSet controls, since
// the playbook evicts them and a label is anyone's to set.
func (c Config) NodePluginPods(ctx context.Context, reader client.Reader, namespace, node string) ([]corev1.Pod, error) {
	list := &corev1.PodList{}
	if err := reader.List(ctx, list, client.InNamespace(namespace),
		client.MatchingLabelsSelector{Selector: c.NodePluginSelector},
		client.MatchingFields{"spec.nodeName": node}); err != nil {
		return nil, fmt.Errorf("listing node-plugin pods on %s: %w", node, err)
	}
	pods := slices.DeleteFunc(list.Items, func(p corev1.Pod) bool { return !isDaemonSetPod(&p) })
	slices.SortFunc(pods, func(a, b corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
	return pods, nil
}

// isDaemonSetPod reports whether a DaemonSet controls pod (its controller
// ownerReference), as Trident's node plugin.
func isDaemonSetPod(pod *corev1.Pod) bool {
	ref := metav1.GetControllerOf(pod)
	return ref != nil && ref.APIVersion == appsv1.SchemeGroupVersion.String() && ref.Kind == "DaemonSet"
}

// Gatherer reads facts for requests.
type Gatherer struct {
	// Reader reads the objects: for the controller a SplitReader (SplitReader), for
	// plan and scan the API server.
	Reader client.Reader
	Config Config
	// Clock is what ages are measured against (ServerClock); nil means the real clock.
	Clock clock.PassiveClock
	// SkipAffectedPods leaves out the pods on the holder that use the volume: the
	// fresh facts set it when neither the playbook nor the floor looks at them.
	SkipAffectedPods bool
	// Logs reads the Trident node plugin's log on a Healthy holder (LogEvidence); nil
	// reads none. Only the decision's gatherer has one: the log is read once per
	// decision, not again before each step, whose floor weighs the decided evidence
	// while the Lease is the one decided on.
	Logs LogReader
}

// Gather reads the facts for one request. It returns an error only when the API
// could not answer (so the reconcile is retried); missing objects are recorded.
func (g *Gatherer) Gather(ctx context.Context, rr *v1alpha1.RemediationRequest) (*v1alpha1.Facts, error) {
	now := g.now()
	// The cache counts for a read only as far as it has caught up with the request's
	// own last write (SplitReader).
	ctx = AsOf(ctx, rr.ResourceVersion)
	f := &v1alpha1.Facts{
		GatheredAt:       metav1.NewTime(now.Truncate(time.Second)),
		TridentNamespace: cmp.Or(rr.Spec.TridentNamespace, g.Config.TridentNamespace),
		DriverName:       cmp.Or(rr.Spec.DriverName, g.Config.DriverName),
		Target:           v1alpha1.TargetFacts{Ref: TargetRef(rr.Spec.Target)},
	}
	s := &gathering{g: g, f: f, now: f.GatheredAt.Time, prev: rr.Status.Facts, fencing: rr.Spec.Fencing}
	// The playbooks delete Leases and evict pods in this namespace, so it is the
	// controller's to choose: one the settings do not list is not even read.
	if why := g.Config.notTridentNamespace(f.TridentNamespace); why != "" {
		f.Target.Message = why
		return f, nil
	}
	var err error
	switch rr.Spec.Remediation {
	case v1alpha1.RemediationReleaseLUKSLease:
		err = s.lease(ctx, rr.Spec.Target)
	case v1alpha1.RemediationReregisterCSIDriver:
		err = s.csi(ctx, rr.Spec.Target.Node)
	default: // a CRD installed without its schema
		f.Target.Message = fmt.Sprintf("unknown remediation %q", rr.Spec.Remediation)
	}
	if err != nil {
		return nil, err
	}
	return f, nil
}

// TargetRef renders a target as "Kind namespace/name" for status and messages.
func TargetRef(t v1alpha1.Target) string {
	switch {
	case t.PersistentVolume != "":
		return "PersistentVolume " + t.PersistentVolume
	case t.PersistentVolumeClaim != nil:
		return "PersistentVolumeClaim " + t.PersistentVolumeClaim.Namespace + "/" + t.PersistentVolumeClaim.Name
	case t.Pod != nil:
		return "Pod " + t.Pod.Namespace + "/" + t.Pod.Name
	case t.Node != "":
		return "Node " + t.Node
	}
	return "none"
}

// gathering is the state of one Gather call.
type gathering struct {
	g   *Gatherer
	f   *v1alpha1.Facts
	now time.Time
	// prev are the facts the last decision recorded (status.facts), nil for a request
	// never decided: what the node did since is evidence too (Unsettled).
	prev *v1alpha1.Facts
	// holder is the Node that node read (nil: none): its volumesInUse is evidence too.
	holder *corev1.Node
	// pv is the PersistentVolume that volume read (nil: none): the log evidence
	// recognises the volume by its names.
	pv *corev1.PersistentVolume
	// fencing is the request's fencing statement (nil: none): a method that rests on
	// the holder's log has it read for an unreachable holder too.
	fencing *v1alpha1.Fencing
}

// get reads one object; found is false on NotFound.
func (g *Gatherer) get(ctx context.Context, key types.NamespacedName, obj client.Object) (bool, error) {
	if err := g.Reader.Get(ctx, key, obj); err != nil {
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return false, fmt.Errorf("reading %T %s: %w", obj, key, err)
	}
	return true, nil
}

// lease gathers facts for release-luks-lease.
func (s *gathering) lease(ctx context.Context, t v1alpha1.Target) error {
	claim, pv, err := s.resolveVolume(ctx, t)
	if err != nil || pv == "" {
		return err
	}
	s.f.Target.PersistentVolume = pv
	if claim != nil {
		s.f.Target.PersistentVolumeClaim = claim.Namespace + "/" + claim.Name
	}

	lf := &v1alpha1.LeaseFacts{Namespace: s.f.TridentNamespace, Name: pv}
	s.f.Lease = lf
	lease := &coordinationv1.Lease{}
	found, err := s.g.get(ctx, types.NamespacedName{Namespace: lf.Namespace, Name: lf.Name}, lease)
	if err != nil || !found {
		return err
	}
	lf.Exists, lf.UID, lf.ResourceVersion = true, string(lease.UID), lease.ResourceVersion
	lf.HolderIdentity = ptr.Deref(lease.Spec.HolderIdentity, "")
	if err := s.g.retainedEvents(ctx, lease, lf, s.now); err != nil {
		return err
	}
	if lf.HolderIdentity == "" {
		return nil
	}
	if err := s.node(ctx, lf.HolderIdentity); err != nil {
		return err
	}
	if err := s.volume(ctx, pv); err != nil {
		return err
	}
	if err := s.logs(ctx, lease); err != nil {
		return err
	}
	// Only a Healthy holder's pods are weighed (the floor) and moved (its playbook):
	// a holder shut down, cut off or gone runs nothing, and listing its pods would be
	// a live read in every decision of a power-loss storm.
	if claim != nil && !s.g.SkipAffectedPods && s.f.Node.State == v1alpha1.NodeHealthy {
		return s.affectedPods(ctx, lf.HolderIdentity, claim)
	}
	return nil
}

// eventCount is how many occurrences one (possibly deduplicated) event stands for.
func eventCount(ev *corev1.Event) int32 {
	n := max(ev.Count, 1)
	if ev.Series != nil {
		n = max(n, ev.Series.Count)
	}
	return n
}

// EventLastSeen is when ev, possibly deduplicated into a series, was last seen.
func EventLastSeen(ev *corev1.Event) time.Time {
	switch {
	case ev.Series != nil && !ev.Series.LastObservedTime.IsZero():
		return ev.Series.LastObservedTime.Time
	case !ev.LastTimestamp.IsZero():
		return ev.LastTimestamp.Time
	case !ev.EventTime.IsZero():
		return ev.EventTime.Time
	}
	return ev.CreationTimestamp.Time
}

// node records the state of the named node.
func (s *gathering) node(ctx context.Context, name string) error {
	nf, node, err := s.g.nodeFacts(ctx, name, s.now)
	if err != nil {
		return err
	}
	Unsettled(nf, s.prev)
	s.f.Node, s.holder = nf, node
	return nil
}

// nodeFacts classifies the named node, and returns its Node (nil: none) too.
func (g *Gatherer) nodeFacts(ctx context.Context, name string, now time.Time) (*v1alpha1.NodeFacts, *corev1.Node, error) {
	// The Node and its node Lease are read at once: live, before a destructive step,
	// it waits for the slower of the two rather than for both in turn. The Lease
	// counts even without a Node: a kubelet that renews it runs.
	node, l := &corev1.Node{}, &coordinationv1.Lease{}
	var leaseFound bool
	var leaseErr error
	var wg sync.WaitGroup
	wg.Go(func() {
		leaseFound, leaseErr = g.get(ctx, types.NamespacedName{Namespace: corev1.NamespaceNodeLease, Name: name}, l)
	})
	found, err := g.get(ctx, types.NamespacedName{Name: name}, node)
	wg.Wait()
	if err = cmp.Or(err, leaseErr); err != nil { // the Node's first
		return nil, nil, err
	}
	if !found {
		node = nil
	}
	if !leaseFound {
		l = nil
	}
	nf := ClassifyNode(name, node, l, now, g.Config.NodeLeaseGracePeriod)
	return &nf, node, nil
}

// affectedPods lists the pods on node that use claim (VolumesUsing).
func (s *gathering) affectedPods(ctx context.Context, node string, claim *corev1.PersistentVolumeClaim) error {
	pods, err := s.g.podsOnNode(ctx, node, client.InNamespace(claim.Namespace))
	if err != nil {
		return err
	}
	for i := range pods {
		if len(VolumesUsing(&pods[i], claim)) > 0 {
			s.f.AffectedPods = append(s.f.AffectedPods, podFacts(&pods[i]))
		}
	}
	return nil
}

// podsOnNode lists pods by spec.nodeName, sorted by namespace/name: a read
// proportional to one node, not the cluster.
func (g *Gatherer) podsOnNode(ctx context.Context, node string, opts ...client.ListOption) ([]corev1.Pod, error) {
	list := &corev1.PodList{}
	opts = append(opts, client.MatchingFields{"spec.nodeName": node})
	if err := g.Reader.List(ctx, list, opts...); err != nil {
		return nil, fmt.Errorf("listing pods on node %s: %w", node, err)
	}
	slices.SortFunc(list.Items, func(a, b corev1.Pod) int {
		return strings.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name)
	})
	return list.Items, nil
}

// csi gathers facts for reregister-csi-driver.
func (s *gathering) csi(ctx context.Context, nodeName string) error {
	s.f.Target.Node = nodeName
	if err := s.node(ctx, nodeName); err != nil {
		return err
	}
	if !s.f.Node.Exists {
		s.f.Target.Message = fmt.Sprintf("Node %s not found", nodeName)
		return nil
	}
	s.f.Target.Found = true

	cf := &v1alpha1.CSIFacts{}
	s.f.CSI = cf
	csiNode := &storagev1.CSINode{}
	found, err := s.g.get(ctx, types.NamespacedName{Name: nodeName}, csiNode)
	if err != nil {
		return err
	}
	if found {
		cf.CSINodeExists = true
		for _, d := range csiNode.Spec.Drivers {
			cf.Drivers = append(cf.Drivers, d.Name)
		}
		slices.Sort(cf.Drivers)
		cf.DriverRegistered = slices.Contains(cf.Drivers, s.f.DriverName)
	}

	pods, err := s.g.Config.NodePluginPods(ctx, s.g.Reader, s.f.TridentNamespace, nodeName)
	if err != nil {
		return err
	}
	for i := range pods {
		cf.PluginPods = append(cf.PluginPods, podFacts(&pods[i]))
	}
	return nil
}

func podFacts(p *corev1.Pod) v1alpha1.PodFacts {
	pf := v1alpha1.PodFacts{
		Namespace:         p.Namespace,
		Name:              p.Name,
		UID:               string(p.UID),
		Node:              p.Spec.NodeName,
		Phase:             string(p.Status.Phase),
		DeletionTimestamp: p.DeletionTimestamp,
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			pf.Ready = c.Status == corev1.ConditionTrue
		}
	}
	return pf
}
