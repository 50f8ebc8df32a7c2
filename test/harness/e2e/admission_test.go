//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
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
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/remediator/remediator/api/v1alpha1"
	"github.com/remediator/remediator/test/harness/helmchart"
)

// prMessage is what the chart's admission policy tells everyone who is not a Git
// writer (charts/remediator/templates/admissionpolicy.yaml).
const prMessage = "open a pull request in the remediation repository"

// argoCDUser is Argo CD's application controller, a Git writer by default.
const argoCDUser = "system:serviceaccount:argocd:argocd-application-controller"

// installAdmission creates every object the chart renders for values in system but
// the CRD and the Deployments: these tests judge writes, and run no controller. It
// returns the controller's and the sync agent's ServiceAccounts.
func installAdmission(t *testing.T, release, system string, values map[string]any) (controllerSA, syncSA string) {
	t.Helper()
	ctx := context.Background()
	objs, err := helmchart.Render(release, system, values)
	require.NoError(t, err)
	policies := 0
	for _, o := range objs {
		switch o.GetKind() {
		case "CustomResourceDefinition", "Deployment":
			continue
		case "ServiceAccount":
			if strings.HasSuffix(o.GetName(), "-sync") {
				syncSA = o.GetName()
			} else {
				controllerSA = o.GetName()
			}
		case "ValidatingAdmissionPolicy":
			policies++
		}
		obj := o.DeepCopy()
		require.NoError(t, k8s.Create(ctx, obj), "applying rendered %s %s/%s", o.GetKind(), o.GetNamespace(), o.GetName())
		t.Cleanup(func() { _ = k8s.Delete(context.Background(), &unstructured.Unstructured{Object: obj.Object}) })
	}
	require.NotZero(t, policies, "the chart rendered no ValidatingAdmissionPolicy")
	require.NotEmpty(t, controllerSA, "the chart rendered no controller ServiceAccount")
	return controllerSA, syncSA
}

// impersonate returns a client that impersonates user with groups (plus system:authenticated).
func impersonate(t *testing.T, user string, groups ...string) client.Client {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	require.NoError(t, err)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: append(groups, "system:authenticated")}
	c, err := client.New(cfg, client.Options{Scheme: k8s.Scheme()})
	require.NoError(t, err)
	return c
}

// asServiceAccount returns a client authenticated with a bound token of the
// ServiceAccount, so the API server sees its real user name and groups.
func asServiceAccount(t *testing.T, ns, sa string) client.Client {
	t.Helper()
	path, _ := serviceAccountKubeconfig(t, ns, sa)
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	require.NoError(t, err)
	c, err := client.New(cfg, client.Options{Scheme: k8s.Scheme()})
	require.NoError(t, err)
	return c
}

// bind grants subject the ClusterRole role in ns.
func bind(t *testing.T, ns, role string, subject rbacv1.Subject) {
	t.Helper()
	create(t, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, GenerateName: "e2e-admission-"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
		Subjects:   []rbacv1.Subject{subject},
	})
}

func userSubject(name string) rbacv1.Subject {
	return rbacv1.Subject{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: name}
}

// admissionRequest is a valid request that nothing acts on: no controller runs.
func admissionRequest(ns, name string, annotations map[string]string) *v1alpha1.RemediationRequest {
	return &v1alpha1.RemediationRequest{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Annotations: annotations},
		Spec: v1alpha1.RemediationRequestSpec{
			Remediation: v1alpha1.RemediationReleaseLUKSLease,
			Target:      v1alpha1.Target{PersistentVolume: "pvc-e2e-admission-7aee-45e8-a5fa-d4500272528e"},
			Reason:      "e2e: who may write a RemediationRequest",
		},
	}
}

// mergePatch patches obj (only its kind, namespace and name count) with patch.
func mergePatch(ctx context.Context, c client.Client, obj client.Object, patch map[string]any) error {
	data, err := json.Marshal(patch)
	if err != nil {
		return err
	}
	return c.Patch(ctx, obj, client.RawPatch(types.MergePatchType, data))
}

var fencingPatch = map[string]any{"spec": map[string]any{"fencing": map[string]any{
	"confirmed": true, "method": "NodeShutdown", "node": "kwok-node-1"}}}

