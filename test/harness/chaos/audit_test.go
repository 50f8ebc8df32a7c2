package main

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestAuditCalls: the campaign's count of destructive calls comes from audit events
// as the kube-apiserver writes them (these lines are trimmed copies of the local
// cluster's). Only completed, successful calls by the controller count; a pod
// delete by anyone marks the pod gone; a Node patch counts only when it changes
// spec.unschedulable.
func TestAuditCalls(t *testing.T) {
	lines := []string{
		// The controller deletes a Lease (200), then again (404: already gone).
		`{"kind":"Event","stage":"ResponseComplete","verb":"delete","userAgent":"remediator-failpoints/v0 (linux/amd64) kubernetes/$Format","objectRef":{"resource":"leases","namespace":"trident","name":"pvc-1","apiGroup":"coordination.k8s.io"},"responseStatus":{"code":200},"stageTimestamp":"2026-12-02T00:18:03.679116Z"}`,
		`{"kind":"Event","stage":"ResponseComplete","verb":"delete","userAgent":"remediator/v0","objectRef":{"resource":"leases","namespace":"trident","name":"pvc-1"},"responseStatus":{"code":404},"stageTimestamp":"2026-12-02T00:18:04.000000Z"}`,
		// A cordon and an uncordon (merge patches with unschedulable true / null).
		`{"kind":"Event","stage":"ResponseComplete","verb":"patch","userAgent":"remediator/v0","objectRef":{"resource":"nodes","name":"n1"},"responseStatus":{"code":200},"requestObject":{"metadata":{"annotations":{"remediator.io/cordoned-by":"x"},"resourceVersion":"5"},"spec":{"unschedulable":true}},"stageTimestamp":"2026-12-02T00:18:05.000000Z"}`,
		`{"kind":"Event","stage":"ResponseComplete","verb":"patch","userAgent":"remediator/v0","objectRef":{"resource":"nodes","name":"n1"},"responseStatus":{"code":200},"requestObject":{"metadata":{"annotations":{"remediator.io/cordoned-by":null}},"spec":{"unschedulable":null}},"stageTimestamp":"2026-12-02T00:18:09.000000Z"}`,
		// The node lifecycle controller's taint patch is no cordon, and not the controller's.
		`{"kind":"Event","stage":"ResponseComplete","verb":"patch","userAgent":"kube-controller-manager/v1.34.2","objectRef":{"resource":"nodes","name":"n1"},"responseStatus":{"code":200},"requestObject":{"spec":{"taints":null}},"stageTimestamp":"2026-12-02T00:18:06.000000Z"}`,
		// An eviction by the controller, then kwok's final delete of the pod.
		`{"kind":"Event","stage":"ResponseComplete","verb":"create","userAgent":"remediator/v0","objectRef":{"resource":"pods","subresource":"eviction","namespace":"app","name":"p1"},"responseStatus":{"code":201},"stageTimestamp":"2026-12-02T00:18:06.000000Z"}`,
		`{"kind":"Event","stage":"ResponseComplete","verb":"delete","userAgent":"kwok/v0.7.0","objectRef":{"resource":"pods","namespace":"app","name":"p1"},"responseStatus":{"code":200},"stageTimestamp":"2026-12-02T00:18:07.000000Z"}`,
		// A refused eviction (429) did not run.
		`{"kind":"Event","stage":"ResponseComplete","verb":"create","userAgent":"remediator/v0","objectRef":{"resource":"pods","subresource":"eviction","namespace":"app","name":"p2"},"responseStatus":{"code":429},"stageTimestamp":"2026-12-02T00:18:06.000000Z"}`,
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "audit.log")
	old := `{"kind":"Event","stage":"ResponseComplete","verb":"delete","userAgent":"remediator/v0","objectRef":{"resource":"leases","namespace":"trident","name":"before-offset"},"responseStatus":{"code":200},"stageTimestamp":"2026-12-02T00:00:00.000000Z"}` + "\n"
	body := old
	for _, l := range lines {
		body += l + "\n"
	}
	require.NoError(t, os.WriteFile(path, []byte(body), 0o644))
	calls, gone, err := auditLog{path: path}.calls(int64(len(old)))
	require.NoError(t, err)
	var keys []string
	for _, c := range calls {
		keys = append(keys, c.key())
	}
	assert.Equal(t, []string{"delete-lease trident/pvc-1", "cordon n1", "evict app/p1", "uncordon n1"}, keys)
	require.Contains(t, gone, "app/p1")
	assert.Equal(t, "2026-12-02T00:18:07Z", gone["app/p1"].UTC().Format(time.RFC3339))
}
