package chart_test

// This file owns the chart itself: lint, what it renders for a set of values, the
// least-privilege RBAC (and that it stays what controller-gen generates from the
// markers), the Deployment's arguments and security settings, and a server-side dry
// run of every rendered object against a real kube-apiserver (envtest).

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"github.com/remediator/remediator/test/harness/helmchart"
	"github.com/remediator/remediator/test/testenv"
)

const (
	release   = "remediator"
	namespace = "remediator-system"
	// policiesDir is where the chart mounts values.policies.
	policiesDir = "/etc/remediator/policies"
)

// render renders the chart for the test release, failing the test on error.
func render(t *testing.T, values map[string]any) []*unstructured.Unstructured {
	t.Helper()
	objs, err := helmchart.Render(release, namespace, values)
	require.NoError(t, err, "rendering the chart")
	return objs
}

func ref(o *unstructured.Unstructured) string {
	if o.GetNamespace() == "" {
		return o.GetKind() + " " + o.GetName()
	}
	return o.GetKind() + " " + o.GetNamespace() + "/" + o.GetName()
}

func refs(objs []*unstructured.Unstructured) []string {
	out := make([]string, 0, len(objs))
	for _, o := range objs {
		out = append(out, ref(o))
	}
	return out
}

// find returns the one object of kind, namespace and name, or nil.
func find(objs []*unstructured.Unstructured, kind, ns, name string) *unstructured.Unstructured {
	for _, o := range objs {
		if o.GetKind() == kind && o.GetNamespace() == ns && o.GetName() == name {
			return o
		}
	}
	return nil
}

// typed converts a rendered object into its Go type.
func typed[T any](t *testing.T, o *unstructured.Unstructured) *T {
	t.Helper()
	require.NotNil(t, o, "want a %T, got none", *new(T))
	out := new(T)
	require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, out), "converting %s", ref(o))
	return out
}

func deployment(t *testing.T, objs []*unstructured.Unstructured) *appsv1.Deployment {
	t.Helper()
	return typed[appsv1.Deployment](t, find(objs, "Deployment", namespace, release))
}

func clusterRole(t *testing.T, objs []*unstructured.Unstructured) *rbacv1.ClusterRole {
	t.Helper()
	return typed[rbacv1.ClusterRole](t, find(objs, "ClusterRole", "", release))
}

func TestLint(t *testing.T) {
	for _, tc := range []struct {
		name   string
		values map[string]any
	}{
		{"defaults", nil},
		{"everything on", map[string]any{
			"requestNamespaces": []any{"team-a", "team-b"},
			"policies":          map[string]any{"luks.cue": "package policies\n"},
			"metrics":           map[string]any{"serviceMonitor": map[string]any{"enabled": true, "labels": map[string]any{"release": "prom"}}},
			"podAnnotations":    map[string]any{"example.com/a": "b"},
		}},
		{"metrics off", map[string]any{"metrics": map[string]any{"enabled": false}}},
		{"every namespace", map[string]any{"watchAllNamespaces": true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.NoError(t, helmchart.LintValues(tc.values))
		})
	}
	assert.NoError(t, helmchart.Lint())
}

func TestChartMetadata(t *testing.T) {
	c, err := helmchart.Load()
	require.NoError(t, err)
	assert.Equal(t, "v2", c.Metadata.APIVersion, "Chart.yaml apiVersion")
	assert.Equal(t, "remediator", c.Metadata.Name, "Chart.yaml name")
	assert.Regexp(t, `^\d+\.\d+\.\d+$`, c.Metadata.Version, "Chart.yaml version")
	assert.Regexp(t, `^v\d+\.\d+\.\d+`, c.Metadata.AppVersion, "Chart.yaml appVersion: the controller's release, vX.Y.Z, the image's tag")
	roles := false
	for _, f := range c.Files {
		assert.False(t, strings.HasSuffix(f.Name, ".go") || strings.Contains(f.Name, "testdata/"), "%s is packaged into the chart", f.Name)
		roles = roles || f.Name == "files/rbac/role.yaml"
	}
	assert.True(t, roles, "files/rbac/role.yaml is not packaged; templates/rbac.yaml renders the roles from it")
}

func TestDefaultRenderObjects(t *testing.T) {
	got := refs(render(t, nil))
	want := []string{
		"Namespace remediator",
		"PodDisruptionBudget remediator-system/remediator",
		"ServiceAccount remediator-system/remediator",
		"ConfigMap remediator-system/remediator-settings",
		"CustomResourceDefinition remediationrequests.remediator.io",
		"ClusterRole remediator",
		"ClusterRole remediator-edit",
		"ClusterRole remediator-metrics-reader",
		"ClusterRole remediator-plan",
		"ClusterRole remediator-view",
		"ClusterRoleBinding remediator",
		"Role remediator-system/remediator",
		"Role remediator-system/remediator-leader-election",
		"Role remediator-system/remediator-pause",
		"Role trident/remediator",
		"RoleBinding remediator-system/remediator",
		"RoleBinding remediator-system/remediator-leader-election",
		"RoleBinding remediator-system/remediator-pause",
		"RoleBinding trident/remediator",
		"Service remediator-system/remediator-metrics",
		"Deployment remediator-system/remediator",
		"ValidatingAdmissionPolicy remediator-git-writers",
		"ValidatingAdmissionPolicy remediator-node-writes",
		"ValidatingAdmissionPolicy remediator-pause",
		"ValidatingAdmissionPolicy remediator-settings-floor",
		"ValidatingAdmissionPolicyBinding remediator-git-writers",
		"ValidatingAdmissionPolicyBinding remediator-node-writes",
		"ValidatingAdmissionPolicyBinding remediator-pause",
		"ValidatingAdmissionPolicyBinding remediator-settings-floor",
	}
	assert.Equal(t, want, got, "rendered objects, in order")
}

