package remediationrequest_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/remediator/remediator/api/v1alpha1"
	"github.com/remediator/remediator/test/testenv"
)

// controllerIdentity is the ServiceAccount the chart runs the controller as; the
// test's manager impersonates it, bound to the chart's generated RBAC.
const controllerIdentity = "system:serviceaccount:remediator-system:remediator-controller"

// asNarrowedChartController returns cfg impersonating the controller's
// ServiceAccount, with the chart's controller ClusterRole and Roles
// (charts/remediator/files/rbac) bound to it for the rest of the test binary, as the
// chart binds them, but narrowed as an administrator might: the ClusterRole without
// its pod reads.
func asNarrowedChartController(t *testing.T) *rest.Config {
	t.Helper()
	ctx := context.Background()
	env.EnsureNamespaces(t, "remediator-system", "trident", corev1.NamespaceNodeLease)
	data, err := os.ReadFile(filepath.Join(testenv.Root(), "charts", "remediator", "files", "rbac", "role.yaml"))
	require.NoError(t, err)
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	subject := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: "remediator-system", Name: "remediator-controller"}}
	apply := func(obj client.Object) {
		err := env.Client.Create(ctx, obj)
		if !apierrors.IsAlreadyExists(err) {
			require.NoError(t, err, "creating %T %s", obj, obj.GetName())
		}
	}
	for {
		u := &unstructured.Unstructured{}
		err := dec.Decode(&u.Object)
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		if len(u.Object) == 0 {
			continue
		}
		u.SetName("envtest-" + u.GetName())
		if u.GetKind() == "ClusterRole" {
			withoutPods(t, u)
		}
		apply(u)
		ref := rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: u.GetKind(), Name: u.GetName()}
		om := metav1.ObjectMeta{Namespace: u.GetNamespace(), Name: u.GetName()}
		if u.GetKind() == "ClusterRole" {
			apply(&rbacv1.ClusterRoleBinding{ObjectMeta: om, Subjects: subject, RoleRef: ref})
		} else {
			apply(&rbacv1.RoleBinding{ObjectMeta: om, Subjects: subject, RoleRef: ref})
		}
	}
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: controllerIdentity, Groups: []string{"system:serviceaccounts", "system:authenticated"}}
	return cfg
}

// withoutPods takes the pods resource out of the rules of ClusterRole u.
func withoutPods(t *testing.T, u *unstructured.Unstructured) {
	t.Helper()
	cr := &rbacv1.ClusterRole{}
	require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, cr))
	var rules []rbacv1.PolicyRule
	for _, r := range cr.Rules {
		r.Resources = slices.DeleteFunc(r.Resources, func(res string) bool { return res == "pods" })
		if len(r.Resources) > 0 {
			rules = append(rules, r)
		}
	}
	require.NotEqual(t, cr.Rules, rules, "the ClusterRole reads pods")
	cr.Rules = rules
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(cr)
	require.NoError(t, err)
	u.Object = obj
}

// TestUnreadableFactsAreNotSilent: a request whose facts the API server will not
// give the controller (its ServiceAccount may not read the pod the request names)
// used to get no phase, no condition and no Event, retried without end. Now it is
// Pending with Progressing and Ready saying why, the API server's answer naming what
// to grant, and a Warning Event; and once the permission is granted it is decided
// without a new commit.
func TestUnreadableFactsAreNotSilent(t *testing.T) {
	ctx := context.Background()
	const podNS = "envtest-unreadable"
	env.EnsureNamespaces(t, "remediator", podNS)
	startManagerOn(t, asNarrowedChartController(t))

	key := requestFor(t, "unreadable-facts", v1alpha1.Target{Pod: &v1alpha1.ObjectReference{Namespace: podNS, Name: "app-0"}}, nil)
	rr := waitFor(t, key, 30*time.Second, "a condition saying why it is not decided", func(rr *v1alpha1.RemediationRequest) bool {
		c := meta.FindStatusCondition(rr.Status.Conditions, v1alpha1.ConditionProgressing)
		return c != nil && c.Reason == v1alpha1.ReasonGatherFailed
	})
	assert.Equal(t, v1alpha1.PhasePending, rr.Status.Phase, "not rejected: the answer may change without a commit")
	assert.Nil(t, rr.Status.Decision)
	assert.Equal(t, rr.Generation, rr.Status.ObservedGeneration, "the status describes the request as it is")
	c := meta.FindStatusCondition(rr.Status.Conditions, v1alpha1.ConditionProgressing)
	assert.Equal(t, metav1.ConditionFalse, c.Status)
	for _, w := range []string{`cannot get resource "pods"`, `namespace "` + podNS + `"`,
		"Grant the controller's ServiceAccount that permission", "tries again with backoff"} {
		assert.Contains(t, c.Message, w, "the condition says what to grant")
	}
	ready := meta.FindStatusCondition(rr.Status.Conditions, v1alpha1.ConditionReady)
	require.NotNil(t, ready)
	assert.Equal(t, metav1.ConditionFalse, ready.Status)
	assert.Equal(t, v1alpha1.ReasonGatherFailed, ready.Reason)
	warningEvent(t, key.Name, v1alpha1.ReasonGatherFailed, `cannot get resource "pods"`, podNS)

	// Granted, the request is decided on its next retry, with no new commit.
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "envtest-pods"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list"}}}}
	require.NoError(t, env.Client.Create(ctx, role))
	require.NoError(t, env.Client.Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: role.Name},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: "remediator-system", Name: "remediator-controller"}},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name}}))
	rr = waitFor(t, key, 45*time.Second, "decided once the permission is granted", func(rr *v1alpha1.RemediationRequest) bool {
		return rr.Status.Decision != nil
	})
	if c := meta.FindStatusCondition(rr.Status.Conditions, v1alpha1.ConditionProgressing); c != nil {
		assert.NotEqual(t, v1alpha1.ReasonGatherFailed, c.Reason, "%+v", c)
	}
	assert.Equal(t, "Pod "+podNS+"/app-0", rr.Status.Facts.Target.Ref)
}
