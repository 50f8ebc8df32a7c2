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
	"reflect"
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
	"sigs.k8s.io/controller-runtime/pkg/client"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"github.com/remediator/remediator/test/helmchart"
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
	if err != nil {
		t.Fatalf("rendering the chart: %v", err)
	}
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
	if o == nil {
		t.Fatalf("want a %T, got none", *new(T))
	}
	out := new(T)
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, out); err != nil {
		t.Fatalf("converting %s: %v", ref(o), err)
	}
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
			if err := helmchart.LintValues(tc.values); err != nil {
				t.Error(err)
			}
		})
	}
	if err := helmchart.Lint(); err != nil {
		t.Error(err)
	}
}

func TestChartMetadata(t *testing.T) {
	c, err := helmchart.Load()
	if err != nil {
		t.Fatal(err)
	}
	if c.Metadata.APIVersion != "v2" || c.Metadata.Name != "remediator" || c.Metadata.Version != "0.1.0" || c.Metadata.AppVersion == "" {
		t.Errorf("Chart.yaml: apiVersion %q name %q version %q appVersion %q; want v2, remediator, 0.1.0 and an appVersion",
			c.Metadata.APIVersion, c.Metadata.Name, c.Metadata.Version, c.Metadata.AppVersion)
	}
	roles := false
	for _, f := range c.Files {
		if strings.HasSuffix(f.Name, ".go") || strings.Contains(f.Name, "testdata/") {
			t.Errorf("%s is packaged into the chart", f.Name)
		}
		roles = roles || f.Name == "files/rbac/role.yaml"
	}
	if !roles {
		t.Error("files/rbac/role.yaml is not packaged; templates/rbac.yaml renders the roles from it")
	}
}

func TestDefaultRenderObjects(t *testing.T) {
	got := refs(render(t, nil))
	want := []string{
		"CustomResourceDefinition remediationrequests.remediator.io",
		"ServiceAccount remediator-system/remediator",
		"ClusterRole remediator",
		"ClusterRoleBinding remediator",
		"Role kube-node-lease/remediator",
		"Role remediator-system/remediator-leader-election",
		"Role trident/remediator",
		"RoleBinding kube-node-lease/remediator",
		"RoleBinding remediator-system/remediator-leader-election",
		"RoleBinding trident/remediator",
		"Service remediator-system/remediator-metrics",
		"Deployment remediator-system/remediator",
	}
	if !slices.Equal(got, want) {
		t.Errorf("rendered objects, in order:\n got %q\nwant %q", got, want)
	}
}