func TestRenderIsDeterministic(t *testing.T) {
	values := map[string]any{"policies": map[string]any{"b.cue": "package policies\n", "a.cue": "package policies\n"}}
	first, err := yaml.Marshal(objects(render(t, values)))
	require.NoError(t, err)
	for range 3 {
		again, err := yaml.Marshal(objects(render(t, values)))
		require.NoError(t, err)
		require.Equal(t, string(first), string(again), "two renders of the same values differ")
	}
}

func objects(objs []*unstructured.Unstructured) []map[string]any {
	out := make([]map[string]any, 0, len(objs))
	for _, o := range objs {
		out = append(out, o.Object)
	}
	return out
}

// TestClusterRoleIsLeastPrivilege: what must be cluster-wide, and nothing that can
// be namespaced or avoided.
func TestClusterRoleIsLeastPrivilege(t *testing.T) {
	cr := clusterRole(t, render(t, nil))
	allows := func(group, resource, verb string) bool {
		for _, r := range cr.Rules {
			if slices.Contains(r.APIGroups, group) && slices.Contains(r.Resources, resource) && slices.Contains(r.Verbs, verb) {
				return true
			}
		}
		return false
	}
	for _, r := range cr.Rules {
		assert.Empty(t, r.ResourceNames, "unexpected rule %+v", r)
		assert.Empty(t, r.NonResourceURLs, "unexpected rule %+v", r)
		assert.NotContains(t, r.Resources, "secrets", "the ClusterRole must not touch secrets: %+v", r)
		if slices.Contains(r.Resources, "leases") {
			// Read everywhere, for the one watch of every namespace's Leases whose progress
			// vouches for the cache of node heartbeats; written only through the Roles
			// (Trident's, leader election's).
			assert.Subset(t, []string{"get", "list", "watch"}, r.Verbs, "Leases are only read cluster-wide: %+v", r)
		}
		for _, v := range r.Verbs {
			assert.NotContains(t, []string{"delete", "deletecollection"}, v, "nothing is deleted cluster-wide (pods go through the Eviction API, Leases through the trident Role): %+v", r)
			assert.NotContains(t, []string{"escalate", "bind", "impersonate"}, v, "privilege-escalating verb %q: %+v", v, r)
		}
		if slices.Contains(r.Resources, "pods") {
			assert.NotContains(t, r.Verbs, "create", "pods may only be created as pods/eviction: %+v", r)
			// Pods are listed by node when a request needs them, never watched: a cache of
			// every pod grows with the cluster.
			assert.NotContains(t, r.Verbs, "watch", "pods must not be watched (cached): %+v", r)
		}
		// Nodes are read (and watched, for the informer cache decisions are made from)
		// and patched to cordon; nothing else.
		if slices.Contains(r.Resources, "nodes") {
			assert.Subset(t, []string{"get", "list", "watch", "patch"}, r.Verbs, "nodes: only get, list, watch and patch (cordon): %+v", r)
		}
		// What the cache holds is only read: no write on PVs, claims, CSINodes,
		// CSIDrivers or VolumeAttachments.
		for _, res := range []string{"persistentvolumes", "persistentvolumeclaims", "csinodes", "csidrivers", "volumeattachments"} {
			if slices.Contains(r.Resources, res) {
				assert.Subset(t, []string{"get", "list", "watch"}, r.Verbs, "%s: read only (get, list, watch): %+v", res, r)
			}
		}
	}
	for _, need := range []struct{ group, resource, verb string }{
		{"remediator.io", "remediationrequests", "watch"},
		{"remediator.io", "remediationrequests", "patch"},
		{"remediator.io", "remediationrequests/status", "patch"},
		{"remediator.io", "remediationrequests/finalizers", "update"},
		{"", "pods", "get"},
		{"", "pods", "list"},
		{"", "pods/eviction", "create"},
		{"", "persistentvolumeclaims", "get"},
		{"", "persistentvolumeclaims", "watch"},
		{"", "persistentvolumes", "get"},
		{"", "persistentvolumes", "watch"},
		{"", "nodes", "get"},
		{"", "nodes", "watch"},
		{"", "nodes", "patch"},
		{"", "events", "create"},
		{"", "events", "patch"},
		{"events.k8s.io", "events", "create"},
		{"storage.k8s.io", "csinodes", "get"},
		{"storage.k8s.io", "csinodes", "watch"},
		{"storage.k8s.io", "csidrivers", "get"},
		{"storage.k8s.io", "csidrivers", "watch"},
		{"storage.k8s.io", "volumeattachments", "get"},
		{"storage.k8s.io", "volumeattachments", "watch"},
	} {
		assert.True(t, allows(need.group, need.resource, need.verb), "the ClusterRole does not allow %s %s.%s", need.verb, need.resource, need.group)
	}
}

// TestNoWildcards covers every rule the chart renders.
func TestNoWildcards(t *testing.T) {
	for _, o := range render(t, map[string]any{"policies": map[string]any{"p.cue": "package policies\n"}}) {
		if o.GetKind() != "ClusterRole" && o.GetKind() != "Role" {
			continue
		}
		var rules []rbacv1.PolicyRule
		if o.GetKind() == "ClusterRole" {
			rules = typed[rbacv1.ClusterRole](t, o).Rules
		} else {
			rules = typed[rbacv1.Role](t, o).Rules
		}
		for _, r := range rules {
			for _, field := range [][]string{r.APIGroups, r.Resources, r.Verbs, r.ResourceNames, r.NonResourceURLs} {
				for _, v := range field {
					assert.NotContains(t, v, "*", "%s: wildcard in %+v", ref(o), r)
				}
			}
		}
	}
}

