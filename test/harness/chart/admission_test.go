package chart_test

// This file owns "Git is the only writer" (templates/admissionpolicy.yaml): what the
// chart renders for the admission policies and their bindings, that their names of
// the controller's finalizer and node annotation agree with the code, the chart's
// minimum Kubernetes version, and, against a real kube-apiserver (envtest), what the
// rendered CEL allows and refuses for each kind of writer.

import (
	"context"
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
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"

	"github.com/remediator/remediator/test/harness/helmchart"
	"github.com/remediator/remediator/test/testenv"
)

const (
	argoCD = "system:serviceaccount:argocd:argocd-application-controller"
	// OpenShift GitOps' default Argo CD instance and Flux's kustomize-controller.
	openShiftGitOps = "system:serviceaccount:openshift-gitops:openshift-gitops-argocd-application-controller"
	fluxKustomize   = "system:serviceaccount:flux-system:kustomize-controller"
	controllerUser  = "system:serviceaccount:" + namespace + ":" + release
	syncUser        = "system:serviceaccount:" + namespace + ":" + release + "-sync"
)

func policy(t *testing.T, objs []*unstructured.Unstructured, name string) *admissionregistrationv1.ValidatingAdmissionPolicy {
	t.Helper()
	return typed[admissionregistrationv1.ValidatingAdmissionPolicy](t, find(objs, "ValidatingAdmissionPolicy", "", name))
}

func binding(t *testing.T, objs []*unstructured.Unstructured, name string) *admissionregistrationv1.ValidatingAdmissionPolicyBinding {
	t.Helper()
	return typed[admissionregistrationv1.ValidatingAdmissionPolicyBinding](t, find(objs, "ValidatingAdmissionPolicyBinding", "", name))
}

func variable(p *admissionregistrationv1.ValidatingAdmissionPolicy, name string) string {
	for _, v := range p.Spec.Variables {
		if v.Name == name {
			return v.Expression
		}
	}
	return ""
}

// boundNamespaces returns the namespaces a binding selects by name, or nil for
// every namespace.
func boundNamespaces(t *testing.T, b *admissionregistrationv1.ValidatingAdmissionPolicyBinding) []string {
	t.Helper()
	if b.Spec.MatchResources == nil || b.Spec.MatchResources.NamespaceSelector == nil {
		return nil
	}
	sel := b.Spec.MatchResources.NamespaceSelector
	require.Empty(t, sel.MatchLabels, "%s: namespaceSelector", b.Name)
	require.Len(t, sel.MatchExpressions, 1, "%s: namespaceSelector", b.Name)
	e := sel.MatchExpressions[0]
	require.Equal(t, "kubernetes.io/metadata.name", e.Key, "%s: namespaceSelector", b.Name)
	require.Equal(t, "In", string(e.Operator), "%s: namespaceSelector", b.Name)
	return e.Values
}