func TestRenderIsDeterministic(t *testing.T) {
	values := map[string]any{"policies": map[string]any{"b.cue": "package policies\n", "a.cue": "package policies\n"}}
	first, err := yaml.Marshal(objects(render(t, values)))
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		again, err := yaml.Marshal(objects(render(t, values)))
		if err != nil {
			t.Fatal(err)
		}
		if string(again) != string(first) {
			t.Fatal("two renders of the same values differ")
		}
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
		if len(r.ResourceNames) > 0 || len(r.NonResourceURLs) > 0 {
			t.Errorf("unexpected rule %+v", r)
		}
		if slices.Contains(r.Resources, "secrets") {
			t.Errorf("the ClusterRole must not touch secrets: %+v", r)
		}
		if slices.Contains(r.Resources, "leases") {
			t.Errorf("Leases belong in the namespaced Roles (trident, kube-node-lease, leader election), not the ClusterRole: %+v", r)
		}
		for _, v := range r.Verbs {
			if v == "delete" || v == "deletecollection" {
				t.Errorf("nothing is deleted cluster-wide (pods go through the Eviction API, Leases through the trident Role): %+v", r)
			}
			if v == "escalate" || v == "bind" || v == "impersonate" {
				t.Errorf("privilege-escalating verb %q: %+v", v, r)
			}
		}
		if slices.Contains(r.Resources, "pods") && slices.Contains(r.Verbs, "create") {
			t.Errorf("pods may only be created as pods/eviction: %+v", r)
		}
		// Nodes are read (and watched, for the informer cache decisions are made from)
		// and patched to cordon; nothing else.
		if slices.Contains(r.Resources, "nodes") && slices.ContainsFunc(r.Verbs, func(v string) bool { return v != "get" && v != "list" && v != "watch" && v != "patch" }) {
			t.Errorf("nodes: only get, list, watch and patch (cordon): %+v", r)
		}
		// Pods are listed by node when a request needs them, never watched: a cache of
		// every pod grows with the cluster.
		if slices.Contains(r.Resources, "pods") && slices.Contains(r.Verbs, "watch") {
			t.Errorf("pods must not be watched (cached): %+v", r)
		}
		// What the cache holds is only read: no write on PVs, claims or CSINodes.
		for _, res := range []string{"persistentvolumes", "persistentvolumeclaims", "csinodes"} {
			if slices.Contains(r.Resources, res) && slices.ContainsFunc(r.Verbs, func(v string) bool { return v != "get" && v != "list" && v != "watch" }) {
				t.Errorf("%s: read only (get, list, watch): %+v", res, r)
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
	} {
		if !allows(need.group, need.resource, need.verb) {
			t.Errorf("the ClusterRole does not allow %s %s.%s", need.verb, need.resource, need.group)
		}
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
					if strings.Contains(v, "*") {
						t.Errorf("%s: wildcard %q in %+v", ref(o), v, r)
					}
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
				tc.tridentNS + "/" + release: {
					{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"list", "watch"}},
					leases("delete", "get", "list", "watch"),
				},
				"kube-node-lease/" + release: {leases("get", "list", "watch")},
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
					if rb.RoleRef.Kind != "Role" || rb.RoleRef.Name != o.GetName() {
						t.Errorf("%s binds %+v, want its own Role", ref(o), rb.RoleRef)
					}
					wantSubject := rbacv1.Subject{Kind: "ServiceAccount", Name: release, Namespace: namespace}
					if !slices.Equal(rb.Subjects, []rbacv1.Subject{wantSubject}) {
						t.Errorf("%s subjects %+v, want %+v", ref(o), rb.Subjects, wantSubject)
					}
				}
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("Roles:\n got %+v\nwant %+v", got, want)
			}
			for _, kind := range []string{"Role", "RoleBinding"} {
				if find(objs, kind, tc.tridentNS, release) == nil {
					t.Errorf("no %s in the Trident namespace %s", kind, tc.tridentNS)
				}
			}
			if tc.tridentNS != "trident" {
				for _, o := range objs {
					if o.GetNamespace() == "trident" {
						t.Errorf("%s is in namespace trident although trident.namespace is %s", ref(o), tc.tridentNS)
					}
				}
			}
			if args := deployment(t, objs).Spec.Template.Spec.Containers[0].Args; !slices.Contains(args, "--trident-namespace="+tc.tridentNS) {
				t.Errorf("args %q lack --trident-namespace=%s", args, tc.tridentNS)
			}
			crb := typed[rbacv1.ClusterRoleBinding](t, find(objs, "ClusterRoleBinding", "", release))
			if crb.RoleRef.Name != release || !slices.Equal(crb.Subjects, []rbacv1.Subject{{Kind: "ServiceAccount", Name: release, Namespace: namespace}}) {
				t.Errorf("ClusterRoleBinding %+v %+v", crb.RoleRef, crb.Subjects)
			}
		})
	}
}

// TestRolesMatchGeneratedRBAC: the chart's roles are exactly what controller-gen
// generates from the +kubebuilder:rbac markers into files/rbac/role.yaml (which
// api/generated_test.go keeps current), renamed and with the trident namespace
// replaced: editing a marker and running `make manifests` is all it takes.
func TestRolesMatchGeneratedRBAC(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("files", "rbac", "role.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	const tridentNS = "netapp-trident"
	objs := render(t, map[string]any{"trident": map[string]any{"namespace": tridentNS}})
	generated := 0
	for doc := range strings.SplitSeq(string(data), "\n---\n") {
		var r struct {
			metav1.TypeMeta `json:",inline"`
			Metadata        metav1.ObjectMeta   `json:"metadata"`
			Rules           []rbacv1.PolicyRule `json:"rules"`
		}
		if err := yaml.UnmarshalStrict([]byte(strings.TrimPrefix(doc, "---\n")), &r); err != nil {
			t.Fatalf("files/rbac/role.yaml: %v", err)
		}
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
			if ns == "trident" {
				ns = tridentNS
			}
			rendered = typed[rbacv1.Role](t, find(objs, "Role", ns, release)).Rules
		default:
			t.Fatalf("files/rbac/role.yaml: unexpected kind %s", r.Kind)
		}
		if !reflect.DeepEqual(rendered, r.Rules) {
			t.Errorf("%s %s drifted from files/rbac/role.yaml:\n rendered %+v\ngenerated %+v", r.Kind, r.Metadata.Namespace, rendered, r.Rules)
		}
	}
	if generated != 3 {
		t.Errorf("files/rbac/role.yaml holds %d roles, want the ClusterRole and the trident and kube-node-lease Roles", generated)
	}
}