func TestNamespacedRoles(t *testing.T) {
	leases := func(verbs ...string) rbacv1.PolicyRule {
		return rbacv1.PolicyRule{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: verbs}
	}
	for _, tc := range []struct {
		tridentNS string
	}{{"trident"}, {"netapp-trident"}} {
		t.Run(tc.tridentNS, func(t *testing.T) {
			objs := render(t, map[string]any{"trident": map[string]any{"namespace": tc.tridentNS}})
			want := map[string][]rbacv1.PolicyRule{
				// Events are read cluster-wide (the ClusterRole): the detector's FailedMount
				// events are in the workloads' namespaces.
				// The Trident node plugin's log on a healthy holder, which a decision reads, and
				// the DaemonSets, cached for the detector to see the node plugin's recreated.
				tc.tridentNS + "/" + release: {
					{APIGroups: []string{""}, Resources: []string{"pods/log"}, Verbs: []string{"get"}},
					{APIGroups: []string{"apps"}, Resources: []string{"daemonsets"}, Verbs: []string{"list", "watch"}},
					leases("delete"),
				},
				// The pause ConfigMap, read by the controller (written by the on-call groups),
				// and the Lease that guards the slots of the cap, kept by the controller.
				namespace + "/" + release: {
					{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list", "watch"}},
					leases("create"),
					{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, ResourceNames: []string{"remediator-slots"}, Verbs: []string{"get", "update"}},
				},
				namespace + "/" + release + "-pause": {
					{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"create"}},
					{APIGroups: []string{""}, Resources: []string{"configmaps"}, ResourceNames: []string{"remediator-pause"}, Verbs: []string{"get", "update", "patch"}},
				},
				namespace + "/" + release + "-leader-election": {
					leases("create"),
					{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"},
						ResourceNames: []string{"remediator.remediator.io"}, Verbs: []string{"get", "update"}},
				},
			}
			got := map[string][]rbacv1.PolicyRule{}
			for _, o := range objs {
				switch o.GetKind() {
				case "Role":
					got[o.GetNamespace()+"/"+o.GetName()] = typed[rbacv1.Role](t, o).Rules
				case "RoleBinding":
					rb := typed[rbacv1.RoleBinding](t, o)
					assert.Equal(t, "Role", rb.RoleRef.Kind, "%s binds %+v, want its own Role", ref(o), rb.RoleRef)
					assert.Equal(t, o.GetName(), rb.RoleRef.Name, "%s binds %+v, want its own Role", ref(o), rb.RoleRef)
					wantSubject := rbacv1.Subject{Kind: "ServiceAccount", Name: release, Namespace: namespace}
					if o.GetName() == release+"-pause" {
						wantSubject = rbacv1.Subject{Kind: "Group", APIGroup: rbacv1.GroupName, Name: "remediator:on-call"}
					}
					assert.Equal(t, []rbacv1.Subject{wantSubject}, rb.Subjects, "%s subjects", ref(o))
				}
			}
			assert.Equal(t, want, got, "Roles")
			for _, kind := range []string{"Role", "RoleBinding"} {
				assert.NotNil(t, find(objs, kind, tc.tridentNS, release), "no %s in the Trident namespace %s", kind, tc.tridentNS)
			}
			if tc.tridentNS != "trident" {
				for _, o := range objs {
					assert.NotEqual(t, "trident", o.GetNamespace(), "%s is in namespace trident although trident.namespace is %s", ref(o), tc.tridentNS)
				}
			}
			args := controllerArgs(t, objs)
			assert.Contains(t, args, "--trident-namespace="+tc.tridentNS, "args lack --trident-namespace=%s", tc.tridentNS)
			crb := typed[rbacv1.ClusterRoleBinding](t, find(objs, "ClusterRoleBinding", "", release))
			assert.Equal(t, release, crb.RoleRef.Name, "ClusterRoleBinding roleRef %+v", crb.RoleRef)
			assert.Equal(t, []rbacv1.Subject{{Kind: "ServiceAccount", Name: release, Namespace: namespace}}, crb.Subjects, "ClusterRoleBinding subjects")
		})
	}
}

// TestRolesMatchGeneratedRBAC: the chart's roles are exactly what controller-gen
// generates from the +kubebuilder:rbac markers into files/rbac/role.yaml (which
// api/generated_test.go keeps current), renamed and with the trident namespace
// replaced: editing a marker and running `make manifests` is all it takes.
func TestRolesMatchGeneratedRBAC(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("files", "rbac", "role.yaml"))
	require.NoError(t, err)
	const tridentNS = "netapp-trident"
	objs := render(t, map[string]any{"trident": map[string]any{"namespace": tridentNS}})
	generated := 0
	for doc := range strings.SplitSeq(string(data), "\n---\n") {
		var r struct {
			metav1.TypeMeta `json:",inline"`
			Metadata        metav1.ObjectMeta   `json:"metadata"`
			Rules           []rbacv1.PolicyRule `json:"rules"`
		}
		require.NoError(t, yaml.UnmarshalStrict([]byte(strings.TrimPrefix(doc, "---\n")), &r), "files/rbac/role.yaml")
		if r.Kind == "" {
			continue
		}
		generated++
		var rendered []rbacv1.PolicyRule
		switch r.Kind {
		case "ClusterRole":
			rendered = clusterRole(t, objs).Rules
		case "Role":
			ns := r.Metadata.Namespace
			switch ns {
			case "trident":
				ns = tridentNS
			case "remediator-system":
				ns = namespace // the release namespace: the pause ConfigMap's Role
			}
			rendered = typed[rbacv1.Role](t, find(objs, "Role", ns, release)).Rules
		default:
			require.FailNow(t, "files/rbac/role.yaml: unexpected kind "+r.Kind)
		}
		assert.Equal(t, r.Rules, rendered, "%s %s drifted from files/rbac/role.yaml (expected: generated, actual: rendered)", r.Kind, r.Metadata.Namespace)
	}
	assert.Equal(t, 3, generated, "files/rbac/role.yaml must hold the ClusterRole and the trident and remediator-system Roles")
}

