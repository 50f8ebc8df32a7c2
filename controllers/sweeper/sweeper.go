// Package sweeper is the last line behind the restore. A node keeps this controller's
// cordon only while the request that made it runs; a request that is gone (its
// finalizer stripped, or deleted while no controller ran) or finished without
// restoring (its restore gave up) must not leave the node cordoned for good.
package sweeper

import (
	"cmp"
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	kerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/record"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/remediator/remediator/api/v1alpha1"
	"github.com/remediator/remediator/controllers/requests"
	"github.com/remediator/remediator/remediations"
)

// DefaultInterval is how often the sweeper looks for leftover cordons: they are rare,
// and a node cordoned a minute longer harms nothing.
const DefaultInterval = time.Minute

// EventCordonReleased is the Event on a node whose leftover cordon the sweeper undid.
const EventCordonReleased = "CordonReleased"

// Sweeper uncordons the nodes carrying the cordoned-by mark of a request that is gone
// or finished, when that request's cordon is still the one in place
// (remediations.CordonOwnedByUs). A node cordoned before the playbook never gets the
// mark; a cordon someone else asserted during the run, or a node already uncordoned,
// loses only the mark. It runs on the leader only.
type Sweeper struct {
	// Client lists nodes from the cache and writes them.
	Client client.Client
	// Reader reads the node (with its managedFields, which the cache strips) and the
	// request live, right before acting.
	Reader   client.Reader
	Recorder record.EventRecorder
	// Interval between sweeps; zero means DefaultInterval.
	Interval time.Duration
}

// NeedLeaderElection is true: two replicas must not sweep the same node at once.
func (s *Sweeper) NeedLeaderElection() bool { return true }

// Start sweeps at once and then every Interval until ctx ends; a failure is logged.
func (s *Sweeper) Start(ctx context.Context) error {
	log := ctrl.LoggerFrom(ctx).WithName("sweeper")
	wait.UntilWithContext(ctrl.LoggerInto(ctx, log), func(ctx context.Context) {
		if err := s.Sweep(ctx); err != nil && ctx.Err() == nil {
			log.Error(err, "Sweeping leftover cordons")
		}
	}, cmp.Or(s.Interval, DefaultInterval))
	return nil
}

// Sweep looks once at every node that carries the cordoned-by mark.
func (s *Sweeper) Sweep(ctx context.Context) error {
	var nodes corev1.NodeList
	if err := s.Client.List(ctx, &nodes); err != nil {
		return fmt.Errorf("listing nodes: %w", err)
	}
	var errs []error
	for i := range nodes.Items {
		if _, ok := nodes.Items[i].Annotations[remediations.CordonedByAnnotation]; !ok {
			continue
		}
		if err := s.sweepNode(ctx, nodes.Items[i].Name); err != nil {
			errs = append(errs, err)
		}
	}
	return kerrors.NewAggregate(errs)
}

// sweepNode judges one marked node on live reads, and releases what its request left.
func (s *Sweeper) sweepNode(ctx context.Context, name string) error {
	n := &corev1.Node{}
	if err := s.Reader.Get(ctx, types.NamespacedName{Name: name}, n); err != nil {
		return client.IgnoreNotFound(fmt.Errorf("reading node %s: %w", name, err))
	}
	owner := n.Annotations[remediations.CordonedByAnnotation]
	if owner == "" {
		return nil
	}
	why, err := s.requestOver(ctx, owner)
	if err != nil || why == "" {
		return err
	}
	before := n.DeepCopy()
	delete(n.Annotations, remediations.CordonedByAnnotation)
	var msg string
	switch others := remediations.CordonAssertedBy(n); {
	case remediations.CordonOwnedByUs(before, owner):
		n.Spec.Unschedulable = false
		msg = fmt.Sprintf("Uncordoned node %s: request %s cordoned it and %s", name, owner, why)
	case n.Spec.Unschedulable:
		msg = fmt.Sprintf("Left node %s cordoned: request %s cordoned it and %s, but %s also set spec.unschedulable since, so the cordon is theirs; removed the %s mark only",
			name, owner, why, strings.Join(others, ", "), remediations.CordonedByAnnotation)
	default:
		msg = fmt.Sprintf("Removed the %s mark of request %s from node %s, which someone already uncordoned: the request %s", remediations.CordonedByAnnotation, owner, name, why)
	}
	// The optimistic lock: a node that changed since the read (cordoned again,
	// marked by a new run) is judged again at the next sweep, never overwritten.
	if err := s.Client.Patch(ctx, n, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{}), client.FieldOwner(remediations.FieldManager)); err != nil {
		return client.IgnoreNotFound(fmt.Errorf("releasing the leftover cordon of node %s: %w", name, err))
	}
	ctrl.LoggerFrom(ctx).Info(msg, "node", name, "request", owner)
	if s.Recorder != nil {
		s.Recorder.Event(n, corev1.EventTypeNormal, EventCordonReleased, msg)
	}
	return nil
}

// requestOver says how the request named by a cordoned-by mark ("namespace/name")
// is over ("is gone", "ended Failed"), or "" while it may still need its cordon:
// running, waiting, being deleted while it restores, or unreadable (fail closed).
func (s *Sweeper) requestOver(ctx context.Context, owner string) (string, error) {
	ns, name, ok := strings.Cut(owner, "/")
	if !ok || ns == "" || name == "" {
		ctrl.LoggerFrom(ctx).Info("A node's cordoned-by mark names no request; left alone", "mark", owner)
		return "", nil
	}
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(requests.GVK)
	err := s.Reader.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, u)
	switch {
	case apierrors.IsNotFound(err):
		return "is gone", nil
	case apierrors.IsForbidden(err):
		// Another tenant's request: its own controller sweeps it.
		return "", nil
	case err != nil:
		return "", fmt.Errorf("reading request %s: %w", owner, err)
	}
	// Read unstructured: a request the Go type cannot hold still has a phase.
	if p, _, _ := unstructured.NestedString(u.Object, "status", "phase"); v1alpha1.Phase(p).Terminal() && u.GetDeletionTimestamp() == nil {
		return "ended " + string(p), nil
	}
	return "", nil
}
