package testenv

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// EnsureNamespaces creates the namespaces that do not exist yet.
func (e *Env) EnsureNamespaces(t *testing.T, names ...string) {
	t.Helper()
	for _, ns := range names {
		err := e.Client.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
		if !apierrors.IsAlreadyExists(err) {
			require.NoError(t, err, "creating namespace %s", ns)
		}
	}
}

// Eventually polls cond until it holds or 20 s pass, and fails with cond's last
// state then.
func Eventually(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		ok, state := cond()
		assert.True(c, ok, "last state: %s", state)
	}, 20*time.Second, 100*time.Millisecond, "timed out waiting for %s", what)
}