// TestLeaderElectionRoleNamesTheControllersLease: the leader-election Role may read
// and renew only the controller's own Lease, so its name must match.
func TestLeaderElectionRoleNamesTheControllersLease(t *testing.T) {
	src, err := os.ReadFile(filepath.Join("..", "..", "internal", "cmd", "controller", "controller.go"))
	require.NoError(t, err)
	m := regexp.MustCompile(`LeaderElectionID:\s*"([^"]+)"`).FindSubmatch(src)
	require.NotNil(t, m, `internal/cmd/controller/controller.go: no LeaderElectionID: "..." literal; update this test and the chart's remediator.leaderElectionID together`)
	role := typed[rbacv1.Role](t, find(render(t, nil), "Role", namespace, release+"-leader-election"))
	for _, r := range role.Rules {
		if len(r.ResourceNames) > 0 {
			assert.Equal(t, []string{string(m[1])}, r.ResourceNames, "the leader-election Role must name the controller's LeaderElectionID")
		}
	}
}

func TestDeploymentArgs(t *testing.T) {
	for _, tc := range []struct {
		name    string
		values  map[string]any
		want    []string
		wantNot []string // prefixes that must not appear
	}{{
		name: "defaults",
		want: []string{
			"--leader-elect", "--leader-election-namespace=$(POD_NAMESPACE)",
			"--metrics-bind-address=:8080", "--health-probe-bind-address=:8081",
			"--trident-namespace=trident", "--driver-name=csi.trident.netapp.io",
			"--node-plugin-selector=app=node.csi.trident.netapp.io",
			"--max-concurrent-remediations=2", "--node-lease-grace-period=50s", "--v=0", "--logging-format=text",
			// Only the namespace the remediation repository syncs to, not every one.
			"--request-namespaces=remediator",
		},
		wantNot: []string{"--policies-dir", "--policy-reload-interval", "--kubeconfig"},
	}, {
		name: "values",
		values: map[string]any{
			"trident": map[string]any{
				"namespace": "netapp-trident", "driverName": "csi.example.com",
				"nodePluginSelector": "app in (trident-node, trident-node-linux)",
			},
			"requestNamespaces":         []any{"team-a", "team-b"},
			"maxConcurrentRemediations": 5,
			"nodeLeaseGracePeriod":      "1m",
			"logLevel":                  4,
			"logFormat":                 "json",
			"metrics":                   map[string]any{"port": 9090},
		},
		want: []string{
			"--metrics-bind-address=:9090",
			"--trident-namespace=netapp-trident", "--driver-name=csi.example.com",
			"--node-plugin-selector=app in (trident-node, trident-node-linux)",
			"--request-namespaces=team-a,team-b", "--max-concurrent-remediations=5",
			"--node-lease-grace-period=1m", "--v=4", "--logging-format=json",
		},
	}, {
		// Widening is explicit, and then the list no longer applies.
		name:    "every namespace",
		values:  map[string]any{"watchAllNamespaces": true},
		want:    []string{"--leader-elect"},
		wantNot: []string{"--request-namespaces"},
	}, {
		name:    "every namespace despite a list",
		values:  map[string]any{"watchAllNamespaces": true, "requestNamespaces": []any{"team-a"}},
		want:    []string{"--leader-elect"},
		wantNot: []string{"--request-namespaces"},
	}, {
		name:    "metrics off",
		values:  map[string]any{"metrics": map[string]any{"enabled": false}},
		want:    []string{"--metrics-bind-address=0"},
		wantNot: []string{"--metrics-bind-address=:"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			objs := render(t, tc.values)
			c := deployment(t, objs).Spec.Template.Spec.Containers[0]
			// The settings' $(VAR)s resolved from the settings ConfigMap, as the kubelet does.
			c.Args = controllerArgs(t, objs)
			// The image's two binaries: the Deployment names the controller's.
			assert.Equal(t, []string{"/remediator-controller"}, c.Command, "command")
			for _, w := range tc.want {
				assert.Contains(t, c.Args, w)
			}
			for _, p := range tc.wantNot {
				assert.False(t, slices.ContainsFunc(c.Args, func(a string) bool { return strings.HasPrefix(a, p) }), "args %q contain %s", c.Args, p)
			}
			seen := map[string]bool{}
			for _, a := range c.Args {
				flag, _, _ := strings.Cut(a, "=")
				assert.False(t, seen[flag], "%s given twice in %q", flag, c.Args)
				seen[flag] = true
			}
		})
	}
}

// TestRequestNamespacesFailClosed: an empty list used to mean every namespace, so a
// values file that cleared it widened the controller's reach silently; now it fails,
// as does a name that is no namespace (the controller would watch nothing there).
func TestRequestNamespacesFailClosed(t *testing.T) {
	for _, tc := range []struct {
		name   string
		values map[string]any
		want   []string
	}{
		{"empty list", map[string]any{"requestNamespaces": []any{}}, []string{"requestNamespaces is empty", "watchAllNamespaces: true"}},
		{"null list", map[string]any{"requestNamespaces": nil}, []string{"requestNamespaces is empty"}},
		{"not a namespace name", map[string]any{"requestNamespaces": []any{"Team_A"}}, []string{`requestNamespaces: "Team_A" is not a namespace name`}},
		{"a comma in a name", map[string]any{"requestNamespaces": []any{"team-a,kube-system"}}, []string{"is not a namespace name"}},
		{"too long", map[string]any{"requestNamespaces": []any{strings.Repeat("a", 64)}}, []string{"is not a namespace name"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := helmchart.Render(release, namespace, tc.values)
			require.Error(t, err)
			for _, w := range tc.want {
				assert.Contains(t, err.Error(), w)
			}
		})
	}
	// The same empty list is fine once widening is asked for.
	objs, err := helmchart.Render(release, namespace, map[string]any{"requestNamespaces": []any{}, "watchAllNamespaces": true})
	require.NoError(t, err)
	assert.False(t, slices.ContainsFunc(deployment(t, objs).Spec.Template.Spec.Containers[0].Args, func(a string) bool {
		return strings.HasPrefix(a, "--request-namespaces")
	}))
}