// refusedBy asserts that err is the admission policy's refusal (403 with the
// pull-request message), not RBAC's.
func refusedBy(t *testing.T, err error, want, what string) {
	t.Helper()
	if assert.Error(t, err, "%s: want refused", what) {
		assert.True(t, apierrors.IsForbidden(err), "%s: want 403 Forbidden, got %v", what, err)
		assert.Contains(t, err.Error(), want, "%s: the refusal", what)
		assert.Contains(t, err.Error(), "ValidatingAdmissionPolicy", "%s: refused by the admission policy, not RBAC", what)
	}
}

// TestGitIsTheOnlyWriter installs the chart's admission policies on the local
// cluster and writes RemediationRequests, the policies ConfigMap and a Node as each
// kind of identity: a user with `edit` and a user with an explicit Role on requests
// are refused with the pull-request message, however RBAC allows them; Argo CD's
// ServiceAccount, the chart's sync agent and break glass (with its annotation) are
// allowed; the controller's ServiceAccount may write status and its finalizer, and
// may cordon a node, nothing more.
func TestGitIsTheOnlyWriter(t *testing.T) {
	ctx := context.Background()
	system := namespace(t, "e2e-admission-system")
	ns := namespace(t, "e2e-admission")
	const release = "adm"
	controllerSA, syncSA := installAdmission(t, release, system, map[string]any{
		"trident":           map[string]any{"namespace": tridentNS},
		"requestNamespaces": []any{ns},
		"requestNamespace":  map[string]any{"create": false},
		// edit and admin may write requests as far as RBAC goes: the policy must hold
		// on its own.
		"rbac": map[string]any{"aggregateToEdit": true},
		"sync": map[string]any{"enabled": true, "repo": "https://git.example.com/platform/remediation.git",
			"policies": map[string]any{"enabled": true}},
	})
	require.NotEmpty(t, syncSA, "the chart rendered no sync ServiceAccount")

	const editUser, roleUser, breakGlassUser = "e2e-edit@example.com", "e2e-role@example.com", "e2e-oncall@example.com"
	bind(t, ns, "edit", userSubject(editUser))
	bind(t, system, "edit", userSubject(editUser))
	explicit := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "e2e-admission-requests"},
		// status too: RBAC allows it, the policy must refuse it.
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{v1alpha1.GroupVersion.Group}, Resources: []string{"remediationrequests", "remediationrequests/status"},
			Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}}},
	}
	create(t, explicit)
	create(t, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "e2e-admission-requests"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: explicit.Name},
		Subjects:   []rbacv1.Subject{userSubject(roleUser)},
	})
	// Argo CD's RBAC is its own install's; here it gets the chart's request writer role.
	bind(t, ns, release+"-remediator-edit", rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Namespace: "argocd", Name: "argocd-application-controller"})
	bind(t, ns, release+"-remediator-edit", userSubject(breakGlassUser))

	edit := impersonate(t, editUser)
	role := impersonate(t, roleUser)
	argo := impersonate(t, argoCDUser, "system:serviceaccounts", "system:serviceaccounts:argocd")
	oncall := impersonate(t, breakGlassUser, "remediator:break-glass")
	controller := asServiceAccount(t, system, controllerSA)
	syncAgent := asServiceAccount(t, system, syncSA)

	// A policy takes a moment to become effective, and edit a moment to aggregate
	// the chart's role: wait until edit's create is refused by the policy.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		rr := admissionRequest(ns, "e2e-probe", nil)
		err := edit.Create(ctx, rr)
		if err == nil {
			_ = k8s.Delete(ctx, rr) // the policy is not in force yet; try again
		}
		require.Error(c, err, "edit's create was allowed")
		assert.Contains(c, err.Error(), prMessage)
	}, 60*time.Second, poll, "the policy refuses edit's create with the pull-request message")

	// The API server loads each policy and binding on its own, so the requests'
	// policy in force says nothing of the policies ConfigMap's: wait for that one
	// too, with a dry run (admission judges it; nothing is stored, nothing to undo).
	policies := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: system, Name: release + "-remediator-policies"},
		Data: map[string]string{"schema.cue": "package policies\n"}}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		err := edit.Create(ctx, policies.DeepCopy(), client.DryRunAll)
		require.Error(c, err, "edit's dry-run create of the policies ConfigMap was allowed")
		assert.Contains(c, err.Error(), prMessage)
	}, 60*time.Second, poll, "the policy refuses edit's create of the policies ConfigMap")

	// The policies type-check against the CRD's and the Node's schemas (the
	// controller-manager's policy status controller).
	for _, name := range []string{"-git-writers", "-policies-writers", "-node-writes"} {
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			p := &admissionregistrationv1.ValidatingAdmissionPolicy{}
			require.NoError(c, k8s.Get(ctx, client.ObjectKey{Name: release + "-remediator" + name}, p))
			require.NotNil(c, p.Status.TypeChecking, "%s: not type-checked yet", p.Name)
			assert.Empty(c, p.Status.TypeChecking.ExpressionWarnings, "%s: type-checking warnings", p.Name)
		}, 60*time.Second, poll, "the policies type-check")
	}

	// Argo CD writes from Git.
	gitRR := admissionRequest(ns, "from-git", nil)
	require.NoError(t, argo.Create(ctx, gitRR), "Argo CD creates a request")
	t.Cleanup(func() {
		// The restore finalizer would hold the namespace's deletion: no controller runs.
		_ = mergePatch(context.Background(), argo, admissionRequest(ns, "from-git", nil), map[string]any{"metadata": map[string]any{"finalizers": nil}})
	})

	// The controller adds its finalizer and writes status.
	require.NoError(t, mergePatch(ctx, controller, gitRR, map[string]any{"metadata": map[string]any{"finalizers": []string{v1alpha1.Finalizer}}}),
		"the controller adds its finalizer")
	require.NoError(t, controller.Status().Patch(ctx, gitRR, client.RawPatch(types.MergePatchType, []byte(`{"status":{"phase":"Rejected"}}`))),
		"the controller writes status")
	refusedBy(t, mergePatch(ctx, controller, gitRR, fencingPatch), "may write a RemediationRequest's status and add or remove its finalizer", "the controller patches spec.fencing")
	refusedBy(t, mergePatch(ctx, controller, gitRR, map[string]any{"metadata": map[string]any{"finalizers": []string{v1alpha1.Finalizer, "example.com/other"}}}),
		"may write a RemediationRequest's status", "the controller adds another finalizer")
	refusedBy(t, mergePatch(ctx, controller, gitRR, map[string]any{"metadata": map[string]any{"annotations": map[string]any{"example.com/a": "b"}}}),
		"may write a RemediationRequest's status", "the controller annotates a request")
	// (RBAC already refuses the controller's create and delete.)

	// Neither edit nor an explicit Role on requests may write one, however RBAC allows it.
	for who, c := range map[string]client.Client{"edit": edit, "a Role on requests": role} {
		refusedBy(t, c.Create(ctx, admissionRequest(ns, "by-hand", nil)), prMessage, who+": create")
		refusedBy(t, mergePatch(ctx, c, gitRR, fencingPatch), prMessage, who+": patch adding spec.fencing")
		refusedBy(t, mergePatch(ctx, c, gitRR, map[string]any{"metadata": map[string]any{"finalizers": nil}}), prMessage, who+": remove the finalizer")
		refusedBy(t, mergePatch(ctx, c, gitRR, map[string]any{"metadata": map[string]any{"annotations": map[string]any{v1alpha1.AnnotationBreakGlass: "not a member"}}}),
			prMessage, who+": break-glass annotation without the group")
		refusedBy(t, c.Delete(ctx, admissionRequest(ns, "from-git", nil)), prMessage, who+": delete")
	}
	// Status is the controller's alone.
	refusedBy(t, role.Status().Patch(ctx, gitRR, client.RawPatch(types.MergePatchType, []byte(`{"status":{"phase":"Succeeded"}}`))),
		roleUser+" may not write the status of RemediationRequest "+ns+"/from-git", "a Role on requests and their status: status")
	err := edit.Create(ctx, admissionRequest(ns, "by-hand", nil))
	require.Error(t, err)
	assert.Contains(t, err.Error(), editUser+" may not create RemediationRequest "+ns+"/by-hand", "the message names who and what")
	current := &v1alpha1.RemediationRequest{}
	require.NoError(t, k8s.Get(ctx, client.ObjectKeyFromObject(gitRR), current))
	assert.Nil(t, current.Spec.Fencing, "spec.fencing after the refused patches")
	assert.Equal(t, []string{v1alpha1.Finalizer}, current.Finalizers, "finalizers after the refused patches")
	assert.Equal(t, v1alpha1.PhaseRejected, current.Status.Phase, "status.phase after the refused status patch")

	// The controller releases its finalizer; Argo CD updates and deletes.
	require.NoError(t, mergePatch(ctx, controller, gitRR, map[string]any{"metadata": map[string]any{"finalizers": nil}}), "the controller removes its finalizer")
	require.NoError(t, mergePatch(ctx, argo, gitRR, fencingPatch), "Argo CD patches spec.fencing")
	require.NoError(t, argo.Delete(ctx, admissionRequest(ns, "from-git", nil)), "Argo CD deletes a request")

	// The chart's sync agent writes from Git too.
	synced := admissionRequest(ns, "synced", nil)
	require.NoError(t, syncAgent.Create(ctx, synced), "the sync agent creates a request")
	require.NoError(t, mergePatch(ctx, syncAgent, synced, fencingPatch), "the sync agent patches a request")
	require.NoError(t, syncAgent.Delete(ctx, admissionRequest(ns, "synced", nil)), "the sync agent deletes a request")

	// Break glass: a member of the group, with the annotation and a reason.
	reason := map[string]string{v1alpha1.AnnotationBreakGlass: "INC-4711: Git is down and node-3's Lease blocks the payments database"}
	refusedBy(t, oncall.Create(ctx, admissionRequest(ns, "glass", nil)), prMessage, "break glass without the annotation")
	refusedBy(t, oncall.Create(ctx, admissionRequest(ns, "glass", map[string]string{v1alpha1.AnnotationBreakGlass: "  "})), prMessage, "break glass with an empty reason")
	require.NoError(t, oncall.Create(ctx, admissionRequest(ns, "glass", reason)), "break glass with the annotation")
	require.NoError(t, mergePatch(ctx, oncall, admissionRequest(ns, "glass", nil), fencingPatch), "break glass patches an annotated request")
	require.NoError(t, argo.Create(ctx, admissionRequest(ns, "plain", nil)))
	refusedBy(t, oncall.Delete(ctx, admissionRequest(ns, "plain", nil)), prMessage, "break glass deletes a request that does not carry the annotation")
	require.NoError(t, mergePatch(ctx, oncall, admissionRequest(ns, "plain", nil), map[string]any{"metadata": map[string]any{"annotations": reason}}),
		"break glass annotates a request")
	require.NoError(t, oncall.Delete(ctx, admissionRequest(ns, "plain", nil)), "break glass deletes the annotated request")
	require.NoError(t, oncall.Delete(ctx, admissionRequest(ns, "glass", nil)), "break glass deletes its request")

	// The policies ConfigMap from Git: the sync agent writes it, edit may not.
	require.NoError(t, syncAgent.Create(ctx, policies), "the sync agent creates the policies ConfigMap")
	require.NoError(t, mergePatch(ctx, syncAgent, policies, map[string]any{"data": map[string]any{"schema.cue": "package policies\n\n"}}),
		"the sync agent updates the policies ConfigMap")
	refusedBy(t, mergePatch(ctx, edit, policies, map[string]any{"data": map[string]any{"luks.cue": "package policies\n"}}),
		prMessage, "edit updates the policies ConfigMap")
	refusedBy(t, edit.Delete(ctx, policies), prMessage, "edit deletes the policies ConfigMap")
	other := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: system, Name: "e2e-not-the-policies"}}
	require.NoError(t, edit.Create(ctx, other), "edit creates another ConfigMap in the release namespace: the policy names one ConfigMap only")
	require.NoError(t, edit.Delete(ctx, other))
}