// TestLeaderElectionRoleNamesTheControllersLease: the leader-election Role may read
// and renew only the controller's own Lease, so its name must match.
func TestLeaderElectionRoleNamesTheControllersLease(t *testing.T) {
	src, err := os.ReadFile(filepath.Join("..", "..", "cmd", "remediator", "controller.go"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`LeaderElectionID:\s*"([^"]+)"`).FindSubmatch(src)
	if m == nil {
		t.Fatal(`cmd/remediator/controller.go: no LeaderElectionID: "..." literal; update this test and the chart's remediator.leaderElectionID together`)
	}
	role := typed[rbacv1.Role](t, find(render(t, nil), "Role", namespace, release+"-leader-election"))
	for _, r := range role.Rules {
		if len(r.ResourceNames) > 0 && !slices.Equal(r.ResourceNames, []string{string(m[1])}) {
			t.Errorf("leader-election Role names %q, the controller's LeaderElectionID is %q", r.ResourceNames, m[1])
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
			"controller", "--leader-elect", "--leader-election-namespace=$(POD_NAMESPACE)",
			"--metrics-bind-address=:8080", "--health-probe-bind-address=:8081",
			"--trident-namespace=trident", "--driver-name=csi.trident.netapp.io",
			"--node-plugin-selector=app=node.csi.trident.netapp.io",
			"--max-concurrent-remediations=2", "--node-lease-grace-period=40s", "--v=0",
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
			"metrics":                   map[string]any{"port": 9090},
		},
		want: []string{
			"--metrics-bind-address=:9090",
			"--trident-namespace=netapp-trident", "--driver-name=csi.example.com",
			"--node-plugin-selector=app in (trident-node, trident-node-linux)",
			"--request-namespaces=team-a,team-b", "--max-concurrent-remediations=5",
			"--node-lease-grace-period=1m", "--v=4",
		},
	}, {
		// Widening is explicit, and then the list no longer applies.
		name:    "every namespace",
		values:  map[string]any{"watchAllNamespaces": true},
		want:    []string{"controller"},
		wantNot: []string{"--request-namespaces"},
	}, {
		name:    "every namespace despite a list",
		values:  map[string]any{"watchAllNamespaces": true, "requestNamespaces": []any{"team-a"}},
		want:    []string{"controller"},
		wantNot: []string{"--request-namespaces"},
	}, {
		name:    "metrics off",
		values:  map[string]any{"metrics": map[string]any{"enabled": false}},
		want:    []string{"--metrics-bind-address=0"},
		wantNot: []string{"--metrics-bind-address=:"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			c := deployment(t, render(t, tc.values)).Spec.Template.Spec.Containers[0]
			if len(c.Command) != 0 {
				t.Errorf("command %q overrides the image's entrypoint", c.Command)
			}
			if len(c.Args) == 0 || c.Args[0] != "controller" {
				t.Errorf("args %q: want the controller subcommand first", c.Args)
			}
			for _, w := range tc.want {
				if !slices.Contains(c.Args, w) {
					t.Errorf("args %q lack %q", c.Args, w)
				}
			}
			for _, p := range tc.wantNot {
				if slices.ContainsFunc(c.Args, func(a string) bool { return strings.HasPrefix(a, p) }) {
					t.Errorf("args %q contain %s", c.Args, p)
				}
			}
			seen := map[string]bool{}
			for _, a := range c.Args {
				flag, _, _ := strings.Cut(a, "=")
				if seen[flag] {
					t.Errorf("%s given twice in %q", flag, c.Args)
				}
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
	if d.Spec.Replicas == nil || *d.Spec.Replicas != 2 {
		t.Errorf("replicas %v, want 2 (HA through leader election)", d.Spec.Replicas)
	}
	pod := d.Spec.Template.Spec
	if len(pod.Containers) != 1 {
		t.Fatalf("want one container, got %d", len(pod.Containers))
	}
	c := pod.Containers[0]
	if c.Image != "remediator:0.1.0" {
		t.Errorf("image %q, want the repository with the chart's appVersion", c.Image)
	}
	if pod.ServiceAccountName != release || pod.AutomountServiceAccountToken == nil || !*pod.AutomountServiceAccountToken {
		t.Errorf("serviceAccountName %q automount %v", pod.ServiceAccountName, pod.AutomountServiceAccountToken)
	}
	sa := typed[corev1.ServiceAccount](t, find(objs, "ServiceAccount", namespace, release))
	if sa.AutomountServiceAccountToken == nil || !*sa.AutomountServiceAccountToken {
		t.Error("the ServiceAccount does not mount its token")
	}

	wantEnv := corev1.EnvVar{Name: "POD_NAMESPACE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}}
	if !slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool { return reflect.DeepEqual(e, wantEnv) }) {
		t.Errorf("env %+v lacks POD_NAMESPACE from the downward API", c.Env)
	}

	probe := func(name string, p *corev1.Probe, path string) {
		if p == nil || p.HTTPGet == nil {
			t.Errorf("%s probe: want an httpGet, got %+v", name, p)
			return
		}
		port := p.HTTPGet.Port.String()
		if p.HTTPGet.Path != path || (port != "health" && port != "8081") {
			t.Errorf("%s probe: %s on port %s, want %s on 8081", name, p.HTTPGet.Path, port, path)
		}
	}
	probe("liveness", c.LivenessProbe, "/healthz")
	probe("readiness", c.ReadinessProbe, "/readyz")
	if !slices.ContainsFunc(c.Ports, func(p corev1.ContainerPort) bool { return p.Name == "health" && p.ContainerPort == 8081 }) {
		t.Errorf("ports %+v lack health 8081", c.Ports)
	}
	if !slices.ContainsFunc(c.Ports, func(p corev1.ContainerPort) bool { return p.Name == "http-metrics" && p.ContainerPort == 8080 }) {
		t.Errorf("ports %+v lack http-metrics 8080", c.Ports)
	}

	psc := pod.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser != 65532 ||
		psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("pod securityContext %+v: want runAsNonRoot, runAsUser 65532, seccomp RuntimeDefault", psc)
	}
	sc := c.SecurityContext
	switch {
	case sc == nil:
		t.Fatal("the container has no securityContext")
	case sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot, sc.RunAsUser == nil || *sc.RunAsUser != 65532:
		t.Errorf("container: want runAsNonRoot and runAsUser 65532, got %v %v", sc.RunAsNonRoot, sc.RunAsUser)
	case sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem:
		t.Error("container: want readOnlyRootFilesystem")
	case sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation:
		t.Error("container: want allowPrivilegeEscalation false")
	case sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) > 0:
		t.Errorf("container: want capabilities drop [ALL] and nothing added, got %+v", sc.Capabilities)
	case sc.Privileged != nil && *sc.Privileged:
		t.Error("container: privileged")
	case sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault:
		t.Error("container: want seccomp RuntimeDefault")
	}

	// The one writable place on a read-only root filesystem.
	if !slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.MountPath == "/tmp" && !m.ReadOnly }) ||
		!slices.ContainsFunc(pod.Volumes, func(v corev1.Volume) bool { return v.Name == "tmp" && v.EmptyDir != nil }) {
		t.Errorf("want a writable emptyDir at /tmp; mounts %+v volumes %+v", c.VolumeMounts, pod.Volumes)
	}

	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
		t.Errorf("resources %+v: want cpu and memory requests and a memory limit", c.Resources)
	}

	// Replicas spread over nodes when they can, never blocked when they cannot.
	aff := pod.Affinity
	if aff == nil || aff.PodAntiAffinity == nil || len(aff.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution) != 1 ||
		len(aff.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution) != 0 {
		t.Fatalf("want one soft pod anti-affinity term, got %+v", aff)
	}
	term := aff.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution[0].PodAffinityTerm
	if term.TopologyKey != corev1.LabelHostname || !reflect.DeepEqual(term.LabelSelector.MatchLabels, d.Spec.Selector.MatchLabels) {
		t.Errorf("anti-affinity term %+v: want the pods' selector by %s", term, corev1.LabelHostname)
	}

	// A user's affinity replaces the default.
	custom := map[string]any{"nodeAffinity": map[string]any{"requiredDuringSchedulingIgnoredDuringExecution": map[string]any{
		"nodeSelectorTerms": []any{map[string]any{"matchExpressions": []any{map[string]any{"key": "role", "operator": "In", "values": []any{"infra"}}}}},
	}}}
	aff = deployment(t, render(t, map[string]any{"affinity": custom})).Spec.Template.Spec.Affinity
	if aff == nil || aff.NodeAffinity == nil || aff.PodAntiAffinity != nil {
		t.Errorf("affinity from values: got %+v", aff)
	}
}

