package remediationrequest_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/remediator/remediator/api/v1alpha1"
)

// TestReleaseJournalsThenDeletesInOneGo: a Lease release decided in a reconcile
// deletes the Lease in that reconcile, once the API server has committed the journal
// write that records the step's start (write-ahead), and costs two status writes in
// all: that one, with the decision, and the one with the outcome. The order is the
// API server's own (resourceVersions from one counter), read from watches.
func TestReleaseJournalsThenDeletesInOneGo(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	lease, rr := shutdownRelease(t, "journal-first")
	wc, err := client.NewWithWatch(env.Config, client.Options{Scheme: env.Client.Scheme()})
	require.NoError(t, err)
	requests, err := wc.Watch(ctx, &v1alpha1.RemediationRequestList{}, client.InNamespace(rr.Namespace))
	require.NoError(t, err)
	defer requests.Stop()
	cs, err := kubernetes.NewForConfig(env.Config)
	require.NoError(t, err)
	leases, err := cs.CoordinationV1().Leases(lease.Namespace).Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + lease.Name})
	require.NoError(t, err)
	defer leases.Stop()

	startManager(t)
	require.NoError(t, env.Client.Create(ctx, rr))

	var writes []*v1alpha1.RemediationRequest
	var deletedAt uint64
	for deletedAt == 0 || len(writes) == 0 || writes[len(writes)-1].Status.Phase != v1alpha1.PhaseSucceeded {
		select {
		case <-ctx.Done():
			t.Fatalf("no release within a minute: status writes %d, Lease deleted at %d", len(writes), deletedAt)
		case ev := <-requests.ResultChan():
			if got, ok := ev.Object.(*v1alpha1.RemediationRequest); ok && got.Name == rr.Name && ev.Type == watch.Modified {
				writes = append(writes, got)
			}
		case ev := <-leases.ResultChan():
			if l, ok := ev.Object.(*coordinationv1.Lease); ok && ev.Type == watch.Deleted {
				deletedAt = rv(t, l.ResourceVersion)
			}
		}
	}
	require.Len(t, writes, 2, "two status writes: the decision with the journal, then the outcome")
	journal := writes[0]
	require.Len(t, journal.Status.Steps, 1, "journal: %+v", journal.Status)
	assert.Equal(t, v1alpha1.StepRunning, journal.Status.Steps[0].State, "the first write journals the step started: %+v", journal.Status.Steps)
	assert.Equal(t, v1alpha1.PhaseRunning, journal.Status.Phase)
	assert.Less(t, rv(t, journal.ResourceVersion), deletedAt, "the journal write is committed before the Lease is deleted")
	assert.Greater(t, rv(t, writes[1].ResourceVersion), deletedAt, "the outcome is written after the delete")
}

func rv(t *testing.T, s string) uint64 {
	t.Helper()
	n, err := strconv.ParseUint(s, 10, 64)
	require.NoError(t, err, "resourceVersion %q", s)
	return n
}