func TestDeploymentSpec(t *testing.T) {
	objs := render(t, nil)
	d := deployment(t, objs)
	assert.Equal(t, ptr.To[int32](2), d.Spec.Replicas, "replicas: want 2 (HA through leader election)")
	pod := d.Spec.Template.Spec
	require.Len(t, pod.Containers, 1, "want one container")
	c := pod.Containers[0]
	assert.Equal(t, "ghcr.io/remediator/remediator:"+chartMetadata(t).AppVersion, c.Image, "image: want the released repository with the chart's appVersion")
	assert.Equal(t, release, pod.ServiceAccountName, "serviceAccountName")
	assert.Equal(t, ptr.To(true), pod.AutomountServiceAccountToken, "the pod's automountServiceAccountToken")
	sa := typed[corev1.ServiceAccount](t, find(objs, "ServiceAccount", namespace, release))
	assert.Equal(t, ptr.To(true), sa.AutomountServiceAccountToken, "the ServiceAccount does not mount its token")

	wantEnv := corev1.EnvVar{Name: "POD_NAMESPACE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}}
	assert.Contains(t, c.Env, wantEnv, "env lacks POD_NAMESPACE from the downward API")

	probe := func(name string, p *corev1.Probe, path string) {
		if !assert.NotNil(t, p, "%s probe: want an httpGet", name) || !assert.NotNil(t, p.HTTPGet, "%s probe: want an httpGet, got %+v", name, p) {
			return
		}
		assert.Equal(t, path, p.HTTPGet.Path, "%s probe path", name)
		assert.Contains(t, []string{"health", "8081"}, p.HTTPGet.Port.String(), "%s probe: want port 8081", name)
	}
	probe("liveness", c.LivenessProbe, "/healthz")
	probe("readiness", c.ReadinessProbe, "/readyz")
	assert.True(t, slices.ContainsFunc(c.Ports, func(p corev1.ContainerPort) bool { return p.Name == "health" && p.ContainerPort == 8081 }),
		"ports %+v lack health 8081", c.Ports)
	assert.True(t, slices.ContainsFunc(c.Ports, func(p corev1.ContainerPort) bool { return p.Name == "http-metrics" && p.ContainerPort == 8080 }),
		"ports %+v lack http-metrics 8080", c.Ports)

	psc := pod.SecurityContext
	if assert.NotNil(t, psc, "pod securityContext: want runAsNonRoot, runAsUser 65532, seccomp RuntimeDefault") {
		assert.Equal(t, ptr.To(true), psc.RunAsNonRoot, "pod securityContext runAsNonRoot")
		assert.Equal(t, ptr.To[int64](65532), psc.RunAsUser, "pod securityContext runAsUser")
		if assert.NotNil(t, psc.SeccompProfile, "pod securityContext: want seccomp RuntimeDefault") {
			assert.Equal(t, corev1.SeccompProfileTypeRuntimeDefault, psc.SeccompProfile.Type, "pod securityContext seccomp")
		}
	}
	sc := c.SecurityContext
	require.NotNil(t, sc, "the container has no securityContext")
	assert.Equal(t, ptr.To(true), sc.RunAsNonRoot, "container: want runAsNonRoot")
	assert.Equal(t, ptr.To[int64](65532), sc.RunAsUser, "container: want runAsUser 65532")
	assert.Equal(t, ptr.To(true), sc.ReadOnlyRootFilesystem, "container: want readOnlyRootFilesystem")
	assert.Equal(t, ptr.To(false), sc.AllowPrivilegeEscalation, "container: want allowPrivilegeEscalation false")
	if assert.NotNil(t, sc.Capabilities, "container: want capabilities drop [ALL] and nothing added") {
		assert.Equal(t, []corev1.Capability{"ALL"}, sc.Capabilities.Drop, "container: want capabilities drop [ALL]")
		assert.Empty(t, sc.Capabilities.Add, "container: want no capabilities added")
	}
	assert.False(t, sc.Privileged != nil && *sc.Privileged, "container: privileged")
	if assert.NotNil(t, sc.SeccompProfile, "container: want seccomp RuntimeDefault") {
		assert.Equal(t, corev1.SeccompProfileTypeRuntimeDefault, sc.SeccompProfile.Type, "container: want seccomp RuntimeDefault")
	}

	// The one writable place on a read-only root filesystem.
	assert.True(t, slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.MountPath == "/tmp" && !m.ReadOnly }),
		"want a writable mount at /tmp; mounts %+v", c.VolumeMounts)
	assert.True(t, slices.ContainsFunc(pod.Volumes, func(v corev1.Volume) bool { return v.Name == "tmp" && v.EmptyDir != nil }),
		"want an emptyDir volume tmp; volumes %+v", pod.Volumes)

	assert.False(t, c.Resources.Requests.Cpu().IsZero(), "resources %+v: want a cpu request", c.Resources)
	assert.False(t, c.Resources.Requests.Memory().IsZero(), "resources %+v: want a memory request", c.Resources)
	assert.False(t, c.Resources.Limits.Memory().IsZero(), "resources %+v: want a memory limit", c.Resources)

	// Replicas spread over nodes when they can, never blocked when they cannot.
	aff := pod.Affinity
	require.NotNil(t, aff, "want one soft pod anti-affinity term")
	require.NotNil(t, aff.PodAntiAffinity, "want one soft pod anti-affinity term, got %+v", aff)
	require.Len(t, aff.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution, 1, "want one soft pod anti-affinity term")
	require.Empty(t, aff.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution, "want no hard pod anti-affinity term")
	term := aff.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution[0].PodAffinityTerm
	assert.Equal(t, corev1.LabelHostname, term.TopologyKey, "anti-affinity term %+v: want the pods' selector by %s", term, corev1.LabelHostname)
	if assert.NotNil(t, term.LabelSelector, "anti-affinity term %+v: want the pods' selector", term) {
		assert.Equal(t, d.Spec.Selector.MatchLabels, term.LabelSelector.MatchLabels, "anti-affinity term: want the pods' selector")
	}

	// A user's affinity replaces the default.
	custom := map[string]any{"nodeAffinity": map[string]any{"requiredDuringSchedulingIgnoredDuringExecution": map[string]any{
		"nodeSelectorTerms": []any{map[string]any{"matchExpressions": []any{map[string]any{"key": "role", "operator": "In", "values": []any{"infra"}}}}},
	}}}
	aff = deployment(t, render(t, map[string]any{"affinity": custom})).Spec.Template.Spec.Affinity
	if assert.NotNil(t, aff, "affinity from values") {
		assert.NotNil(t, aff.NodeAffinity, "affinity from values: got %+v", aff)
		assert.Nil(t, aff.PodAntiAffinity, "affinity from values must replace the default: got %+v", aff)
	}
}

