//go:build e2e

package e2e

import (
	"context"
	"crypto/tls"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// TestSecureMetrics: with --metrics-secure (the chart's default) the metrics are
// served over HTTPS to a client the API server authenticates and authorizes to get
// /metrics, as kubebuilder's scaffold serves them, and to no one else.
func TestSecureMetrics(t *testing.T) {
	ctx := context.Background()
	addr := freeAddr(t)
	startController(t, "--metrics-bind-address", addr, "--metrics-secure")
	ns := namespace(t, "e2e-metrics-secure")

	token := func(sa string) string {
		require.NoError(t, k8s.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: sa}}))
		tr, err := clientset(t).CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa,
			&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](600)}}, metav1.CreateOptions{})
		require.NoError(t, err)
		return tr.Status.Token
	}
	reader, stranger := token("prometheus"), token("stranger")
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{GenerateName: "e2e-metrics-reader-"},
		Rules: []rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}}}
	require.NoError(t, k8s.Create(ctx, role))
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), role) })
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{GenerateName: "e2e-metrics-reader-"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: ns, Name: "prometheus"}}}
	require.NoError(t, k8s.Create(ctx, binding))
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), binding) })

	// The certificate is the controller's self-signed one, as the chart's
	// ServiceMonitor expects (insecureSkipVerify).
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // the controller's self-signed certificate
	get := func(c require.TestingT, scheme, bearer string) (int, string) {
		req, err := http.NewRequest(http.MethodGet, scheme+"://"+addr+"/metrics", nil)
		require.NoError(c, err)
		if bearer != "" {
			req.Header.Set("Authorization", "Bearer "+bearer)
		}
		resp, err := hc.Do(req)
		require.NoError(c, err)
		defer func() { _ = resp.Body.Close() }()
		body, err := io.ReadAll(resp.Body)
		require.NoError(c, err)
		return resp.StatusCode, string(body)
	}
	// RBAC bindings take a moment to reach the authorizer's cache.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		code, body := get(c, "https", reader)
		assert.Equal(c, http.StatusOK, code, body)
		assert.Contains(c, body, "remediator_build_info")
	}, 30*time.Second, poll, "the metrics reader scrapes over HTTPS")
	code, _ := get(t, "https", "")
	assert.Equal(t, http.StatusUnauthorized, code, "no token")
	// controller-runtime's filter answers 500 to a token the TokenReview refuses.
	code, body := get(t, "https", "not-a-token")
	assert.NotEqual(t, http.StatusOK, code, "a token the API server does not know")
	assert.NotContains(t, body, "remediator_build_info")
	code, _ = get(t, "https", stranger)
	assert.Equal(t, http.StatusForbidden, code, "an identity without get on /metrics")
	if resp, err := http.Get("http://" + addr + "/metrics"); err == nil {
		_ = resp.Body.Close()
		assert.NotEqual(t, http.StatusOK, resp.StatusCode, "no plain-HTTP metrics")
	}
}