// TestControllerMayOnlyCordon: the chart's node policy lets the controller's
// ServiceAccount set spec.unschedulable and its remediator.io/cordoned-by annotation
// on a Node (cordon and uncordon) and refuses any other change it makes; an admin's
// node writes are not judged.
func TestControllerMayOnlyCordon(t *testing.T) {
	ctx := context.Background()
	system := namespace(t, "e2e-admission-nodes")
	controllerSA, _ := installAdmission(t, "admnode", system, map[string]any{
		"trident":           map[string]any{"namespace": tridentNS},
		"requestNamespaces": []any{system},
		"requestNamespace":  map[string]any{"create": false},
	})
	controller := asServiceAccount(t, system, controllerSA)
	name := extraNode(t, "e2e-admission-node", false)
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
	const refusal = "may change only a Node's spec.unschedulable and its annotation remediator.io/cordoned-by"

	label := map[string]any{"metadata": map[string]any{"labels": map[string]any{"example.com/pool": "quarantine"}}}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		err := mergePatch(ctx, controller, node, label)
		if err == nil {
			_ = mergePatch(ctx, k8s, node, map[string]any{"metadata": map[string]any{"labels": map[string]any{"example.com/pool": nil}}})
		}
		require.Error(c, err, "the controller's label was allowed")
		assert.Contains(c, err.Error(), refusal)
	}, 60*time.Second, poll, "the node policy refuses the controller's label")

	require.NoError(t, mergePatch(ctx, controller, node, map[string]any{
		"spec":     map[string]any{"unschedulable": true},
		"metadata": map[string]any{"annotations": map[string]any{"remediator.io/cordoned-by": "remediator/rr-1"}},
	}), "the controller cordons the node")
	refusedBy(t, mergePatch(ctx, controller, node, label), refusal, "the controller labels the node")
	refusedBy(t, mergePatch(ctx, controller, node, map[string]any{"spec": map[string]any{"taints": []any{
		map[string]any{"key": "example.com/quarantine", "effect": "NoSchedule"}}}}), refusal, "the controller taints the node")
	refusedBy(t, mergePatch(ctx, controller, node, map[string]any{"metadata": map[string]any{"annotations": map[string]any{"example.com/note": "x"}}}),
		refusal, "the controller adds another annotation")
	refusedBy(t, mergePatch(ctx, controller, node, map[string]any{"spec": map[string]any{"providerID": "kwok://elsewhere"}}),
		refusal, "the controller changes the rest of the spec")
	require.NoError(t, mergePatch(ctx, controller, node, map[string]any{
		"spec":     map[string]any{"unschedulable": nil},
		"metadata": map[string]any{"annotations": map[string]any{"remediator.io/cordoned-by": nil}},
	}), "the controller uncordons the node")

	got := &corev1.Node{}
	require.NoError(t, k8s.Get(ctx, client.ObjectKeyFromObject(node), got))
	assert.False(t, got.Spec.Unschedulable, "unschedulable after the uncordon")
	for _, taint := range got.Spec.Taints {
		assert.NotEqual(t, "example.com/quarantine", taint.Key, "taints")
	}
	assert.NotContains(t, got.Labels, "example.com/pool", "labels")
	assert.NotContains(t, got.Annotations, "example.com/note", "annotations")
	// Anyone else's node writes are not this policy's business.
	require.NoError(t, mergePatch(ctx, k8s, node, label), "an admin labels the node")
}

