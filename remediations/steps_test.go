package remediations

import (
	"context"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/remediator/remediator/api/v1alpha1"
	"github.com/remediator/remediator/controllers/facts"
	"github.com/remediator/remediator/test/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, &env) }

func mustCreate(t *testing.T, obj client.Object) {
	t.Helper()
	if err := env.Client.Create(context.Background(), obj); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// shutdownHolder creates a node that classifies as Shutdown and a Trident Lease it
// holds, and returns a Run whose facts are those of the decision.
func shutdownHolder(t *testing.T) (*Run, *coordinationv1.Lease) {
	t.Helper()
	mustCreate(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "trident"}})
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "node-" + rand.String(5)},
		Spec:       corev1.NodeSpec{Taints: []corev1.Taint{{Key: v1alpha1.TaintOutOfService, Effect: corev1.TaintEffectNoExecute}}},
	}
	mustCreate(t, node)
	lease := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: "trident", Name: "pvc-" + rand.String(8)},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To(node.Name)},
	}
	mustCreate(t, lease)
	rr := &v1alpha1.RemediationRequest{ObjectMeta: metav1.ObjectMeta{Namespace: "remediator", Name: "rr"}}
	rr.Status.Facts = &v1alpha1.Facts{
		Lease: &v1alpha1.LeaseFacts{Namespace: "trident", Name: lease.Name, Exists: true, UID: string(lease.UID),
			ResourceVersion: lease.ResourceVersion, HolderIdentity: node.Name},
		Node: &v1alpha1.NodeFacts{Name: node.Name, Exists: true, State: v1alpha1.NodeShutdown},
	}
	return &Run{RR: rr, Client: env.Client, Reader: env.Client,
		Gatherer: &facts.Gatherer{Reader: env.Client, Config: facts.DefaultConfig()}, Now: time.Now(), Timeouts: DefaultTimeouts}, lease
}

func leaseGone(t *testing.T, l *coordinationv1.Lease) bool {
	t.Helper()
	err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(l), &coordinationv1.Lease{})
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	return apierrors.IsNotFound(err)
}

func TestDeleteLeasePreconditions(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		name string
		// change alters the cluster after the decision.
		change   func(t *testing.T, r *Run, l *coordinationv1.Lease)
		wantFail string // "" means the Lease is deleted
	}{
		{"unchanged Lease is deleted", func(*testing.T, *Run, *coordinationv1.Lease) {}, ""},
		{"already released counts as done", func(t *testing.T, _ *Run, l *coordinationv1.Lease) {
			if err := env.Client.Delete(ctx, l); err != nil {
				t.Fatal(err)
			}
		}, ""},
		{"re-acquired by another node", func(t *testing.T, _ *Run, l *coordinationv1.Lease) {
			l.Spec.HolderIdentity = ptr.To("kwok-node-2")
			if err := env.Client.Update(ctx, l); err != nil {
				t.Fatal(err)
			}
		}, `re-acquired by "kwok-node-2"`},
		{"changed in place", func(t *testing.T, _ *Run, l *coordinationv1.Lease) {
			l.Spec.LeaseDurationSeconds = ptr.To[int32](30)
			if err := env.Client.Update(ctx, l); err != nil {
				t.Fatal(err)
			}
		}, "changed since the decision"},
		{"re-created", func(t *testing.T, _ *Run, l *coordinationv1.Lease) {
			if err := env.Client.Delete(ctx, l); err != nil {
				t.Fatal(err)
			}
			n := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: l.Namespace, Name: l.Name}, Spec: l.Spec}
			if err := env.Client.Create(ctx, n); err != nil {
				t.Fatal(err)
			}
		}, "re-created since the decision"},
		{"holder node state changed", func(t *testing.T, r *Run, _ *coordinationv1.Lease) {
			r.RR.Status.Facts.Node.State = v1alpha1.NodeUnreachable
		}, "not Unreachable as when decided"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r, l := shutdownHolder(t)
			tc.change(t, r, l)
			out, err := deleteLease{}.Run(ctx, r)
			if tc.wantFail == "" {
				if err != nil || !out.Done || !leaseGone(t, l) {
					t.Fatalf("want the Lease gone: out=%+v err=%v", out, err)
				}
				return
			}
			f, ok := IsFailure(err)
			if !ok || !strings.Contains(f.Message, tc.wantFail) {
				t.Fatalf("want a failure mentioning %q, got out=%+v err=%v", tc.wantFail, out, err)
			}
			if leaseGone(t, l) {
				t.Error("the Lease was deleted despite the failed precondition")
			}
		})
	}
}

