package wiring

import (
	"context"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	toolscache "k8s.io/client-go/tools/cache"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/remediator/remediator/controllers/facts"
	"github.com/remediator/remediator/controllers/pause"
)

// Event fields the gatherer selects LeaseRetained events by; the cache indexes each.
var eventFields = map[string]func(*corev1.Event) string{
	"involvedObject.kind": func(e *corev1.Event) string { return e.InvolvedObject.Kind },
	"involvedObject.name": func(e *corev1.Event) string { return e.InvolvedObject.Name },
	"reason":              func(e *corev1.Event) string { return e.Reason },
	"type":                func(e *corev1.Event) string { return e.Type },
}

// CacheOptions are the manager's cache and client options. The cache holds:
//   - RemediationRequests, in the request namespaces (all when none are given), indexed
//     for the guards; one the Go type cannot hold is cached marked (package requests);
//   - what a decision weighs and that stays small as the cluster grows: Nodes (without
//     their image lists), the node Leases in kube-node-lease, the Trident Leases (with
//     their managedFields, which every other object is cached without) and
//     LeaseRetained events in the Trident namespace, PersistentVolumes, claims,
//     CSINodes, CSIDrivers and VolumeAttachments (one per volume attached to a node:
//     they grow with the volumes in use, as PVs do);
//   - every other namespace's Leases, reduced to their names and versions: the Leases
//     are watched in one stream (markedKinds);
//   - the pause ConfigMap, and no other ConfigMap;
//   - when the Detector or fix verification runs (runs), kubelet's FailedMount events
//     in every other namespace: the symptoms the detector attaches to an incident, and
//     what verification watches and reads of a released volume's pods. They expire with
//     the API server's event TTL (an hour by default), which bounds them. The Trident
//     namespace's informer holds only LeaseRetained events (one field selector per
//     namespace), so a FailedMount there, on no workload's pod, is not seen;
//   - when the Detector runs, the DaemonSets in the Trident namespace (a handful): the
//     detector sees the node-plugin DaemonSet recreated by its UID.
//
// Pods are never cached: their number grows with the cluster, and the controller lists
// them by node only when a request needs them.
func CacheOptions(fc facts.Config, requestNamespaces []string, pauseKey types.NamespacedName, runs Runs) (cache.Options, client.Options) {
	if pauseKey.Name == "" {
		pauseKey = pause.DefaultConfigMap
	}
	all := map[string]cache.Config{cache.AllNamespaces: {}}
	events := map[string]cache.Config{fc.TridentNamespace: {FieldSelector: fields.OneTermEqualSelector("reason", fc.RetainedEventReason)}}
	if runs.Detect || runs.VerifyFixes {
		// Every namespace but the Trident one, which keeps its own selector.
		events[cache.AllNamespaces] = cache.Config{FieldSelector: fields.OneTermEqualSelector("reason", facts.FailedMountReason)}
	}
	co := cache.Options{
		DefaultTransform: cache.TransformStripManagedFields(),
		ByObject: map[client.Object]cache.ByObject{
			&corev1.Node{}: {Transform: stripNode},
			// One watch of every namespace's Leases, not one per namespace: its progress
			// is what a read of node Leases waits on (facts.Watermarks), and the storm's
			// own deletions of Trident Leases keep it moving while kubelets are late.
			&coordinationv1.Lease{}:         {Namespaces: all, Transform: stripLease(fc.TridentNamespace)},
			&corev1.Event{}:                 {Namespaces: events, Transform: stripEvent},
			&corev1.PersistentVolumeClaim{}: {Namespaces: all},
			&corev1.ConfigMap{}: {
				Namespaces: map[string]cache.Config{pauseKey.Namespace: {}},
				Field:      fields.OneTermEqualSelector("metadata.name", pauseKey.Name),
			},
		},
	}
	if runs.Detect {
		co.ByObject[&appsv1.DaemonSet{}] = cache.ByObject{Namespaces: map[string]cache.Config{fc.TridentNamespace: {}}}
	}
	if len(requestNamespaces) > 0 {
		co.DefaultNamespaces = map[string]cache.Config{}
		for _, ns := range requestNamespaces {
			co.DefaultNamespaces[ns] = cache.Config{}
		}
	}
	// Unstructured reads are not cached: each would start an informer of its own,
	// beside the typed one, holding every request again as maps.
	clo := client.Options{Cache: &client.CacheOptions{
		DisableFor: []client.Object{&corev1.Pod{}},
	}}
	return co, clo
}

// Runs are the optional runnables the cache serves (CacheOptions).
type Runs struct {
	// Detect: the Detector runs (--detect-interval).
	Detect bool
	// VerifyFixes: fix verification runs (--verify-fix-for).
	VerifyFixes bool
}