func TestLabels(t *testing.T) {
	for _, o := range render(t, map[string]any{"metrics": map[string]any{"serviceMonitor": map[string]any{"enabled": true}}}) {
		l := o.GetLabels()
		for k, v := range map[string]string{
			"app.kubernetes.io/name":       "remediator",
			"app.kubernetes.io/instance":   release,
			"app.kubernetes.io/version":    chartMetadata(t).AppVersion,
			"app.kubernetes.io/managed-by": "Helm",
			"helm.sh/chart":                "remediator-" + chartMetadata(t).Version,
		} {
			assert.Equal(t, v, l[k], "%s: label %s", ref(o), k)
		}
	}
}

func TestPolicies(t *testing.T) {
	const cm = release + "-policies"
	t.Run("unset", func(t *testing.T) {
		objs := render(t, map[string]any{"policies": map[string]any{}})
		assert.Nil(t, find(objs, "ConfigMap", namespace, cm), "ConfigMap %s rendered without policies", cm)
		pod := deployment(t, objs).Spec.Template.Spec
		assert.False(t, slices.ContainsFunc(pod.Containers[0].Args, func(a string) bool {
			return strings.HasPrefix(a, "--policies-dir") || strings.HasPrefix(a, "--policy-reload-interval")
		}), "--policies-dir passed without policies: %q", pod.Containers[0].Args)
		assert.Len(t, pod.Volumes, 1, "volumes: want only tmp")
	})
	t.Run("set", func(t *testing.T) {
		policies := map[string]any{
			"luks.cue": "package policies\n\nluks: true\n",
			"csi.cue":  "package policies\n",
		}
		objs := render(t, map[string]any{"policies": policies})
		cmObj := typed[corev1.ConfigMap](t, find(objs, "ConfigMap", namespace, cm))
		assert.Equal(t, map[string]string{"luks.cue": policies["luks.cue"].(string), "csi.cue": policies["csi.cue"].(string)}, cmObj.Data, "ConfigMap data")
		d := deployment(t, objs)
		pod := d.Spec.Template.Spec
		c := pod.Containers[0]
		assert.Contains(t, c.Args, "--policies-dir="+policiesDir)
		mount := slices.IndexFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.MountPath == policiesDir })
		require.GreaterOrEqual(t, mount, 0, "mounts %+v: want %s read-only", c.VolumeMounts, policiesDir)
		require.True(t, c.VolumeMounts[mount].ReadOnly, "mounts %+v: want %s read-only", c.VolumeMounts, policiesDir)
		vol := slices.IndexFunc(pod.Volumes, func(v corev1.Volume) bool { return v.Name == c.VolumeMounts[mount].Name })
		if assert.GreaterOrEqual(t, vol, 0, "volumes %+v: want ConfigMap %s behind %s", pod.Volumes, cm, policiesDir) &&
			assert.NotNil(t, pod.Volumes[vol].ConfigMap, "volumes %+v: want ConfigMap %s behind %s", pod.Volumes, cm, policiesDir) {
			assert.Equal(t, cm, pod.Volumes[vol].ConfigMap.Name, "the ConfigMap behind %s", policiesDir)
		}
		assert.Contains(t, c.Args, "--policy-reload-interval=30s")
		// The controller reloads the mounted policies in place and keeps the last good
		// one on a broken edit; a changed policy must not restart the pods.
		policies["luks.cue"] = "package policies\n\nluks: false\n"
		again := deployment(t, render(t, map[string]any{"policies": policies}))
		assert.Equal(t, d.Spec.Template, again.Spec.Template, "changing values.policies changes the pod template, which restarts the controller")
	})
	for _, bad := range []string{"policy.yaml", "luks_test.cue"} {
		t.Run("refuses "+bad, func(t *testing.T) {
			_, err := helmchart.Render(release, namespace, map[string]any{"policies": map[string]any{bad: "package policies\n"}})
			assert.ErrorContains(t, err, bad, "want an error naming %s", bad)
		})
	}
}