func TestAdvanceJournalsOneStepAtATime(t *testing.T) {
	ctx := context.Background()
	r, l := shutdownHolder(t)
	pb, err := DefaultPlaybooks()
	if err != nil {
		t.Fatal(err)
	}
	if r.RR.Status.Steps, err = pb.Plan("node-shutdown"); err != nil {
		t.Fatal(err)
	}

	p, err := Advance(ctx, r)
	st := r.RR.Status.Steps[0]
	if err != nil || !p.Started || st.State != v1alpha1.StepRunning || st.StartedAt == nil || leaseGone(t, l) {
		t.Fatalf("first advance must only journal the start: %+v %+v %v", p, st, err)
	}
	started := *st.StartedAt

	r.Now = r.Now.Add(time.Second)
	p, err = Advance(ctx, r)
	st = r.RR.Status.Steps[0]
	if err != nil || p.Finished || st.State != v1alpha1.StepSucceeded || !st.StartedAt.Equal(&started) || st.ObjectUID != string(l.UID) || !leaseGone(t, l) {
		t.Fatalf("second advance must run the step: %+v %+v %v", p, st, err)
	}
	if p, err = Advance(ctx, r); err != nil || !p.Finished {
		t.Fatalf("third advance must finish: %+v %v", p, err)
	}
}

func TestCordonRestoresOnlyWhatItChanged(t *testing.T) {
	ctx := context.Background()
	for _, already := range []bool{false, true} {
		r, _ := shutdownHolder(t)
		name := r.RR.Status.Facts.Lease.HolderIdentity
		node := &corev1.Node{}
		if err := env.Client.Get(ctx, types.NamespacedName{Name: name}, node); err != nil {
			t.Fatal(err)
		}
		if already {
			node.Spec.Unschedulable = true
			if err := env.Client.Update(ctx, node); err != nil {
				t.Fatal(err)
			}
		}
		if out, err := (cordon{}).Run(ctx, r); err != nil || !out.Done {
			t.Fatalf("cordon: %+v %v", out, err)
		}
		// A second run (a restart) changes nothing and reports the same.
		out, err := (cordon{}).Run(ctx, r)
		if err != nil || !out.Done || strings.Contains(out.Message, "already") != already {
			t.Fatalf("cordon again (already=%v): %+v %v", already, out, err)
		}
		if _, err := Restore(ctx, r, "test"); err != nil {
			t.Fatal(err)
		}
		r.RR.Status.Steps = []v1alpha1.StepStatus{{Name: "cordon"}, {Name: "uncordon"}}
		if _, err := Restore(ctx, r, "test"); err != nil {
			t.Fatal(err)
		}
		if err := env.Client.Get(ctx, types.NamespacedName{Name: name}, node); err != nil {
			t.Fatal(err)
		}
		if node.Spec.Unschedulable != already || node.Annotations[CordonedByAnnotation] != "" {
			t.Errorf("already=%v: after restore unschedulable=%v annotations=%v", already, node.Spec.Unschedulable, node.Annotations)
		}
		if r.RR.Status.Steps[1].State != v1alpha1.StepSucceeded {
			t.Errorf("restore not journaled on uncordon: %+v", r.RR.Status.Steps)
		}
	}
}

func TestPlaybooksAreValid(t *testing.T) {
	pb, err := DefaultPlaybooks()
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]int{"node-shutdown": 1, "fenced-unreachable": 1, "healthy-move-workload": 5, "restart-node-plugin": 5} {
		plan, err := pb.Plan(name)
		if err != nil || len(plan) != want {
			t.Errorf("%s: %d steps, %v", name, len(plan), err)
		}
	}
	if _, err := pb.Plan("force-delete"); err == nil {
		t.Error("unknown playbook planned")
	}
}