// stripEvent keeps of an Event what the facts read: the object it is about, its
// reason, type, message, source and timestamps, and drops the rest (related object,
// action, annotations, labels...). FailedMount events of every namespace are cached
// for the detector, also on a standby; a cluster with many unmountable volumes (a
// missing ConfigMap is common) has many.
func stripEvent(obj any) (any, error) {
	obj, err := cache.TransformStripManagedFields()(obj)
	if e, ok := obj.(*corev1.Event); ok {
		*e = corev1.Event{
			TypeMeta:            e.TypeMeta,
			ObjectMeta:          metav1.ObjectMeta{Name: e.Name, Namespace: e.Namespace, UID: e.UID, ResourceVersion: e.ResourceVersion, CreationTimestamp: e.CreationTimestamp},
			InvolvedObject:      e.InvolvedObject,
			Reason:              e.Reason,
			Message:             e.Message,
			Source:              e.Source,
			FirstTimestamp:      e.FirstTimestamp,
			LastTimestamp:       e.LastTimestamp,
			Count:               e.Count,
			Type:                e.Type,
			EventTime:           e.EventTime,
			Series:              e.Series,
			ReportingController: e.ReportingController,
			ReportingInstance:   e.ReportingInstance,
		}
	}
	return obj, err
}

// stripLease keeps managedFields on Trident's Leases: a Trident Lease's hold counts
// from the API server's time of its holder's last write, which only its managedFields
// record (facts.LeaseFacts.HeldSince). Trident's Leases are few (one per LUKS
// operation in flight, or stuck), with an entry or two each. Of the node Leases' it
// keeps only when each write was made (writeTimes). Of every other namespace's Leases
// (leader elections, mostly), which are watched only for the watch's progress and
// never read from the cache (cachedReads), it keeps only their identity and version.
func stripLease(tridentNamespace string) toolscache.TransformFunc {
	return func(obj any) (any, error) {
		l, ok := obj.(*coordinationv1.Lease)
		if !ok {
			return obj, nil
		}
		switch l.Namespace {
		case tridentNamespace:
			// Whole, managedFields included: they date the hold.
		case corev1.NamespaceNodeLease:
			l.ManagedFields = writeTimes(l.ManagedFields, func(metav1.ManagedFieldsEntry) bool { return true })
		default:
			*l = coordinationv1.Lease{TypeMeta: l.TypeMeta, ObjectMeta: metav1.ObjectMeta{
				Name: l.Name, Namespace: l.Namespace, UID: l.UID, ResourceVersion: l.ResourceVersion}}
		}
		return obj, nil
	}
}

// writeTimes keeps of the entries counted only who wrote, to what, and when: a
// kubelet's heartbeat counts from the later of its own stamp and the API server's
// time of its write (facts.ClassifyNode), and a decision made from the cache must
// see the same heartbeat as the fresh facts read live before the destructive step,
// or it would take a kubelet for silent that the floor then finds within its grace.
func writeTimes(entries []metav1.ManagedFieldsEntry, counts func(metav1.ManagedFieldsEntry) bool) []metav1.ManagedFieldsEntry {
	var out []metav1.ManagedFieldsEntry
	for _, e := range entries {
		if counts(e) {
			out = append(out, metav1.ManagedFieldsEntry{Manager: e.Manager, Operation: e.Operation, Subresource: e.Subresource, Time: e.Time})
		}
	}
	return out
}

// stripNode keeps of a Node what the facts and steps read (metadata, spec, the
// conditions, the volumes the kubelet reports in use, when the kubelet last wrote
// its status: writeTimes) and drops the rest of its status: the image list alone can
// be the larger part of a Node.
func stripNode(obj any) (any, error) {
	if n, ok := obj.(*corev1.Node); ok {
		n.Status = corev1.NodeStatus{Conditions: n.Status.Conditions, VolumesInUse: n.Status.VolumesInUse}
		n.ManagedFields = writeTimes(n.ManagedFields, func(e metav1.ManagedFieldsEntry) bool {
			return e.Manager == "kubelet" && e.Subresource == "status"
		})
	}
	return obj, nil
}