func TestAdmissionPolicyRenders(t *testing.T) {
	for _, tc := range []struct {
		name   string
		values map[string]any
		// requests' binding: nil means every namespace
		namespaces []string
		writers    []string // user names in gitWriter
		notWriters []string
		groups     []string
		// break glass: its groups and users (none for no break glass)
		breakGlass      []string
		breakGlassUsers []string
		// the policies ConfigMap guarded, "" for none
		policiesConfigMap string
	}{{
		name:       "defaults",
		namespaces: []string{"remediator"},
		writers:    []string{argoCD},
		notWriters: []string{syncUser, controllerUser},
		breakGlass: []string{"remediator:break-glass"},
	}, {
		name:       "several request namespaces",
		values:     map[string]any{"requestNamespaces": []any{"team-a", "team-b"}},
		namespaces: []string{"team-a", "team-b"},
		writers:    []string{argoCD},
		breakGlass: []string{"remediator:break-glass"},
	}, {
		name:       "every namespace",
		values:     map[string]any{"watchAllNamespaces": true},
		namespaces: nil,
		writers:    []string{argoCD},
		breakGlass: []string{"remediator:break-glass"},
	}, {
		name:       "the sync agent",
		values:     map[string]any{"sync": map[string]any{"enabled": true, "repo": "https://git.example.com/r.git"}},
		namespaces: []string{"remediator"},
		writers:    []string{argoCD, syncUser},
		breakGlass: []string{"remediator:break-glass"},
	}, {
		name: "the sync agent with policies",
		values: map[string]any{"sync": map[string]any{"enabled": true, "repo": "https://git.example.com/r.git",
			"policies": map[string]any{"enabled": true}}},
		namespaces:        []string{"remediator"},
		writers:           []string{argoCD, syncUser},
		breakGlass:        []string{"remediator:break-glass"},
		policiesConfigMap: release + "-policies",
	}, {
		name:              "policies from Argo CD",
		values:            map[string]any{"policiesConfigMap": "remediation-policies"},
		namespaces:        []string{"remediator"},
		writers:           []string{argoCD},
		breakGlass:        []string{"remediator:break-glass"},
		policiesConfigMap: "remediation-policies",
	}, {
		// Helm writes the ConfigMap of the `policies` value: the Git rule would refuse
		// the chart's own upgrade.
		name:       "policies from values",
		values:     map[string]any{"policies": map[string]any{"luks.cue": "package policies\n"}},
		namespaces: []string{"remediator"},
		writers:    []string{argoCD},
		breakGlass: []string{"remediator:break-glass"},
	}, {
		name: "own writers, no break glass",
		values: map[string]any{"admissionPolicy": map[string]any{
			"gitWriters": map[string]any{"users": []any{"gitops-bot", `odd"name`}, "groups": []any{"gitops"}},
			"breakGlass": map[string]any{"group": ""},
		}},
		namespaces: []string{"remediator"},
		writers:    []string{"gitops-bot", `odd"name`},
		notWriters: []string{argoCD},
		groups:     []string{"gitops"},
	}, {
		// The GitOps setups docs/gitops.md gives values for.
		name: "Argo CD in another namespace",
		values: map[string]any{"admissionPolicy": map[string]any{"gitWriters": map[string]any{
			"users": []any{"system:serviceaccount:gitops:argocd-application-controller"}}}},
		namespaces: []string{"remediator"},
		writers:    []string{"system:serviceaccount:gitops:argocd-application-controller"},
		notWriters: []string{argoCD},
		breakGlass: []string{"remediator:break-glass"},
	}, {
		name: "OpenShift GitOps",
		values: map[string]any{"admissionPolicy": map[string]any{"gitWriters": map[string]any{
			"users": []any{openShiftGitOps}}}},
		namespaces: []string{"remediator"},
		writers:    []string{openShiftGitOps},
		notWriters: []string{argoCD},
		breakGlass: []string{"remediator:break-glass"},
	}, {
		name: "Flux, by its ServiceAccount",
		values: map[string]any{"admissionPolicy": map[string]any{"gitWriters": map[string]any{
			"users":           []any{},
			"serviceAccounts": []any{map[string]any{"namespace": "flux-system", "name": "kustomize-controller"}}}}},
		namespaces: []string{"remediator"},
		writers:    []string{fluxKustomize},
		notWriters: []string{argoCD},
		breakGlass: []string{"remediator:break-glass"},
	}, {
		name: "ServiceAccounts besides the users",
		values: map[string]any{"admissionPolicy": map[string]any{"gitWriters": map[string]any{
			"serviceAccounts": []any{map[string]any{"namespace": "flux-system", "name": "kustomize-controller"},
				map[string]any{"namespace": "ci", "name": "remediator-sync"}}}}},
		namespaces: []string{"remediator"},
		writers:    []string{argoCD, fluxKustomize, "system:serviceaccount:ci:remediator-sync"},
		breakGlass: []string{"remediator:break-glass"},
	}, {
		name: "break glass by users, groups and ServiceAccounts",
		values: map[string]any{"admissionPolicy": map[string]any{"breakGlass": map[string]any{
			"group":           "",
			"groups":          []any{"sre"},
			"users":           []any{"alice@example.com"},
			"serviceAccounts": []any{map[string]any{"namespace": "ops", "name": "incident-bot"}}}}},
		namespaces:      []string{"remediator"},
		writers:         []string{argoCD},
		breakGlass:      []string{"sre"},
		breakGlassUsers: []string{"alice@example.com", "system:serviceaccount:ops:incident-bot"},
	}, {
		// breakGlass.group, the single group of chart 0.3, still counts.
		name: "the break-glass group and further groups",
		values: map[string]any{"admissionPolicy": map[string]any{"breakGlass": map[string]any{
			"groups": []any{"sre", "remediator:break-glass"}}}},
		namespaces: []string{"remediator"},
		writers:    []string{argoCD},
		breakGlass: []string{"sre", "remediator:break-glass"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			objs := render(t, tc.values)
			requests := policy(t, objs, release+"-git-writers")
			assert.Equal(t, admissionregistrationv1.Fail, *requests.Spec.FailurePolicy, "failurePolicy")
			require.Len(t, requests.Spec.MatchConstraints.ResourceRules, 1)
			rule := requests.Spec.MatchConstraints.ResourceRules[0]
			assert.Equal(t, []string{"remediator.io"}, rule.APIGroups)
			assert.Equal(t, []string{"remediationrequests", "remediationrequests/status"}, rule.Resources,
				"the main resource and status (the controller's only)")
			assert.Equal(t, `request.?subResource.orValue("") == "status"`, variable(requests, "status"))
			assert.ElementsMatch(t, []admissionregistrationv1.OperationType{"CREATE", "UPDATE", "DELETE"}, rule.Operations)

			gitWriter := variable(requests, "gitWriter")
			for _, u := range tc.writers {
				assert.Contains(t, gitWriter, jsonString(u), "gitWriter lists %s", u)
			}
			for _, u := range tc.notWriters {
				assert.NotContains(t, gitWriter, jsonString(u), "gitWriter lists %s", u)
			}
			assert.Contains(t, gitWriter, "exists(g, g in "+jsonList(tc.groups)+")", "gitWriter's groups")
			if tc.breakGlass == nil && tc.breakGlassUsers == nil {
				assert.Equal(t, "false", variable(requests, "breakGlass"), "no break glass")
			} else {
				breakGlass := variable(requests, "breakGlass")
				assert.Contains(t, breakGlass, "request.userInfo.username in "+jsonList(tc.breakGlassUsers), "break glass's users")
				assert.Contains(t, breakGlass, "exists(g, g in "+jsonList(tc.breakGlass)+")", "break glass's groups")
				assert.Contains(t, breakGlass, `"remediator.io/break-glass"`)
			}
			assert.Equal(t, "request.userInfo.username == "+jsonString(controllerUser), variable(requests, "controller"))
			assert.Contains(t, variable(requests, "onlyItsFinalizer"), `f != "remediator.io/restore"`)
			bounded := false
			for _, v := range requests.Spec.Validations {
				// The bound of the break-glass reason refuses a writer's content, not
				// the writer: it has no pull request to point at.
				if strings.Contains(v.Expression, "size(bytes(variables.breakGlassReason)) <= 1024") {
					bounded = true
					continue
				}
				assert.Contains(t, v.Message+v.MessageExpression, "open a pull request in the remediation repository", "validation %q", v.Expression)
			}
			assert.True(t, bounded, "no bound on the break-glass reason")

			b := binding(t, objs, release+"-git-writers")
			assert.Equal(t, requests.Name, b.Spec.PolicyName)
			assert.Equal(t, []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}, b.Spec.ValidationActions)
			assert.Equal(t, tc.namespaces, boundNamespaces(t, b), "the requests' binding")

			nodes := policy(t, objs, release+"-node-writes")
			assert.Equal(t, admissionregistrationv1.Fail, *nodes.Spec.FailurePolicy, "failurePolicy")
			require.Len(t, nodes.Spec.MatchConditions, 1)
			assert.Equal(t, "request.userInfo.username == "+jsonString(controllerUser), nodes.Spec.MatchConditions[0].Expression,
				"the node policy judges the controller's writes only")
			assert.Equal(t, []string{"nodes"}, nodes.Spec.MatchConstraints.ResourceRules[0].Resources)
			nb := binding(t, objs, release+"-node-writes")
			assert.Equal(t, nodes.Name, nb.Spec.PolicyName)
			assert.Equal(t, []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}, nb.Spec.ValidationActions)

			cm := find(objs, "ValidatingAdmissionPolicy", "", release+"-policies-writers")
			if tc.policiesConfigMap == "" {
				assert.Nil(t, cm, "a policies ConfigMap policy without policies from Git")
				assert.Nil(t, find(objs, "ValidatingAdmissionPolicyBinding", "", release+"-policies-writers"))
				return
			}
			p := policy(t, objs, release+"-policies-writers")
			// Not resourceNames: a deletecollection's per-item DELETE has no name, so
			// resourceNames would let it through. The name is matched in CEL instead.
			assert.Empty(t, p.Spec.MatchConstraints.ResourceRules[0].ResourceNames, "resourceNames")
			require.Len(t, p.Spec.MatchConditions, 1)
			assert.Contains(t, p.Spec.MatchConditions[0].Expression, ".metadata.name == "+jsonString(tc.policiesConfigMap))
			assert.Contains(t, p.Spec.MatchConditions[0].Expression, "request.namespace == "+jsonString(namespace))
			assert.Equal(t, []string{"configmaps"}, p.Spec.MatchConstraints.ResourceRules[0].Resources)
			assert.Equal(t, gitWriter, variable(p, "gitWriter"), "the policies' writers are the requests' writers")
			pb := binding(t, objs, release+"-policies-writers")
			assert.Equal(t, []string{namespace}, boundNamespaces(t, pb), "the policies ConfigMap's binding")
		})
	}
}