func TestMetricsServiceAndServiceMonitor(t *testing.T) {
	t.Run("defaults", func(t *testing.T) {
		objs := render(t, nil)
		svc := typed[corev1.Service](t, find(objs, "Service", namespace, release+"-metrics"))
		d := deployment(t, objs)
		if assert.Len(t, svc.Spec.Ports, 1, "Service ports: want http-metrics 8080") {
			p := svc.Spec.Ports[0]
			assert.Equal(t, "http-metrics", p.Name, "Service port name")
			assert.Equal(t, int32(8080), p.Port, "Service port")
			assert.Equal(t, "http-metrics", p.TargetPort.String(), "Service targetPort")
		}
		assert.Equal(t, d.Spec.Selector.MatchLabels, svc.Spec.Selector, "Service selector (expected: the Deployment's selector)")
		for _, o := range objs {
			assert.NotEqual(t, "ServiceMonitor", o.GetKind(), "%s rendered although metrics.serviceMonitor.enabled is false", ref(o))
		}
	})
	t.Run("serviceMonitor", func(t *testing.T) {
		objs := render(t, map[string]any{"metrics": map[string]any{"serviceMonitor": map[string]any{
			"enabled": true, "interval": "15s", "labels": map[string]any{"release": "kube-prometheus"},
		}}})
		o := find(objs, "ServiceMonitor", namespace, release)
		require.NotNil(t, o, "no ServiceMonitor in %q", refs(objs))
		sm := decodeServiceMonitor(t, o)
		svc := find(objs, "Service", namespace, release+"-metrics")
		require.NotNil(t, svc, "no metrics Service in %q", refs(objs))
		assert.Equal(t, "kube-prometheus", o.GetLabels()["release"], "labels %v lack release=kube-prometheus", o.GetLabels())
		for k, v := range sm.Spec.Selector.MatchLabels {
			assert.Equal(t, v, svc.GetLabels()[k], "ServiceMonitor selects %s=%s; the Service's label", k, v)
		}
		if assert.Len(t, sm.Spec.Endpoints, 1, "endpoints") {
			assert.Equal(t, "http-metrics", sm.Spec.Endpoints[0].Port, "endpoint port")
			assert.Equal(t, "15s", sm.Spec.Endpoints[0].Interval, "endpoint interval")
			// --metrics-secure: HTTPS with a token the controller has the API server review.
			assert.Equal(t, "https", sm.Spec.Endpoints[0].Scheme)
			assert.Equal(t, "/var/run/secrets/kubernetes.io/serviceaccount/token", sm.Spec.Endpoints[0].BearerTokenFile)
			if assert.NotNil(t, sm.Spec.Endpoints[0].TLSConfig) {
				assert.True(t, sm.Spec.Endpoints[0].TLSConfig.InsecureSkipVerify, "the controller's certificate is self-signed")
			}
		}
		assert.Contains(t, deployment(t, objs).Spec.Template.Spec.Containers[0].Args, "--metrics-secure")
		reader := typed[rbacv1.ClusterRole](t, find(objs, "ClusterRole", "", release+"-metrics-reader"))
		assert.Equal(t, []rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}}, reader.Rules)
	})
	t.Run("plain HTTP", func(t *testing.T) {
		objs := render(t, map[string]any{"metrics": map[string]any{"secure": false, "serviceMonitor": map[string]any{"enabled": true}}})
		sm := decodeServiceMonitor(t, find(objs, "ServiceMonitor", namespace, release))
		if assert.Len(t, sm.Spec.Endpoints, 1) {
			assert.Empty(t, sm.Spec.Endpoints[0].Scheme)
			assert.Nil(t, sm.Spec.Endpoints[0].TLSConfig)
		}
		assert.NotContains(t, deployment(t, objs).Spec.Template.Spec.Containers[0].Args, "--metrics-secure")
		assert.Nil(t, find(objs, "ClusterRole", "", release+"-metrics-reader"))
		assert.Equal(t, []string{namespace}, sm.Spec.NamespaceSelector.MatchNames, "namespaceSelector")
	})
	t.Run("metrics off", func(t *testing.T) {
		objs := render(t, map[string]any{"metrics": map[string]any{"enabled": false}})
		assert.Nil(t, find(objs, "Service", namespace, release+"-metrics"), "the metrics Service rendered with metrics off")
		ports := deployment(t, objs).Spec.Template.Spec.Containers[0].Ports
		assert.False(t, slices.ContainsFunc(ports, func(p corev1.ContainerPort) bool { return p.Name == "http-metrics" }), "ports %+v expose metrics with metrics off", ports)
		_, err := helmchart.Render(release, namespace, map[string]any{"metrics": map[string]any{"enabled": false, "serviceMonitor": map[string]any{"enabled": true}}})
		assert.ErrorContains(t, err, "metrics.enabled", "a ServiceMonitor without metrics: want an error naming metrics.enabled")
	})
}

// serviceMonitor is the part of prometheus-operator's monitoring.coreos.com/v1
// ServiceMonitor the chart uses (its Go types are not a dependency of this module),
// with the upstream JSON names so that strict decoding catches a misspelt field.
type serviceMonitor struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		Selector          metav1.LabelSelector `json:"selector"`
		NamespaceSelector struct {
			MatchNames []string `json:"matchNames,omitempty"`
		} `json:"namespaceSelector"`
		Endpoints []struct {
			Port            string `json:"port"`
			Path            string `json:"path,omitempty"`
			Interval        string `json:"interval,omitempty"`
			Scheme          string `json:"scheme,omitempty"`
			BearerTokenFile string `json:"bearerTokenFile,omitempty"`
			TLSConfig       *struct {
				InsecureSkipVerify bool `json:"insecureSkipVerify,omitempty"`
			} `json:"tlsConfig,omitempty"`
		} `json:"endpoints"`
	} `json:"spec"`
}

func decodeServiceMonitor(t *testing.T, o *unstructured.Unstructured) *serviceMonitor {
	t.Helper()
	sm := &serviceMonitor{}
	require.NoError(t, strictDecode(o, sm))
	return sm
}

var decodeScheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(apiextensionsv1.AddToScheme(s))
	return s
}()

// strictDecode decodes o into out the way the API server's strict field validation
// does: case-sensitive, no unknown and no duplicate fields.
func strictDecode(o *unstructured.Unstructured, out any) error {
	data, err := json.Marshal(o.Object)
	if err != nil {
		return err
	}
	strictErrs, err := kjson.UnmarshalStrict(data, out)
	if err != nil {
		return fmt.Errorf("%s: %w", ref(o), err)
	}
	if len(strictErrs) > 0 {
		return fmt.Errorf("%s: %v", ref(o), strictErrs)
	}
	return nil
}

// typedObject returns a new Go value of o's kind.
func typedObject(o *unstructured.Unstructured) (any, error) {
	if o.GroupVersionKind().Group == "monitoring.coreos.com" && o.GetKind() == "ServiceMonitor" {
		return &serviceMonitor{}, nil
	}
	if o.GroupVersionKind().Group == "monitoring.coreos.com" && o.GetKind() == "PrometheusRule" {
		return &prometheusRule{}, nil
	}
	return decodeScheme.New(o.GroupVersionKind())
}