func TestLabels(t *testing.T) {
	for _, o := range render(t, map[string]any{"metrics": map[string]any{"serviceMonitor": map[string]any{"enabled": true}}}) {
		if o.GetKind() == "CustomResourceDefinition" {
			continue // crds/ is applied by Helm as it is
		}
		l := o.GetLabels()
		for k, v := range map[string]string{
			"app.kubernetes.io/name":       "remediator",
			"app.kubernetes.io/instance":   release,
			"app.kubernetes.io/version":    "0.1.0",
			"app.kubernetes.io/managed-by": "Helm",
			"helm.sh/chart":                "remediator-0.1.0",
		} {
			if l[k] != v {
				t.Errorf("%s: label %s=%q, want %q", ref(o), k, l[k], v)
			}
		}
	}
}

func TestPolicies(t *testing.T) {
	const cm = release + "-policies"
	t.Run("unset", func(t *testing.T) {
		objs := render(t, map[string]any{"policies": map[string]any{}})
		if o := find(objs, "ConfigMap", namespace, cm); o != nil {
			t.Errorf("%s rendered without policies", ref(o))
		}
		pod := deployment(t, objs).Spec.Template.Spec
		if slices.ContainsFunc(pod.Containers[0].Args, func(a string) bool {
			return strings.HasPrefix(a, "--policies-dir") || strings.HasPrefix(a, "--policy-reload-interval")
		}) {
			t.Errorf("--policies-dir passed without policies: %q", pod.Containers[0].Args)
		}
		if len(pod.Volumes) != 1 {
			t.Errorf("volumes %+v: want only tmp", pod.Volumes)
		}
	})
	t.Run("set", func(t *testing.T) {
		policies := map[string]any{
			"luks.cue": "package policies\n\nluks: true\n",
			"csi.cue":  "package policies\n",
		}
		objs := render(t, map[string]any{"policies": policies})
		cmObj := typed[corev1.ConfigMap](t, find(objs, "ConfigMap", namespace, cm))
		if !reflect.DeepEqual(cmObj.Data, map[string]string{"luks.cue": policies["luks.cue"].(string), "csi.cue": policies["csi.cue"].(string)}) {
			t.Errorf("ConfigMap data %q", cmObj.Data)
		}
		d := deployment(t, objs)
		pod := d.Spec.Template.Spec
		c := pod.Containers[0]
		if !slices.Contains(c.Args, "--policies-dir="+policiesDir) {
			t.Errorf("args %q lack --policies-dir=%s", c.Args, policiesDir)
		}
		mount := slices.IndexFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.MountPath == policiesDir })
		if mount < 0 || !c.VolumeMounts[mount].ReadOnly {
			t.Fatalf("mounts %+v: want %s read-only", c.VolumeMounts, policiesDir)
		}
		vol := slices.IndexFunc(pod.Volumes, func(v corev1.Volume) bool { return v.Name == c.VolumeMounts[mount].Name })
		if vol < 0 || pod.Volumes[vol].ConfigMap == nil || pod.Volumes[vol].ConfigMap.Name != cm {
			t.Errorf("volumes %+v: want ConfigMap %s behind %s", pod.Volumes, cm, policiesDir)
		}
		if !slices.Contains(c.Args, "--policy-reload-interval=30s") {
			t.Errorf("args %q lack --policy-reload-interval=30s", c.Args)
		}
		// The controller reloads the mounted policies in place and keeps the last good
		// one on a broken edit; a changed policy must not restart the pods.
		policies["luks.cue"] = "package policies\n\nluks: false\n"
		again := deployment(t, render(t, map[string]any{"policies": policies}))
		if !reflect.DeepEqual(again.Spec.Template, d.Spec.Template) {
			t.Error("changing values.policies changes the pod template, which restarts the controller")
		}
	})
	for _, bad := range []string{"policy.yaml", "luks_test.cue"} {
		t.Run("refuses "+bad, func(t *testing.T) {
			_, err := helmchart.Render(release, namespace, map[string]any{"policies": map[string]any{bad: "package policies\n"}})
			if err == nil || !strings.Contains(err.Error(), bad) {
				t.Errorf("want an error naming %s, got %v", bad, err)
			}
		})
	}
}