// TestControllerWorksUnderTheWritersPolicy: with the chart's admission policies in
// force over the request namespace, the controller, as the chart's ServiceAccount,
// runs requests that Argo CD wrote: its status writes, its finalizer (added for the
// cordon, released at the end) and its cordon and uncordon are all allowed.
func TestControllerWorksUnderTheWritersPolicy(t *testing.T) {
	ctx := context.Background()
	system := namespace(t, "e2e-admission-ctl-system")
	ns := namespace(t, "e2e-admission-ctl")
	const release = "admctl"
	controllerSA, _ := installAdmission(t, release, system, map[string]any{
		"trident":           map[string]any{"namespace": tridentNS},
		"requestNamespaces": []any{ns},
		"requestNamespace":  map[string]any{"create": false},
	})
	bind(t, ns, release+"-remediator-edit", rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Namespace: "argocd", Name: "argocd-application-controller"})
	argo := impersonate(t, argoCDUser, "system:serviceaccounts", "system:serviceaccounts:argocd")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		rr := admissionRequest(ns, "e2e-probe", nil)
		err := k8s.Create(ctx, rr)
		require.Error(c, err, "the admin's create was allowed")
		assert.Contains(c, err.Error(), prMessage)
	}, 60*time.Second, poll, "the policy in force")

	saKubeconfig, _ := serviceAccountKubeconfig(t, system, controllerSA)
	ctl := startController(t, "--kubeconfig", saKubeconfig, "--leader-elect", "--leader-election-namespace", system,
		"--request-namespaces", ns, "--pause-configmap", system+"/remediator-pause")
	_, claim := luksVolume(t, ns, "kwok-node-1", 40*time.Minute, 2)
	appPod(t, ns, "web-0", "kwok-node-1", claim, nil)
	rr := &v1alpha1.RemediationRequest{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "move-workload"},
		Spec: v1alpha1.RemediationRequestSpec{Remediation: v1alpha1.RemediationReleaseLUKSLease,
			Target: v1alpha1.Target{Pod: &v1alpha1.ObjectReference{Namespace: ns, Name: "web-0"}},
			Reason: "Lease retained after failed cryptsetup luksOpen on a healthy node"},
	}
	require.NoError(t, argo.Create(ctx, rr), "Argo CD creates the request")
	t.Cleanup(func() { _ = argo.Delete(context.Background(), rr) })
	got := waitPhase(t, client.ObjectKeyFromObject(rr), 90*time.Second, v1alpha1.PhaseSucceeded, v1alpha1.PhaseFailed, v1alpha1.PhaseRejected)
	assert.Equal(t, v1alpha1.PhaseSucceeded, got.Status.Phase, describe(got))
	if assert.NotNil(t, got.Status.Decision, describe(got)) {
		assert.Equal(t, "healthy-move-workload", string(got.Status.Decision.Playbook), "the playbook that cordons: %s", describe(got))
	}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		require.NoError(c, k8s.Get(ctx, client.ObjectKeyFromObject(rr), got))
		assert.Empty(c, got.Finalizers, "the finalizer released")
	}, 30*time.Second, poll, "the controller releases its finalizer")
	node := &corev1.Node{}
	require.NoError(t, k8s.Get(ctx, client.ObjectKey{Name: "kwok-node-1"}, node))
	assert.False(t, node.Spec.Unschedulable, "kwok-node-1 uncordoned")
	assert.NotContains(t, ctl.Logs(), "denied request", "the admission policy refused a write the controller makes")
}