func jsonString(s string) string {
	return `"` + strings.ReplaceAll(strings.ReplaceAll(s, `\`, `\\`), `"`, `\"`) + `"`
}

// jsonList is the rendered CEL list of the strings: "[]" for none.
func jsonList(in []string) string {
	return "[" + strings.Join(mapSlice(in, jsonString), ",") + "]"
}

func mapSlice(in []string, f func(string) string) []string {
	out := make([]string, 0, len(in))
	for _, s := range in {
		out = append(out, f(s))
	}
	return out
}

func TestAdmissionPolicyOff(t *testing.T) {
	objs := render(t, map[string]any{
		"admissionPolicy": map[string]any{"enabled": false},
		"sync":            map[string]any{"enabled": true, "repo": "https://git.example.com/r.git", "policies": map[string]any{"enabled": true}},
	})
	for _, o := range objs {
		assert.NotContains(t, o.GetKind(), "ValidatingAdmissionPolicy", "%s rendered with admissionPolicy.enabled=false", ref(o))
	}
}

// TestAdmissionNamesMatchTheCode: the finalizer and the node annotation the policies
// let the controller write are the ones the code writes, and the break-glass
// annotation is the one the controller shows.
func TestAdmissionNamesMatchTheCode(t *testing.T) {
	for _, tc := range []struct {
		file, pattern, define string
	}{
		{filepath.Join("api", "v1alpha1", "conditions.go"), `(?m)^const Finalizer = "([^"]+)"`, "remediator.admission.finalizer"},
		{filepath.Join("remediations", "node_steps.go"), `(?m)^const CordonedByAnnotation = "([^"]+)"`, "remediator.admission.cordonedBy"},
		{filepath.Join("api", "v1alpha1", "conditions.go"), `(?m)^const AnnotationBreakGlass = "([^"]+)"`, "remediator.admission.breakGlass"},
	} {
		src, err := os.ReadFile(filepath.Join("..", "..", tc.file))
		require.NoError(t, err)
		m := regexp.MustCompile(tc.pattern).FindSubmatch(src)
		require.NotNil(t, m, "%s: no %s; update this test and templates/_helpers.tpl's %s together", tc.file, tc.pattern, tc.define)
		helpers, err := os.ReadFile(filepath.Join("templates", "_helpers.tpl"))
		require.NoError(t, err)
		d := regexp.MustCompile(`(?s)\{\{- define "` + regexp.QuoteMeta(tc.define) + `" -\}\}\s*(\S+)\s*\{\{- end \}\}`).FindSubmatch(helpers)
		require.NotNil(t, d, "templates/_helpers.tpl: no define %s", tc.define)
		assert.Equal(t, string(m[1]), string(d[1]), "%s in templates/_helpers.tpl and %s", tc.define, tc.file)
	}
}

// TestKubeVersion: the chart installs from Kubernetes 1.29; its admission policies need
// ValidatingAdmissionPolicy v1 (1.30), so on a 1.29 cluster it renders only with them off,
// and with them on it refuses with what to do. Rendered as `helm template --kube-version V`
// and `helm install` do (Helm's action.renderResources): Chart.yaml's kubeVersion checked
// with chartutil.IsCompatibleRange, then the templates with that version and the cluster's
// API versions (Helm's defaults client-side, discovery on a cluster) in .Capabilities.
func TestKubeVersion(t *testing.T) {
	c, err := helmchart.Load()
	require.NoError(t, err)
	template := func(version string, apiVersions chartutil.VersionSet, values map[string]any) error {
		kv, err := chartutil.ParseKubeVersion(version)
		require.NoError(t, err)
		if !chartutil.IsCompatibleRange(c.Metadata.KubeVersion, kv.String()) {
			return fmt.Errorf("chart requires kubeVersion: %s which is incompatible with Kubernetes %s", c.Metadata.KubeVersion, kv)
		}
		caps := *chartutil.DefaultCapabilities
		caps.KubeVersion, caps.APIVersions = *kv, apiVersions
		vals, err := chartutil.ToRenderValues(c, values, chartutil.ReleaseOptions{Name: release, Namespace: namespace, Revision: 1, IsInstall: true}, &caps)
		require.NoError(t, err)
		_, err = engine.Engine{Strict: true}.Render(c, vals)
		return err
	}
	// A cluster's discovery, as helm install and Argo CD pass it: group/versions and each
	// kind; a 1.29 API server serves admissionregistration.k8s.io/v1 without the policies.
	discovery := func(policies bool) chartutil.VersionSet {
		vs := append(slices.Clone(chartutil.DefaultVersionSet), "v1/Pod", "v1/ConfigMap", "apps/v1/Deployment",
			"admissionregistration.k8s.io/v1/ValidatingWebhookConfiguration")
		if policies {
			vs = append(vs, "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy",
				"admissionregistration.k8s.io/v1/ValidatingAdmissionPolicyBinding")
		}
		return vs
	}
	v129, v130 := discovery(false), discovery(true)
	off := map[string]any{"admissionPolicy": map[string]any{"enabled": false}}
	for _, version := range []string{"1.29.0", "v1.29.9-eks-1234"} {
		assert.NoError(t, template(version, v129, off), "a Kubernetes %s cluster, admissionPolicy.enabled=false", version)
		assert.NoError(t, template(version, chartutil.DefaultVersionSet, off), "helm template --kube-version %s --set admissionPolicy.enabled=false", version)
		err := template(version, v129, nil)
		require.Error(t, err, "a Kubernetes %s cluster with the admission policies on", version)
		assert.Contains(t, err.Error(), "admissionPolicy.enabled needs ValidatingAdmissionPolicy v1 (Kubernetes 1.30 or later)")
		assert.Contains(t, err.Error(), "set admissionPolicy.enabled=false")
	}
	for _, version := range []string{"1.30.0", "v1.30.0-eks-1234", "v1.34.2"} {
		assert.NoError(t, template(version, v130, nil), "a Kubernetes %s cluster, the defaults", version)
		assert.NoError(t, template(version, chartutil.DefaultVersionSet, nil), "helm template --kube-version %s", version)
	}
	err = template("1.28.9", chartutil.DefaultVersionSet, off)
	require.Error(t, err, "Kubernetes 1.28")
	assert.Contains(t, err.Error(), "chart requires kubeVersion")
}

// writer is one identity the envtest cases write as.
type writer struct {
	user   string
	groups []string
}

func (w writer) client(t *testing.T, cfg *rest.Config) client.Client {
	t.Helper()
	cfg = rest.CopyConfig(cfg)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: w.user, Groups: append(slices.Clone(w.groups), "system:authenticated")}
	c, err := client.New(cfg, client.Options{Scheme: decodeScheme})
	require.NoError(t, err)
	return c
}

func serviceAccount(ns, name string) writer {
	return writer{user: "system:serviceaccount:" + ns + ":" + name, groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + ns}}
}