func TestMetricsServiceAndServiceMonitor(t *testing.T) {
	t.Run("defaults", func(t *testing.T) {
		objs := render(t, nil)
		svc := typed[corev1.Service](t, find(objs, "Service", namespace, release+"-metrics"))
		d := deployment(t, objs)
		if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Name != "http-metrics" || svc.Spec.Ports[0].Port != 8080 ||
			svc.Spec.Ports[0].TargetPort.String() != "http-metrics" {
			t.Errorf("Service ports %+v: want http-metrics 8080", svc.Spec.Ports)
		}
		if !reflect.DeepEqual(svc.Spec.Selector, d.Spec.Selector.MatchLabels) {
			t.Errorf("Service selector %v, Deployment selector %v", svc.Spec.Selector, d.Spec.Selector.MatchLabels)
		}
		for _, o := range objs {
			if o.GetKind() == "ServiceMonitor" {
				t.Errorf("%s rendered although metrics.serviceMonitor.enabled is false", ref(o))
			}
		}
	})
	t.Run("serviceMonitor", func(t *testing.T) {
		objs := render(t, map[string]any{"metrics": map[string]any{"serviceMonitor": map[string]any{
			"enabled": true, "interval": "15s", "labels": map[string]any{"release": "kube-prometheus"},
		}}})
		o := find(objs, "ServiceMonitor", namespace, release)
		if o == nil {
			t.Fatalf("no ServiceMonitor in %q", refs(objs))
		}
		sm := decodeServiceMonitor(t, o)
		svc := find(objs, "Service", namespace, release+"-metrics")
		if o.GetLabels()["release"] != "kube-prometheus" {
			t.Errorf("labels %v lack release=kube-prometheus", o.GetLabels())
		}
		for k, v := range sm.Spec.Selector.MatchLabels {
			if svc.GetLabels()[k] != v {
				t.Errorf("ServiceMonitor selects %s=%s, the Service has %q", k, v, svc.GetLabels()[k])
			}
		}
		if len(sm.Spec.Endpoints) != 1 || sm.Spec.Endpoints[0].Port != "http-metrics" || sm.Spec.Endpoints[0].Interval != "15s" {
			t.Errorf("endpoints %+v", sm.Spec.Endpoints)
		}
		if !slices.Equal(sm.Spec.NamespaceSelector.MatchNames, []string{namespace}) {
			t.Errorf("namespaceSelector %+v", sm.Spec.NamespaceSelector)
		}
	})
	t.Run("metrics off", func(t *testing.T) {
		objs := render(t, map[string]any{"metrics": map[string]any{"enabled": false}})
		if o := find(objs, "Service", namespace, release+"-metrics"); o != nil {
			t.Errorf("%s rendered with metrics off", ref(o))
		}
		if ports := deployment(t, objs).Spec.Template.Spec.Containers[0].Ports; slices.ContainsFunc(ports, func(p corev1.ContainerPort) bool { return p.Name == "http-metrics" }) {
			t.Errorf("ports %+v expose metrics with metrics off", ports)
		}
		_, err := helmchart.Render(release, namespace, map[string]any{"metrics": map[string]any{"enabled": false, "serviceMonitor": map[string]any{"enabled": true}}})
		if err == nil || !strings.Contains(err.Error(), "metrics.enabled") {
			t.Errorf("a ServiceMonitor without metrics: want an error naming metrics.enabled, got %v", err)
		}
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
			Port     string `json:"port"`
			Path     string `json:"path,omitempty"`
			Interval string `json:"interval,omitempty"`
		} `json:"endpoints"`
	} `json:"spec"`
}