// TestBreakGlassIsNeverSilent: a member of the break-glass group writes a request
// with the annotation and a reason, which the chart's policy allows; the controller
// shows the reason in the request's BreakGlass condition and a Warning Event.
func TestBreakGlassIsNeverSilent(t *testing.T) {
	ctx := context.Background()
	system := namespace(t, "e2e-admission-glass-system")
	ns := namespace(t, "e2e-admission-glass")
	const release = "admglass"
	controllerSA, _ := installAdmission(t, release, system, map[string]any{
		"trident":           map[string]any{"namespace": tridentNS},
		"requestNamespaces": []any{ns},
		"requestNamespace":  map[string]any{"create": false},
	})
	const oncallUser = "e2e-oncall@example.com"
	bind(t, ns, release+"-remediator-edit", userSubject(oncallUser))
	oncall := impersonate(t, oncallUser, "remediator:break-glass")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		err := oncall.Create(ctx, admissionRequest(ns, "e2e-probe", nil))
		require.Error(c, err, "a create without the annotation was allowed")
		assert.Contains(c, err.Error(), prMessage)
	}, 60*time.Second, poll, "the policy in force")

	saKubeconfig, _ := serviceAccountKubeconfig(t, system, controllerSA)
	startController(t, "--kubeconfig", saKubeconfig, "--leader-elect", "--leader-election-namespace", system,
		"--request-namespaces", ns, "--pause-configmap", system+"/remediator-pause")
	const why = "INC-4711: Git is down and the payments database is stuck"
	rr := admissionRequest(ns, "glass", map[string]string{v1alpha1.AnnotationBreakGlass: why})
	rr.Spec.Mode = v1alpha1.ModeDryRun
	require.NoError(t, oncall.Create(ctx, rr), "break glass with the annotation")
	t.Cleanup(func() { _ = oncall.Delete(context.Background(), rr) })
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		got := &v1alpha1.RemediationRequest{}
		require.NoError(c, k8s.Get(ctx, client.ObjectKeyFromObject(rr), got))
		cond := condition(got, v1alpha1.ConditionBreakGlass)
		require.NotNil(c, cond, "no %s condition: %+v", v1alpha1.ConditionBreakGlass, got.Status.Conditions)
		assert.Equal(c, metav1.ConditionTrue, cond.Status)
		assert.Contains(c, cond.Message, why)
		events, err := clientset(t).CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=glass"})
		require.NoError(c, err)
		found := false
		for _, e := range events.Items {
			found = found || (e.Reason == v1alpha1.ReasonBreakGlass && e.Type == corev1.EventTypeWarning && strings.Contains(e.Message, why))
		}
		assert.True(c, found, "no %s Warning Event naming the reason: %+v", v1alpha1.ReasonBreakGlass, events.Items)
	}, 60*time.Second, poll, "the break-glass write shows in the request's conditions and Events")
}