// PrepareCache registers the indexes the gatherer's cached reads select by, starts
// the facts' informers with the manager, so that the first decision does not wait
// for their first list, and returns the watermarks of how far each has caught up
// (facts.Watermarks).
func PrepareCache(ctx context.Context, mgr ctrl.Manager) (*facts.Watermarks, error) {
	for field, value := range eventFields {
		err := mgr.GetFieldIndexer().IndexField(ctx, &corev1.Event{}, field, func(o client.Object) []string {
			if e, ok := o.(*corev1.Event); ok {
				return []string{value(e)}
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("indexing events by %s: %w", field, err)
		}
	}
	marks := facts.NewWatermarks()
	for _, obj := range markedKinds {
		inf, err := mgr.GetCache().GetInformer(ctx, obj)
		if err != nil {
			return nil, fmt.Errorf("starting the informer for %T: %w", obj, err)
		}
		if _, err := inf.AddEventHandler(marks.Handler(facts.KindOf(obj))); err != nil {
			return nil, fmt.Errorf("following the informer for %T: %w", obj, err)
		}
	}
	return marks, nil
}

// markedKinds are the kinds whose informers' progress the watermarks follow: each
// cluster-scoped or watched across all namespaces (CacheOptions), one watch each, as
// facts.Watermarks requires.
var markedKinds = []client.Object{&corev1.Node{}, &coordinationv1.Lease{}, &corev1.PersistentVolume{},
	&corev1.PersistentVolumeClaim{}, &storagev1.CSINode{}, &storagev1.CSIDriver{}, &storagev1.VolumeAttachment{}}

// CatchUpWait bounds how long a read that needs the cache as new as the request (the
// holder's node Lease before a release, a miss that must be confirmed) waits for it
// to catch up before it is made live. Every kubelet renews its node Lease every 10 s,
// so in a cluster of a hundred nodes that cache moves every 0.1 s; but renewals come
// in bursts where one process renews many (kwok's simulated nodes: a burst every
// 2.5 s, with gaps of 1.1 to 1.3 s between them, measured while a storm ran), and a
// storm that loads the API server delays every watch. A wait of 1 s missed such gaps:
// the whole first wave of a storm, one request per worker, read live (11 GETs in a
// storm of 100). A worker waiting here costs the API server nothing, where a live
// read is a call it answers as slowly as the watch it would replace.
const CatchUpWait = 2 * time.Second

// CatchUpBound bounds the wait of a cache that moves without catching up with the
// request (facts.Watermarks.WaitCovers): its watch is behind, as the API server
// delays every watch in a storm, and a live read would wait as long in the same
// queues.
const CatchUpBound = 10 * time.Second

// Gatherers returns the gatherer a decision reads through (the cache, pods live) and
// the ones the re-read before a destructive step reads through. Before a step of a
// disruptive playbook (cordon, eviction, plugin-pod restart) everything the floor
// weighs is read live: the holder Node and its node Lease, the Trident Lease (its
// holder may have moved) and the CSINode (the driver may be registered again); only
// PVs and claims, which name the Lease and the pods, come from the cache. Before the
// Lease deletion of a playbook that only releases it, everything comes from the
// cache, once the cache of node Leases has caught up with the request's journal
// write (marks, CatchUpWait; else that node Lease is read live): a kubelet that came
// back renews its node Lease first thing, and every kubelet renews its own every
// 10 s, so that cache is always moving and, caught up, is as good as a live read
// made when the intent was journaled. The Trident Lease comes from the cache too:
// the delete carries the decided UID and resourceVersion as preconditions, which the
// API server checks atomically, a stronger check than any read before it. Anything
// the cache does not hold, a Lease in a Trident namespace a request overrides for
// one, is read live by all.
//
// A cache miss is confirmed live (confirmMiss) only where the absence would let a
// destructive step go ahead or reject the request for good, and the marks do not
// show the cache has caught up with the request.
//
// Only the decision reads the Trident node plugin's log (facts.Gatherer.Logs): once
// per decision, however many steps follow.
func Gatherers(mgr ctrl.Manager, fc facts.Config, marks *facts.Watermarks) (decide, fresh, freshRelease *facts.Gatherer) {
	gatherer := func(l live) *facts.Gatherer {
		r := facts.SplitReader{Cache: mgr.GetClient(), Live: LiveReader(mgr), Cached: cachedReads(fc, l),
			Marks: marks, Confirm: confirmMiss, Wait: CatchUpWait, WaitBound: CatchUpBound}
		if l.holderAsOfRequest {
			r.Fresh = holderHeartbeat
		}
		return &facts.Gatherer{Reader: r, Config: fc}
	}
	decide = gatherer(live{})
	decide.Logs = LogReader(mgr)
	return decide, gatherer(live{nodes: true, leases: true}), gatherer(live{holderAsOfRequest: true})
}

// holderHeartbeat: the holder's node Lease, where a kubelet's return shows first.
func holderHeartbeat(obj runtime.Object, ns string) bool {
	_, ok := obj.(*coordinationv1.Lease)
	return ok && ns == corev1.NamespaceNodeLease
}

// confirmMiss says which absences are confirmed live (unless the marks cover the
// request): the objects a request resolves (its PV, claim and Trident Lease, a CSI
// target's Node and CSINode), whose absence rejects it, and what makes a holder
// count as silent or gone (its Node, its node Lease), which lets a release go ahead.
// A VolumeAttachment's or a CSIDriver's absence is not: a missing CSIDriver reads as
// a driver that attaches (Kubernetes' default, the cautious one), and a
// VolumeAttachment to a holder is made only for a pod bound to that node, which a
// Shutdown holder (NotReady, with the out-of-service taint no pod tolerates unasked)
// is not given, and only a Shutdown holder's release waits on it.
func confirmMiss(obj runtime.Object, _ string) bool {
	switch obj.(type) {
	case *storagev1.VolumeAttachment, *storagev1.CSIDriver:
		return false
	}
	return true
}

// LogReader reads pods' logs with the manager's configuration and HTTP client. A
// configuration client-go refuses makes every read fail with its error, which the
// log evidence records: nothing is proven by a log never read.
func LogReader(mgr ctrl.Manager) facts.LogReader {
	cs, err := kubernetes.NewForConfigAndClient(mgr.GetConfig(), mgr.GetHTTPClient())
	if err != nil {
		return facts.FailedLogs{Err: fmt.Errorf("a client for pods' logs: %w", err)}
	}
	return facts.ClientsetLogs{Client: cs}
}

// DetectGatherer is the Detector's: everything from the cache as a decision reads it,
// and the FailedMount events of every namespace and the Trident namespace's
// DaemonSets too (CacheOptions with detect); pods live.
func DetectGatherer(mgr ctrl.Manager, fc facts.Config) *facts.Gatherer {
	return &facts.Gatherer{Reader: facts.SplitReader{Cache: mgr.GetClient(), Live: LiveReader(mgr), Cached: cachedReads(fc, live{allEvents: true, daemonSets: true}),
		TrustCacheMisses: true}, Config: fc}
}

// VerifyGatherer is fix verification's (verifyReader): the cache's CacheOptions must
// have been made with VerifyFixes.
func VerifyGatherer(mgr ctrl.Manager, fc facts.Config) *facts.Gatherer {
	return &facts.Gatherer{Reader: verifyReader(mgr.GetClient(), LiveReader(mgr), fc), Config: fc}
}

// verifyReader reads everything from the cache as a decision does, and the FailedMount
// events of a released volume's namespace too, and takes every miss as final:
// verification acts on nothing, and its next check sees what the cache missed. Each
// request verifying a fix is checked every minute for its window, so a read live here
// is one call per minute per request: after a storm of 1,000 releases, 1,000 lists of
// events a minute, for the whole window. Pods are read live, and only when they can
// tell (verification's readWorkload).
func verifyReader(cacheReader, liveReader client.Reader, fc facts.Config) facts.SplitReader {
	return facts.SplitReader{Cache: cacheReader, Live: liveReader, Cached: cachedReads(fc, live{workloadEvents: true}),
		TrustCacheMisses: true}
}

// live says what a gatherer reads live that a decision reads from the cache.
type live struct {
	nodes, leases bool
	// holderAsOfRequest reads the holder's node Lease from the cache only once it
	// has caught up with the request, live otherwise (holderHeartbeat).
	holderAsOfRequest bool
	// allEvents reads events listed across namespaces from the cache (the detector's
	// FailedMount events) rather than live.
	allEvents bool
	// workloadEvents reads the events of a namespace other than the Trident one (its
	// pods' FailedMount events) from the cache rather than live.
	workloadEvents bool
	// daemonSets reads the Trident namespace's DaemonSets from the cache, which holds
	// them only for the detector (CacheOptions with detect).
	daemonSets bool
}

// cachedReads is a SplitReader's Cached for l.
func cachedReads(fc facts.Config, l live) func(runtime.Object, string) bool {
	return func(obj runtime.Object, ns string) bool {
		switch obj.(type) {
		case *corev1.Node:
			return !l.nodes
		case *coordinationv1.Lease:
			if ns == corev1.NamespaceNodeLease {
				return !l.nodes
			}
			return ns == fc.TridentNamespace && !l.leases
		case *coordinationv1.LeaseList:
			// Only scan lists Leases: the Trident namespace's.
			return ns == fc.TridentNamespace && !l.leases
		case *storagev1.CSINode:
			return !l.leases
		case *appsv1.DaemonSetList:
			return ns == fc.TridentNamespace && l.daemonSets
		case *corev1.EventList:
			return ns == fc.TridentNamespace || (ns == "" && l.allEvents) || (ns != "" && l.workloadEvents)
		case *corev1.PersistentVolume, *corev1.PersistentVolumeClaim,
			// The volume evidence, which no floor check weighs: from the cache for all.
			*storagev1.CSIDriver, *storagev1.VolumeAttachment:
			return true
		}
		return false
	}
}

// LiveReader reads live from the API server, retrying the reads that failed for a
// reason that says nothing about the object (facts.RetryReader).
func LiveReader(mgr ctrl.Manager) client.Reader {
	return facts.RetryReader{Reader: mgr.GetAPIReader()}
}