// requestObject is a RemediationRequest as unstructured, so that this package needs
// no API types of its own.
func requestObject(ns, name string, annotations map[string]string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "remediator.io/v1alpha1", "kind": "RemediationRequest",
		"metadata": map[string]any{"namespace": ns, "name": name},
		"spec": map[string]any{
			"remediation": "release-luks-lease",
			"target":      map[string]any{"persistentVolume": "pvc-4711"},
			"reason":      "envtest: who may write a RemediationRequest",
		},
	}}
	if annotations != nil {
		u.SetAnnotations(annotations)
	}
	return u
}

func patchJSON(ctx context.Context, c client.Client, obj client.Object, patch string) error {
	return c.Patch(ctx, obj, client.RawPatch(types.MergePatchType, []byte(patch)))
}

// TestAdmissionPolicyDecides installs the rendered policies on a real kube-apiserver
// (envtest) and has each kind of identity write: the CEL is evaluated as a cluster
// would. RBAC lets every identity here write requests (and the test's ConfigMaps),
// so each refusal is the policy's. The local cluster's e2e TestGitIsTheOnlyWriter
// covers the same ground with real ServiceAccount tokens and edit's aggregation.
func TestAdmissionPolicyDecides(t *testing.T) {
	if testing.Short() {
		t.Skip("starts kube-apiserver and etcd")
	}
	env := testenv.StartT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	admin := env.Client
	const requestNS, terminatingNS, policiesCM = "remediator", "team-gone", release + "-policies"
	for _, ns := range []string{namespace, requestNS, terminatingNS, "trident", "kube-node-lease"} {
		err := admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
		if !apierrors.IsAlreadyExists(err) {
			require.NoError(t, err, "creating namespace %s", ns)
		}
	}
	objs := render(t, map[string]any{
		"requestNamespaces": []any{requestNS, terminatingNS},
		"requestNamespace":  map[string]any{"create": false},
		"sync": map[string]any{"enabled": true, "repo": "https://git.example.com/r.git",
			"policies": map[string]any{"enabled": true}},
		// Flux besides Argo CD, and break glass by a ServiceAccount besides the group.
		"admissionPolicy": map[string]any{
			"gitWriters": map[string]any{"serviceAccounts": []any{map[string]any{"namespace": "flux-system", "name": "kustomize-controller"}}},
			"breakGlass": map[string]any{"serviceAccounts": []any{map[string]any{"namespace": "ops", "name": "incident-bot"}}},
		},
	})
	for _, o := range objs {
		if o.GetKind() == "CustomResourceDefinition" || o.GetKind() == "Deployment" {
			continue
		}
		require.NoError(t, admin.Create(ctx, o.DeepCopy()), ref(o))
	}
	// A second release on a test cluster (safetyFloor.belowRunbook): its settings
	// ConfigMap and the policy over it.
	const labNS = "lab-system"
	require.NoError(t, admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: labNS}}))
	labObjs, err := helmchart.Render("lab", labNS, map[string]any{"safetyFloor": map[string]any{"belowRunbook": true, "unreachableLeaseAge": "1m"}})
	require.NoError(t, err)
	for _, o := range labObjs {
		if o.GetName() == "lab-remediator-settings" || o.GetName() == "lab-remediator-settings-floor" {
			require.NoError(t, admin.Create(ctx, o.DeepCopy()), ref(o))
		}
	}
	labSettings := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: labNS, Name: "lab-remediator-settings"}}

	var (
		argo       = writer{user: argoCD, groups: []string{"system:serviceaccounts", "system:serviceaccounts:argocd"}}
		syncAgent  = serviceAccount(namespace, release+"-sync")
		controller = serviceAccount(namespace, release)
		alice      = writer{user: "alice@example.com", groups: []string{"storage-team"}}
		// owner holds a namespace-wide `*` Role in the request namespace: RBAC lets it
		// write status and delete collections too.
		owner  = writer{user: "owner@example.com", groups: []string{"team-owners"}}
		oncall = writer{user: "oncall@example.com", groups: []string{"remediator:break-glass"}}
		root   = writer{user: "admin@example.com", groups: []string{"system:masters"}}
		flux   = serviceAccount("flux-system", "kustomize-controller")
		// helm-controller, in Flux's namespace too, is no Git writer here.
		fluxHelm = serviceAccount("flux-system", "helm-controller")
		bot      = serviceAccount("ops", "incident-bot")
	)
	// RBAC allows all of them (envtest runs no controller-manager, so no aggregation:
	// the chart's edit role is bound directly); the policy must tell them apart.
	for _, ns := range []string{requestNS, terminatingNS} {
		for _, w := range []writer{argo, alice, oncall, flux, fluxHelm, bot} {
			require.NoError(t, admin.Create(ctx, &rbacv1.RoleBinding{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, GenerateName: "requests-"},
				RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: release + "-edit"},
				Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: w.user}},
			}))
		}
	}
	// The `*` Role: owner's, and Argo CD's and break glass's too, so that their
	// status writes are refused by the policy rather than by RBAC.
	require.NoError(t, admin.Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Namespace: requestNS, Name: "everything"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{"*"}, Resources: []string{"*"}, Verbs: []string{"*"}}},
	}))
	require.NoError(t, admin.Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: requestNS, Name: "everything"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "everything"},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: owner.user},
			{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: argo.user},
			{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: oncall.user}},
	}))
	require.NoError(t, admin.Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "configmaps"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"},
			Verbs: []string{"get", "list", "create", "update", "patch", "delete", "deletecollection"}}},
	}))
	require.NoError(t, admin.Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "configmaps"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "configmaps"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: alice.user}},
	}))
	clients := map[string]client.Client{}
	as := func(w writer) client.Client {
		if c, ok := clients[w.user]; ok {
			return c
		}
		clients[w.user] = w.client(t, env.Config)
		return clients[w.user]
	}

	// A policy takes a moment to become effective.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		rr := requestObject(requestNS, "probe", nil)
		err := as(alice).Create(ctx, rr)
		if err == nil {
			_ = as(argo).Delete(ctx, rr)
		}
		require.Error(c, err, "alice's create was allowed")
		assert.Contains(c, err.Error(), "open a pull request")
	}, 30*time.Second, 100*time.Millisecond, "the policy in force")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		err := patchJSON(ctx, as(root), labSettings, `{"data":{"driver-name":""}}`)
		if err == nil {
			_ = patchJSON(ctx, admin, labSettings, `{"data":{"driver-name":"csi.trident.netapp.io"}}`)
		}
		require.Error(c, err, "an empty driver was allowed")
	}, 30*time.Second, 100*time.Millisecond, "the lab's policy in force")
	for _, name := range []string{"from-git", "to-delete", "annotated"} {
		annotations := map[string]string(nil)
		if name == "annotated" {
			annotations = map[string]string{"remediator.io/break-glass": "INC-1: Git is down"}
		}
		require.NoError(t, as(argo).Create(ctx, requestObject(requestNS, name, annotations)), name)
	}
	require.NoError(t, as(argo).Create(ctx, requestObject(terminatingNS, "left-behind", nil)))
	require.NoError(t, as(syncAgent).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: policiesCM}}))
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1", Labels: map[string]string{"kubernetes.io/os": "linux"},
		Annotations: map[string]string{"example.com/owner": "infra"}}}
	require.NoError(t, admin.Create(ctx, node))

	rr := func(name string) client.Object { return requestObject(requestNS, name, nil) }
	other := map[string]string{"example.com/policies": "no"}
	cm := func(name string) client.Object {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
	}
	const (
		pr           = "open a pull request in the remediation repository"
		onlyFinalize = "may write a RemediationRequest's status and add or remove its finalizer remediator.io/restore"
		onlyStatus   = "only the controller's ServiceAccount " + controllerUser + " writes a RemediationRequest's status"
		onlyCordon   = "may change only a Node's spec.unschedulable and its annotation remediator.io/cordoned-by"
		fencing      = `{"spec":{"fencing":{"confirmed":true,"method":"NodeShutdown","node":"node-1"}}}`
	)
	// In order: some cases set up the next ones.
	for _, tc := range []struct {
		name  string
		as    writer
		write func(c client.Client) error
		want  string // "" allowed, else the refusal
	}{
		{"Argo CD creates", argo, func(c client.Client) error { return c.Create(ctx, requestObject(requestNS, "argo-new", nil)) }, ""},
		{"Flux creates", flux, func(c client.Client) error { return c.Create(ctx, requestObject(requestNS, "flux-new", nil)) }, ""},
		{"Flux patches", flux, func(c client.Client) error { return patchJSON(ctx, c, rr("flux-new"), fencing) }, ""},
		{"another ServiceAccount of Flux patches", fluxHelm, func(c client.Client) error { return patchJSON(ctx, c, rr("flux-new"), fencing) },
			fluxHelm.user + " may not update RemediationRequest remediator/flux-new"},
		{"another ServiceAccount of Flux creates", fluxHelm, func(c client.Client) error {
			return c.Create(ctx, requestObject(requestNS, "helm-new", nil))
		}, fluxHelm.user + " may not create RemediationRequest remediator/helm-new. Git is the only writer"},
		{"Flux deletes", flux, func(c client.Client) error { return c.Delete(ctx, rr("flux-new")) }, ""},
		{"the incident bot creates without a reason", bot, func(c client.Client) error {
			return c.Create(ctx, requestObject(requestNS, "bot-new", nil))
		}, "In an emergency, a member of group remediator:break-glass or user " + bot.user + " may write it with the annotation remediator.io/break-glass: <reason>."},
		{"the incident bot breaks glass", bot, func(c client.Client) error {
			return c.Create(ctx, requestObject(requestNS, "bot-new", map[string]string{"remediator.io/break-glass": "INC-6: Git is down"}))
		}, ""},
		{"the incident bot deletes what it created", bot, func(c client.Client) error { return c.Delete(ctx, rr("bot-new")) }, ""},
		{"the sync agent creates", syncAgent, func(c client.Client) error { return c.Create(ctx, requestObject(requestNS, "sync-new", nil)) }, ""},
		{"the sync agent patches", syncAgent, func(c client.Client) error { return patchJSON(ctx, c, rr("sync-new"), fencing) }, ""},
		{"the sync agent deletes", syncAgent, func(c client.Client) error { return c.Delete(ctx, rr("sync-new")) }, ""},
		{"alice creates", alice, func(c client.Client) error { return c.Create(ctx, requestObject(requestNS, "alice-new", nil)) }, alice.user + " may not create RemediationRequest remediator/alice-new"},
		{"alice creates with generateName", alice, func(c client.Client) error {
			o := requestObject(requestNS, "", nil)
			o.SetGenerateName("rr-")
			return c.Create(ctx, o)
		}, alice.user + " may not create RemediationRequest remediator/rr-"},
		{"alice adds spec.fencing", alice, func(c client.Client) error { return patchJSON(ctx, c, rr("from-git"), fencing) }, pr},
		{"alice annotates", alice, func(c client.Client) error {
			return patchJSON(ctx, c, rr("from-git"), `{"metadata":{"annotations":{"example.com/a":"b"}}}`)
		}, pr},
		{"alice deletes", alice, func(c client.Client) error { return c.Delete(ctx, rr("from-git")) }, pr},
		{"alice with the annotation but not the group", alice, func(c client.Client) error {
			return c.Create(ctx, requestObject(requestNS, "alice-glass", map[string]string{"remediator.io/break-glass": "I mean it"}))
		}, pr},
		{"the controller adds its finalizer", controller, func(c client.Client) error {
			return patchJSON(ctx, c, rr("from-git"), `{"metadata":{"finalizers":["remediator.io/restore"]}}`)
		}, ""},
		{"the controller writes status", controller, func(c client.Client) error {
			return c.Status().Patch(ctx, rr("from-git"), client.RawPatch(types.MergePatchType, []byte(`{"status":{"phase":"Running"}}`)))
		}, ""},
		{"the controller writes status with its optimistic lock", controller, func(c client.Client) error {
			cur := requestObject(requestNS, "from-git", nil)
			if err := c.Get(ctx, client.ObjectKeyFromObject(cur), cur); err != nil {
				return err
			}
			base := cur.DeepCopy()
			require.NoError(t, unstructured.SetNestedField(cur.Object, "Rejected", "status", "phase"))
			return c.Status().Patch(ctx, cur, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{}))
		}, ""},
		// Status is the controller's record: nobody else writes it, however RBAC allows.
		{"a namespace admin writes status", owner, func(c client.Client) error {
			return c.Status().Patch(ctx, rr("from-git"), client.RawPatch(types.MergePatchType, []byte(`{"status":{"phase":"Running"}}`)))
		}, owner.user + " may not write the status of RemediationRequest remediator/from-git"},
		{"a namespace admin replaces status", owner, func(c client.Client) error {
			cur := requestObject(requestNS, "from-git", nil)
			if err := c.Get(ctx, client.ObjectKeyFromObject(cur), cur); err != nil {
				return err
			}
			require.NoError(t, unstructured.SetNestedField(cur.Object, "Succeeded", "status", "phase"))
			return c.Status().Update(ctx, cur)
		}, onlyStatus},
		{"Argo CD writes status", argo, func(c client.Client) error {
			return c.Status().Patch(ctx, rr("from-git"), client.RawPatch(types.MergePatchType, []byte(`{"status":{"phase":"Succeeded"}}`)))
		}, onlyStatus},
		{"break glass writes status of an annotated request", oncall, func(c client.Client) error {
			return c.Status().Patch(ctx, rr("annotated"), client.RawPatch(types.MergePatchType, []byte(`{"status":{"phase":"Succeeded"}}`)))
		}, onlyStatus},
		{"the status is the controller's", owner, func(c client.Client) error {
			cur := requestObject(requestNS, "from-git", nil)
			if err := c.Get(ctx, client.ObjectKeyFromObject(cur), cur); err != nil {
				return err
			}
			if phase, _, _ := unstructured.NestedString(cur.Object, "status", "phase"); phase != "Rejected" {
				return fmt.Errorf("status.phase %q, want the controller's Rejected", phase)
			}
			return nil
		}, ""},
		{"a namespace admin deletes every request", owner, func(c client.Client) error {
			return c.DeleteAllOf(ctx, requestObject(requestNS, "", nil), client.InNamespace(requestNS))
		}, pr},
		{"alice removes the finalizer", alice, func(c client.Client) error {
			return patchJSON(ctx, c, rr("from-git"), `{"metadata":{"finalizers":null}}`)
		}, pr},
		{"the controller adds another finalizer", controller, func(c client.Client) error {
			return patchJSON(ctx, c, rr("from-git"), `{"metadata":{"finalizers":["remediator.io/restore","example.com/keep"]}}`)
		}, onlyFinalize},
		{"the controller changes spec", controller, func(c client.Client) error { return patchJSON(ctx, c, rr("from-git"), fencing) }, onlyFinalize},
		{"the controller changes a label", controller, func(c client.Client) error {
			return patchJSON(ctx, c, rr("from-git"), `{"metadata":{"labels":{"a":"b"}}}`)
		}, onlyFinalize},
		{"the controller annotates", controller, func(c client.Client) error {
			return patchJSON(ctx, c, rr("from-git"), `{"metadata":{"annotations":{"remediator.io/break-glass":"controller"}}}`)
		}, onlyFinalize},
		// RBAC refuses these before the policy would.
		{"the controller creates", controller, func(c client.Client) error { return c.Create(ctx, requestObject(requestNS, "ctl-new", nil)) }, "cannot create"},
		{"the controller deletes", controller, func(c client.Client) error { return c.Delete(ctx, rr("to-delete")) }, "cannot delete"},
		{"the controller removes its finalizer", controller, func(c client.Client) error {
			return patchJSON(ctx, c, rr("from-git"), `{"metadata":{"finalizers":null}}`)
		}, ""},
		{"break glass without the annotation", oncall, func(c client.Client) error {
			return c.Create(ctx, requestObject(requestNS, "glass", nil))
		}, pr},
		{"break glass with an empty reason", oncall, func(c client.Client) error {
			return c.Create(ctx, requestObject(requestNS, "glass", map[string]string{"remediator.io/break-glass": " "}))
		}, pr},
		{"break glass creates", oncall, func(c client.Client) error {
			return c.Create(ctx, requestObject(requestNS, "glass", map[string]string{"remediator.io/break-glass": "INC-2: Git is down"}))
		}, ""},
		// The reason goes into the request's conditions and an Event: bounded, in bytes.
		{"break glass gives a reason of 1025 bytes", oncall, func(c client.Client) error {
			return c.Create(ctx, requestObject(requestNS, "glass-long", map[string]string{"remediator.io/break-glass": strings.Repeat("x", 1025)}))
		}, "the break-glass reason (annotation remediator.io/break-glass) of RemediationRequest remediator/glass-long is 1025 bytes long: at most 1024 are allowed"},
		{"break glass gives a reason of 342 characters, 1026 bytes", oncall, func(c client.Client) error {
			return c.Create(ctx, requestObject(requestNS, "glass-euro", map[string]string{"remediator.io/break-glass": strings.Repeat("€", 342)}))
		}, "is 1026 bytes long: at most 1024 are allowed"},
		{"break glass gives a reason of 1024 bytes", oncall, func(c client.Client) error {
			return c.Create(ctx, requestObject(requestNS, "glass-1024", map[string]string{"remediator.io/break-glass": strings.Repeat("x", 1024)}))
		}, ""},
		{"break glass lengthens a reason", oncall, func(c client.Client) error {
			return patchJSON(ctx, c, rr("glass-1024"), `{"metadata":{"annotations":{"remediator.io/break-glass":"`+strings.Repeat("y", 40000)+`"}}}`)
		}, "is 40000 bytes long"},
		{"Argo CD writes a long annotation", argo, func(c client.Client) error {
			return c.Create(ctx, requestObject(requestNS, "argo-long", map[string]string{"remediator.io/break-glass": strings.Repeat("x", 2000)}))
		}, "is 2000 bytes long"},
		{"break glass patches an annotated request", oncall, func(c client.Client) error { return patchJSON(ctx, c, rr("annotated"), fencing) }, ""},
		{"break glass removes the annotation", oncall, func(c client.Client) error {
			return patchJSON(ctx, c, rr("annotated"), `{"metadata":{"annotations":null}}`)
		}, pr},
		{"break glass patches a request from Git", oncall, func(c client.Client) error { return patchJSON(ctx, c, rr("to-delete"), fencing) }, pr},
		{"break glass deletes a request without the annotation", oncall, func(c client.Client) error { return c.Delete(ctx, rr("to-delete")) }, pr},
		{"break glass annotates a request", oncall, func(c client.Client) error {
			return patchJSON(ctx, c, rr("to-delete"), `{"metadata":{"annotations":{"remediator.io/break-glass":"INC-3: stop it"}}}`)
		}, ""},
		{"break glass deletes the annotated request", oncall, func(c client.Client) error { return c.Delete(ctx, rr("to-delete")) }, ""},
		{"Argo CD patches", argo, func(c client.Client) error { return patchJSON(ctx, c, rr("from-git"), fencing) }, ""},
		{"Argo CD deletes", argo, func(c client.Client) error { return c.Delete(ctx, rr("from-git")) }, ""},

		{"the sync agent writes the policies", syncAgent, func(c client.Client) error {
			return patchJSON(ctx, c, cm(policiesCM), `{"data":{"schema.cue":"package policies\n"}}`)
		}, ""},
		{"alice writes the policies", alice, func(c client.Client) error {
			return patchJSON(ctx, c, cm(policiesCM), `{"data":{"luks.cue":"package policies\n"}}`)
		}, alice.user + " may not update the controller's policies, ConfigMap " + namespace + "/" + policiesCM},
		{"alice deletes the policies", alice, func(c client.Client) error { return c.Delete(ctx, cm(policiesCM)) }, pr},
		// The settings ConfigMap feeds the controller the safety floor's minimums: no
		// writer lowers them below the runbook (safetyFloor.belowRunbook is off).
		{"alice lowers the unreachable floor in the settings", alice, func(c client.Client) error {
			return patchJSON(ctx, c, cm(release+"-settings"), `{"data":{"floor-unreachable-lease-age":"1m"}}`)
		}, "floor-unreachable-lease-age in the settings ConfigMap may not be below the runbook's 5m"},
		{"alice lowers the healthy floor to seconds", alice, func(c client.Client) error {
			return patchJSON(ctx, c, cm(release+"-settings"), `{"data":{"floor-healthy-lease-age":"599s"}}`)
		}, "floor-healthy-lease-age in the settings ConfigMap may not be below the runbook's 10m"},
		{"alice removes the healthy floor from the settings", alice, func(c client.Client) error {
			return patchJSON(ctx, c, cm(release+"-settings"), `{"data":{"floor-healthy-lease-age":null}}`)
		}, "floor-healthy-lease-age in the settings ConfigMap " + release + "-settings must be a positive Go duration (such as 50s, 5m or 1h30m), and may not be missing"},
		{"alice writes a floor that is no duration", alice, func(c client.Client) error {
			return patchJSON(ctx, c, cm(release+"-settings"), `{"data":{"floor-unreachable-lease-age":"5 minutes"}}`)
		}, "floor-unreachable-lease-age in the settings ConfigMap " + release + "-settings must be a positive Go duration"},
		// Every other key the controller reads from the settings is bounded too.
		{"alice sets the heartbeat grace to a millisecond", alice, func(c client.Client) error {
			return patchJSON(ctx, c, cm(release+"-settings"), `{"data":{"node-lease-grace-period":"1ms"}}`)
		}, "node-lease-grace-period in the settings ConfigMap may not be below 40s, the kubelet's default node Lease duration"},
		{"alice sets the heartbeat grace below the node Lease", alice, func(c client.Client) error {
			return patchJSON(ctx, c, cm(release+"-settings"), `{"data":{"node-lease-grace-period":"39s"}}`)
		}, "node-lease-grace-period in the settings ConfigMap may not be below 40s"},
		{"alice removes the heartbeat grace", alice, func(c client.Client) error {
			return patchJSON(ctx, c, cm(release+"-settings"), `{"data":{"node-lease-grace-period":null}}`)
		}, "node-lease-grace-period in the settings ConfigMap " + release + "-settings must be a positive Go duration"},
		{"alice lifts the cap", alice, func(c client.Client) error {
			return patchJSON(ctx, c, cm(release+"-settings"), `{"data":{"max-concurrent-remediations":"0"}}`)
		}, "max-concurrent-remediations in the settings ConfigMap " + release + "-settings must be a whole number of 1 or more"},
		{"alice writes a cap that is no number", alice, func(c client.Client) error {
			return patchJSON(ctx, c, cm(release+"-settings"), `{"data":{"max-concurrent-remediations":"two"}}`)
		}, "max-concurrent-remediations in the settings ConfigMap " + release + "-settings must be a whole number of 1 or more"},
		{"alice empties the driver", alice, func(c client.Client) error {
			return patchJSON(ctx, c, cm(release+"-settings"), `{"data":{"driver-name":""}}`)
		}, "driver-name in the settings ConfigMap " + release + "-settings may not be empty or missing"},
		{"alice empties the node-plugin selector", alice, func(c client.Client) error {
			return patchJSON(ctx, c, cm(release+"-settings"), `{"data":{"node-plugin-selector":" "}}`)
		}, "node-plugin-selector in the settings ConfigMap " + release + "-settings may not be empty or missing"},
		{"alice writes a Trident namespace that is no namespace", alice, func(c client.Client) error {
			return patchJSON(ctx, c, cm(release+"-settings"), `{"data":{"trident-namespace":"Trident/x"}}`)
		}, "trident-namespace in the settings ConfigMap " + release + "-settings must be a namespace name"},
		{"alice removes the Trident namespace", alice, func(c client.Client) error {
			return patchJSON(ctx, c, cm(release+"-settings"), `{"data":{"trident-namespace":null}}`)
		}, "trident-namespace in the settings ConfigMap " + release + "-settings must be a namespace name, and may not be missing"},
		{"alice allows a Trident namespace that is no namespace", alice, func(c client.Client) error {
			return patchJSON(ctx, c, cm(release+"-settings"), `{"data":{"allowed-trident-namespaces":"netapp-b,,Tenant"}}`)
		}, "allowed-trident-namespaces in the settings ConfigMap " + release + "-settings must be namespace names separated by commas"},
		{"alice moves the pause ConfigMap", alice, func(c client.Client) error {
			return patchJSON(ctx, c, cm(release+"-settings"), `{"data":{"pause-configmap":"default/not-paused"}}`)
		}, "pause-configmap in the settings ConfigMap " + release + "-settings must be " + namespace + "/remediator-pause"},
		{"alice removes the pause ConfigMap", alice, func(c client.Client) error {
			return patchJSON(ctx, c, cm(release+"-settings"), `{"data":{"pause-configmap":null}}`)
		}, "pause-configmap in the settings ConfigMap " + release + "-settings must be " + namespace + "/remediator-pause"},
		{"alice writes settings within the bounds", alice, func(c client.Client) error {
			return patchJSON(ctx, c, cm(release+"-settings"), `{"data":{"node-lease-grace-period":"40s","max-concurrent-remediations":"1",`+
				`"allowed-trident-namespaces":"netapp-b,netapp-c","trident-namespace":"netapp-a"}}`)
		}, ""},
		{"alice allows no other Trident namespace", alice, func(c client.Client) error {
			return patchJSON(ctx, c, cm(release+"-settings"), `{"data":{"allowed-trident-namespaces":""}}`)
		}, ""},
		// belowRunbook (release lab): the runbook's minimums give way, the structure stays.
		{"below the runbook, the heartbeat grace is lowered", root, func(c client.Client) error {
			return patchJSON(ctx, c, labSettings, `{"data":{"node-lease-grace-period":"1s","floor-unreachable-lease-age":"10s"}}`)
		}, ""},
		{"below the runbook, the heartbeat grace is zero", root, func(c client.Client) error {
			return patchJSON(ctx, c, labSettings, `{"data":{"node-lease-grace-period":"0s"}}`)
		}, "node-lease-grace-period in the settings ConfigMap lab-remediator-settings must be a positive Go duration"},
		{"below the runbook, the cap is lifted", root, func(c client.Client) error {
			return patchJSON(ctx, c, labSettings, `{"data":{"max-concurrent-remediations":"0"}}`)
		}, "max-concurrent-remediations in the settings ConfigMap lab-remediator-settings must be a whole number of 1 or more"},
		{"below the runbook, the driver is emptied", root, func(c client.Client) error {
			return patchJSON(ctx, c, labSettings, `{"data":{"driver-name":""}}`)
		}, "driver-name in the settings ConfigMap lab-remediator-settings may not be empty"},
		{"alice raises the floor", alice, func(c client.Client) error {
			return patchJSON(ctx, c, cm(release+"-settings"), `{"data":{"floor-unreachable-lease-age":"1h5m","floor-healthy-lease-age":"600s"}}`)
		}, ""},
		{"alice writes another ConfigMap", alice, func(c client.Client) error {
			return c.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "other", Labels: other}})
		}, ""},
		{"alice patches another ConfigMap", alice, func(c client.Client) error {
			return patchJSON(ctx, c, cm("other"), `{"data":{"a":"b"}}`)
		}, ""},
		{"alice deletes other ConfigMaps as a collection", alice, func(c client.Client) error {
			return c.DeleteAllOf(ctx, &corev1.ConfigMap{}, client.InNamespace(namespace), client.MatchingLabels(other))
		}, ""},
		{"alice writes another ConfigMap again", alice, func(c client.Client) error {
			return c.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "other", Labels: other}})
		}, ""},
		// A deletecollection's per-item DELETE carries no name (`kubectl delete
		// --raw`, client-go's DeleteCollection): the policy must still see the policies.
		{"alice deletes every ConfigMap", alice, func(c client.Client) error {
			return c.DeleteAllOf(ctx, &corev1.ConfigMap{}, client.InNamespace(namespace))
		}, alice.user + " may not delete the controller's policies, ConfigMap " + namespace + "/" + policiesCM},
		{"the policies survive the collection delete", alice, func(client.Client) error {
			return admin.Get(ctx, client.ObjectKey{Namespace: namespace, Name: policiesCM}, &corev1.ConfigMap{})
		}, ""},
		{"break glass writes the policies", oncall, func(c client.Client) error {
			return patchJSON(ctx, c, cm(policiesCM), `{"metadata":{"annotations":{"remediator.io/break-glass":"INC-4: bad policy merged"}}}`)
		}, "forbidden"}, // allowed by the policy, but RBAC gives oncall no ConfigMaps here

		{"the controller cordons", controller, func(c client.Client) error {
			return patchJSON(ctx, c, node, `{"spec":{"unschedulable":true},"metadata":{"annotations":{"remediator.io/cordoned-by":"remediator/rr-1"}}}`)
		}, ""},
		{"the controller labels", controller, func(c client.Client) error {
			return patchJSON(ctx, c, node, `{"metadata":{"labels":{"example.com/pool":"quarantine"}}}`)
		}, onlyCordon},
		{"the controller removes a label", controller, func(c client.Client) error {
			return patchJSON(ctx, c, node, `{"metadata":{"labels":{"kubernetes.io/os":null}}}`)
		}, onlyCordon},
		{"the controller taints", controller, func(c client.Client) error {
			return patchJSON(ctx, c, node, `{"spec":{"taints":[{"key":"example.com/q","effect":"NoSchedule"}]}}`)
		}, onlyCordon},
		{"the controller sets the providerID", controller, func(c client.Client) error {
			return patchJSON(ctx, c, node, `{"spec":{"providerID":"kwok://node-1"}}`)
		}, onlyCordon},
		{"the controller adds another annotation", controller, func(c client.Client) error {
			return patchJSON(ctx, c, node, `{"metadata":{"annotations":{"example.com/note":"x"}}}`)
		}, onlyCordon},
		{"the controller removes another annotation", controller, func(c client.Client) error {
			return patchJSON(ctx, c, node, `{"metadata":{"annotations":{"example.com/owner":null}}}`)
		}, onlyCordon},
		{"the controller uncordons", controller, func(c client.Client) error {
			return patchJSON(ctx, c, node, `{"spec":{"unschedulable":null},"metadata":{"annotations":{"remediator.io/cordoned-by":null}}}`)
		}, ""},
		{"an admin labels the node", root, func(c client.Client) error {
			return patchJSON(ctx, c, node, `{"metadata":{"labels":{"example.com/pool":"quarantine"}}}`)
		}, ""},
		// Only its own cordon: the one that carries its mark.
		{"an admin cordons (kubectl cordon)", root, func(c client.Client) error {
			return patchJSON(ctx, c, node, `{"spec":{"unschedulable":true}}`)
		}, ""},
		{"the controller uncordons someone else's cordon", controller, func(c client.Client) error {
			return patchJSON(ctx, c, node, `{"spec":{"unschedulable":null}}`)
		}, "the controller's ServiceAccount may not uncordon node node-1: it carries no annotation remediator.io/cordoned-by"},
		{"the controller uncordons with false", controller, func(c client.Client) error {
			return patchJSON(ctx, c, node, `{"spec":{"unschedulable":false}}`)
		}, "may not uncordon node node-1"},
		{"the controller marks someone else's cordon", controller, func(c client.Client) error {
			return patchJSON(ctx, c, node, `{"metadata":{"annotations":{"remediator.io/cordoned-by":"remediator/rr-1"}}}`)
		}, "may add the annotation remediator.io/cordoned-by to node node-1 only in the write that cordons it"},
		{"the controller marks and uncordons at once", controller, func(c client.Client) error {
			return patchJSON(ctx, c, node, `{"spec":{"unschedulable":null},"metadata":{"annotations":{"remediator.io/cordoned-by":"remediator/rr-1"}}}`)
		}, "may not uncordon node node-1"},
		{"an admin uncordons", root, func(c client.Client) error {
			return patchJSON(ctx, c, node, `{"spec":{"unschedulable":null}}`)
		}, ""},
		{"the controller cordons again", controller, func(c client.Client) error {
			return patchJSON(ctx, c, node, `{"spec":{"unschedulable":true},"metadata":{"annotations":{"remediator.io/cordoned-by":"remediator/rr-2"}}}`)
		}, ""},
		{"the controller rewrites its mark", controller, func(c client.Client) error {
			return patchJSON(ctx, c, node, `{"metadata":{"annotations":{"remediator.io/cordoned-by":"remediator/rr-3"}}}`)
		}, "and may not change it"},
		{"the controller leaves the cordon and removes its mark", controller, func(c client.Client) error {
			return patchJSON(ctx, c, node, `{"metadata":{"annotations":{"remediator.io/cordoned-by":null}}}`)
		}, ""},
		{"the controller uncordons after its mark is gone", controller, func(c client.Client) error {
			return patchJSON(ctx, c, node, `{"spec":{"unschedulable":null}}`)
		}, "may not uncordon node node-1"},
	} {
		err := tc.write(as(tc.as))
		if tc.want == "" {
			assert.NoError(t, err, "%s: want allowed", tc.name)
			continue
		}
		if assert.Error(t, err, "%s: want refused", tc.name) {
			// 403, or 422 for a value that is malformed (a policy's reason Invalid).
			assert.True(t, apierrors.IsForbidden(err) || apierrors.IsInvalid(err), "%s: want 403 or 422, got %v", tc.name, err)
			assert.Contains(t, err.Error(), tc.want, "%s", tc.name)
		}
	}

	// Deleting a request namespace deletes its requests (the namespace controller,
	// whoever it runs as): a delete in a terminating namespace is allowed.
	left := requestObject(terminatingNS, "left-behind", nil)
	assert.ErrorContains(t, as(alice).Delete(ctx, left), pr, "alice deletes in a live namespace")
	require.NoError(t, admin.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: terminatingNS}}))
	// The policy reads the namespace from the API server's informer, which sees the
	// deletion a moment later (seen refused once under -race in a clean-clone run).
	assert.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.NoError(c, as(alice).Delete(ctx, left))
	}, 10*time.Second, 100*time.Millisecond, "alice deletes in a terminating namespace")
}