// TestObjectsDecodeStrictly catches a misspelt or misplaced field (say
// readOnlyRootFileSystem) that Kubernetes would drop or refuse.
func TestObjectsDecodeStrictly(t *testing.T) {
	for name, values := range map[string]map[string]any{
		"defaults": nil,
		"everything on": {
			"requestNamespaces": []any{"team-a"},
			"policies":          map[string]any{"luks.cue": "package policies\n"},
			"metrics": map[string]any{
				"serviceMonitor": map[string]any{"enabled": true},
				"prometheusRule": map[string]any{"enabled": true},
				"dashboard":      map[string]any{"enabled": true},
			},
			"podSecurityContext": map[string]any{"runAsUser": nil, "fsGroup": 2000},
			"securityContext":    map[string]any{"runAsUser": nil},
			"extraArgs":          []any{"--pprof-bind-address=:6060"},
			"imagePullSecrets":   []any{map[string]any{"name": "regcred"}},
			"tolerations":        []any{map[string]any{"key": "infra", "operator": "Exists", "effect": "NoSchedule"}},
			"nodeSelector":       map[string]any{"kubernetes.io/os": "linux"},
			"priorityClassName":  "system-cluster-critical",
			"topologySpreadConstraints": []any{map[string]any{
				"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "ScheduleAnyway",
				"labelSelector": map[string]any{"matchLabels": map[string]any{"app.kubernetes.io/name": "remediator"}},
			}},
			"serviceAccount": map[string]any{"annotations": map[string]any{"example.com/role": "x"}},
		},
		"the sync agent, monitored and placed": {
			"metrics": map[string]any{
				"serviceMonitor": map[string]any{"enabled": true},
				"prometheusRule": map[string]any{"enabled": true},
			},
			"sync": map[string]any{
				"enabled": true, "repo": "https://git.example.com/r.git",
				"nodeSelector":      map[string]any{"kubernetes.io/os": "linux"},
				"tolerations":       []any{map[string]any{"key": "gitops", "operator": "Exists", "effect": "NoSchedule"}},
				"priorityClassName": "system-cluster-critical",
				"affinity": map[string]any{"nodeAffinity": map[string]any{"preferredDuringSchedulingIgnoredDuringExecution": []any{map[string]any{
					"weight": 1, "preference": map[string]any{"matchExpressions": []any{map[string]any{
						"key": "node-role.example.com/infra", "operator": "Exists",
					}}},
				}}}},
			},
		},
	} {
		t.Run(name, func(t *testing.T) {
			for _, o := range render(t, values) {
				out, err := typedObject(o)
				if !assert.NoError(t, err, "%s: no Go type", ref(o)) {
					continue
				}
				assert.NoError(t, strictDecode(o, out))
			}
		})
	}

	t.Run("catches a typo", func(t *testing.T) {
		d := find(render(t, nil), "Deployment", namespace, release)
		containers, _, _ := unstructured.NestedSlice(d.Object, "spec", "template", "spec", "containers")
		sc := containers[0].(map[string]any)["securityContext"].(map[string]any)
		sc["readOnlyRootFileSystem"] = sc["readOnlyRootFilesystem"]
		delete(sc, "readOnlyRootFilesystem")
		require.NoError(t, unstructured.SetNestedSlice(d.Object, containers, "spec", "template", "spec", "containers"))
		err := strictDecode(d, &appsv1.Deployment{})
		assert.ErrorContains(t, err, "readOnlyRootFileSystem", "want an unknown-field error")
	})
}

// TestServerSideDryRun applies every rendered object to a real kube-apiserver
// (envtest, with the CRD installed) as a server-side dry run, so the API server's
// validation and schema (including the CRD's) judge them. Server-side apply refuses
// fields not in the schema. It takes a few seconds to start the control plane.
func TestServerSideDryRun(t *testing.T) {
	if testing.Short() {
		t.Skip("starts kube-apiserver and etcd")
	}
	const tridentNS = "netapp-trident"
	env := testenv.StartT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := env.Client

	// Namespaced objects need their namespace; Helm's --create-namespace makes the
	// release's, Trident's install makes its own.
	for _, ns := range []string{namespace, tridentNS} {
		err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
		if !apierrors.IsAlreadyExists(err) {
			require.NoError(t, err, "creating namespace %s", ns)
		}
	}

	objs := render(t, map[string]any{
		"trident":            map[string]any{"namespace": tridentNS},
		"requestNamespaces":  []any{"team-a", "team-b"},
		"policies":           map[string]any{"luks.cue": "package policies\n"},
		"imagePullSecrets":   []any{map[string]any{"name": "regcred"}},
		"tolerations":        []any{map[string]any{"key": "infra", "operator": "Exists", "effect": "NoSchedule"}},
		"metrics":            map[string]any{"dashboard": map[string]any{"enabled": true}},
		"podSecurityContext": map[string]any{"runAsUser": nil, "runAsGroup": nil},
		"securityContext":    map[string]any{"runAsUser": nil, "runAsGroup": nil},
		"extraArgs":          []any{"--pprof-bind-address=:6060"},
		"extraEnv": []any{map[string]any{"name": "KUBERNETES_SERVICE_HOST", "value": "192.0.2.2"},
			map[string]any{"name": "GOMEMLIMIT", "valueFrom": map[string]any{"resourceFieldRef": map[string]any{"resource": "limits.memory"}}}},
	})
	apply := func(o *unstructured.Unstructured) error {
		return c.Apply(ctx, client.ApplyConfigurationFromUnstructured(o),
			client.DryRunAll, client.ForceOwnership, client.FieldOwner("chart-test"))
	}
	for _, o := range objs {
		assert.NoError(t, apply(o.DeepCopy()), ref(o))
	}

	// The check has teeth: the API server refuses a misspelt field.
	d := find(objs, "Deployment", namespace, release).DeepCopy()
	require.NoError(t, unstructured.SetNestedField(d.Object, true, "spec", "template", "spec", "automountServiceAccountTokens"))
	assert.ErrorContains(t, apply(d), "automountServiceAccountTokens", "a misspelt field: want the API server to refuse it")
}