func decodeServiceMonitor(t *testing.T, o *unstructured.Unstructured) *serviceMonitor {
	t.Helper()
	sm := &serviceMonitor{}
	if err := strictDecode(o, sm); err != nil {
		t.Fatal(err)
	}
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
			"metrics":           map[string]any{"serviceMonitor": map[string]any{"enabled": true}},
			"imagePullSecrets":  []any{map[string]any{"name": "regcred"}},
			"tolerations":       []any{map[string]any{"key": "infra", "operator": "Exists", "effect": "NoSchedule"}},
			"nodeSelector":      map[string]any{"kubernetes.io/os": "linux"},
			"priorityClassName": "system-cluster-critical",
			"topologySpreadConstraints": []any{map[string]any{
				"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "ScheduleAnyway",
				"labelSelector": map[string]any{"matchLabels": map[string]any{"app.kubernetes.io/name": "remediator"}},
			}},
			"serviceAccount": map[string]any{"annotations": map[string]any{"example.com/role": "x"}},
		},
	} {
		t.Run(name, func(t *testing.T) {
			for _, o := range render(t, values) {
				out, err := typedObject(o)
				if err != nil {
					t.Errorf("%s: no Go type: %v", ref(o), err)
					continue
				}
				if err := strictDecode(o, out); err != nil {
					t.Error(err)
				}
			}
		})
	}

	t.Run("catches a typo", func(t *testing.T) {
		d := find(render(t, nil), "Deployment", namespace, release)
		containers, _, _ := unstructured.NestedSlice(d.Object, "spec", "template", "spec", "containers")
		sc := containers[0].(map[string]any)["securityContext"].(map[string]any)
		sc["readOnlyRootFileSystem"] = sc["readOnlyRootFilesystem"]
		delete(sc, "readOnlyRootFilesystem")
		if err := unstructured.SetNestedSlice(d.Object, containers, "spec", "template", "spec", "containers"); err != nil {
			t.Fatal(err)
		}
		err := strictDecode(d, &appsv1.Deployment{})
		if err == nil || !strings.Contains(err.Error(), "readOnlyRootFileSystem") {
			t.Errorf("want an unknown-field error, got %v", err)
		}
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
	// release's, Trident's install makes its own, and kube-node-lease is the API
	// server's.
	for _, ns := range []string{namespace, tridentNS, "kube-node-lease"} {
		err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("creating namespace %s: %v", ns, err)
		}
	}

	objs := render(t, map[string]any{
		"trident":           map[string]any{"namespace": tridentNS},
		"requestNamespaces": []any{"team-a", "team-b"},
		"policies":          map[string]any{"luks.cue": "package policies\n"},
		"imagePullSecrets":  []any{map[string]any{"name": "regcred"}},
		"tolerations":       []any{map[string]any{"key": "infra", "operator": "Exists", "effect": "NoSchedule"}},
	})
	apply := func(o *unstructured.Unstructured) error {
		return c.Apply(ctx, client.ApplyConfigurationFromUnstructured(o),
			client.DryRunAll, client.ForceOwnership, client.FieldOwner("chart-test"))
	}
	for _, o := range objs {
		if err := apply(o.DeepCopy()); err != nil {
			t.Errorf("%s: %v", ref(o), err)
		}
	}

	// The check has teeth: the API server refuses a misspelt field.
	d := find(objs, "Deployment", namespace, release).DeepCopy()
	if err := unstructured.SetNestedField(d.Object, true, "spec", "template", "spec", "automountServiceAccountTokens"); err != nil {
		t.Fatal(err)
	}
	if err := apply(d); err == nil || !strings.Contains(err.Error(), "automountServiceAccountTokens") {
		t.Errorf("a misspelt field: want the API server to refuse it, got %v", err)
	}
}
