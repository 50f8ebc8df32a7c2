package chart_test

// The stop button's guard (templates/pause.yaml), against a real kube-apiserver: the
// on-call (a group, a user, a ServiceAccount: pause.groups, pause.users,
// pause.serviceAccounts) may pause and resume, each write naming its author, never for good
// (immutable); nobody else may, whatever RBAC they hold; and the group reaches no
// other ConfigMap, neither through RBAC (update) nor its create (admission).

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/remediator/remediator/test/testenv"
)

// TestPauseBindsTheOnCall: the RoleBinding <release>-pause binds each kind of
// identity pause names, and nothing is bound (no Role) when it names none.
func TestPauseBindsTheOnCall(t *testing.T) {
	objs := render(t, map[string]any{"pause": map[string]any{
		"groups":          []any{"storage-oncall"},
		"users":           []any{"dave@example.com"},
		"serviceAccounts": []any{map[string]any{"namespace": "ops", "name": "incident-bot"}},
	}})
	rb := typed[rbacv1.RoleBinding](t, find(objs, "RoleBinding", namespace, release+"-pause"))
	assert.Equal(t, []rbacv1.Subject{
		{APIGroup: rbacv1.GroupName, Kind: rbacv1.GroupKind, Name: "storage-oncall"},
		{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: "dave@example.com"},
		{Kind: rbacv1.ServiceAccountKind, Namespace: "ops", Name: "incident-bot"},
	}, rb.Subjects)
	assert.Equal(t, release+"-pause", rb.RoleRef.Name)

	// A user alone is enough for the Role.
	objs = render(t, map[string]any{"pause": map[string]any{"groups": []any{}, "users": []any{"dave@example.com"}}})
	assert.NotNil(t, find(objs, "Role", namespace, release+"-pause"), "the Role with pause.users only")

	objs = render(t, map[string]any{"pause": map[string]any{"groups": []any{}}})
	assert.Nil(t, find(objs, "Role", namespace, release+"-pause"), "a Role without anyone on call")
	assert.Nil(t, find(objs, "RoleBinding", namespace, release+"-pause"), "a RoleBinding without anyone on call")
	p := policy(t, objs, release+"-pause")
	assert.Contains(t, variable(p, "onCall"), `exists(g, g in ["system:masters"])`, "only system:masters may pause")
}

func TestPauseIsTheOnCallGroupsAndSigned(t *testing.T) {
	if testing.Short() {
		t.Skip("starts kube-apiserver and etcd")
	}
	env := testenv.StartT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	admin := env.Client
	require.NoError(t, admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}))
	for _, o := range render(t, map[string]any{"pause": map[string]any{
		"groups":          []any{"storage-oncall"},
		"users":           []any{"dave@example.com"},
		"serviceAccounts": []any{map[string]any{"namespace": "ops", "name": "incident-bot"}},
	}}) {
		if ns := o.GetNamespace(); ns != "" && ns != namespace {
			continue
		}
		switch o.GetKind() {
		case "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding", "Role", "RoleBinding", "ConfigMap":
			require.NoError(t, admin.Create(ctx, o.DeepCopy()), ref(o))
		}
	}
	var (
		bob   = writer{user: "bob@example.com", groups: []string{"storage-oncall"}}
		alice = writer{user: "alice@example.com", groups: []string{"storage-team"}}
		root  = writer{user: "root@example.com", groups: []string{"system:masters"}}
		// dave and the incident bot are on call by name, not by group: the chart's
		// RoleBinding (subjects User and ServiceAccount) and the policy both say so.
		dave = writer{user: "dave@example.com", groups: []string{"storage-team"}}
		bot  = serviceAccount("ops", "incident-bot")
		// Another ServiceAccount of the same namespace, with every ConfigMap verb.
		otherBot = serviceAccount("ops", "other-bot")
		onCall   = "the on-call group storage-oncall and users dave@example.com, " + bot.user
	)
	// alice holds every ConfigMap verb in the namespace: only the policy stops her.
	require.NoError(t, admin.Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "all-configmaps"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"*"}}},
	}))
	require.NoError(t, admin.Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "all-configmaps"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "all-configmaps"},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: alice.user},
			{Kind: rbacv1.ServiceAccountKind, Namespace: "ops", Name: "other-bot"}},
	}))
	pause := func(by, paused, reason string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "remediator-pause"},
			Data: map[string]string{"paused": paused, "reason": reason, "by": by, "at": "2026-12-03T03:00:00Z"}}
	}
	// A policy takes a moment to become effective.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		err := alice.client(t, env.Config).Create(ctx, pause(alice.user, "true", "probe"))
		if err == nil {
			_ = admin.Delete(ctx, pause("", "", ""))
		}
		assert.Error(c, err)
	}, 30*time.Second, 100*time.Millisecond, "the policy in force")

	update := func(c client.Client, cm *corev1.ConfigMap) error {
		cur := &corev1.ConfigMap{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(cm), cur); err != nil {
			return err
		}
		cur.Data = cm.Data
		return c.Update(ctx, cur)
	}
	for _, tc := range []struct {
		name  string
		as    writer
		write func(c client.Client) error
		want  string // "" allowed, else the refusal
	}{
		{"alice pauses", alice, func(c client.Client) error { return c.Create(ctx, pause(alice.user, "true", "I think so")) },
			alice.user + " may not pause or resume Remediator"},
		{"bob pauses in someone else's name", bob, func(c client.Client) error { return c.Create(ctx, pause("carol@example.com", "true", "INC-1")) },
			"data.by must be your user name, " + bob.user},
		{"bob pauses without saying why", bob, func(c client.Client) error { return c.Create(ctx, pause(bob.user, "true", " ")) }, "a pause must say why"},
		{"bob pauses for good", bob, func(c client.Client) error {
			cm := pause(bob.user, "true", "INC-1: array firmware")
			cm.Immutable = ptr.To(true)
			return c.Create(ctx, cm)
		}, "the pause ConfigMap may not be immutable: an immutable pause could never be resumed"},
		{"bob pauses", bob, func(c client.Client) error { return c.Create(ctx, pause(bob.user, "true", "INC-1: array firmware")) }, ""},
		{"bob makes the pause immutable", bob, func(c client.Client) error {
			cur := &corev1.ConfigMap{}
			if err := c.Get(ctx, client.ObjectKeyFromObject(pause("", "", "")), cur); err != nil {
				return err
			}
			cur.Immutable = ptr.To(true)
			return c.Update(ctx, cur)
		}, "the pause ConfigMap may not be immutable"},
		// RBAC's create reaches every ConfigMap of the namespace; the policy does not.
		{"bob creates another ConfigMap", bob, func(c client.Client) error {
			return c.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "remediator-pause-notes"}, Data: map[string]string{"a": "b"}})
		}, bob.user + " may not create ConfigMap " + namespace + "/remediator-pause-notes: " + onCall + " (chart values pause.users, pause.groups, pause.serviceAccounts) may write only the pause ConfigMap " + namespace + "/remediator-pause here"},
		{"bob creates a ConfigMap the controller would take for its policies", bob, func(c client.Client) error {
			return c.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: release + "-policies"}})
		}, bob.user + " may not create ConfigMap " + namespace + "/" + release + "-policies"},
		{"alice, no on-call, creates another ConfigMap", alice, func(c client.Client) error {
			return c.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "alice-notes"}})
		}, ""},
		{"an admin creates another ConfigMap", root, func(c client.Client) error {
			return c.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "admin-notes"}})
		}, ""},
		{"alice resumes", alice, func(c client.Client) error { return update(c, pause(alice.user, "false", "")) }, alice.user + " may not pause or resume Remediator"},
		{"alice deletes the pause", alice, func(c client.Client) error { return c.Delete(ctx, pause("", "", "")) }, alice.user + " may not pause or resume Remediator"},
		{"bob resumes with a typo", bob, func(c client.Client) error { return update(c, pause(bob.user, "no", "")) }, `data.paused must be "true" or "false"`},
		{"bob resumes", bob, func(c client.Client) error { return update(c, pause(bob.user, "false", "firmware done")) }, ""},
		{"dave, on call by name, pauses", dave, func(c client.Client) error { return update(c, pause(dave.user, "true", "INC-5: array firmware")) }, ""},
		{"another ServiceAccount resumes", otherBot, func(c client.Client) error { return update(c, pause(otherBot.user, "false", "")) },
			otherBot.user + " may not pause or resume Remediator: only the on-call groups storage-oncall, system:masters and users dave@example.com, " + bot.user +
				" may write ConfigMap " + namespace + "/remediator-pause (chart values pause.users, pause.groups, pause.serviceAccounts)."},
		{"the incident bot resumes", bot, func(c client.Client) error { return update(c, pause(bot.user, "false", "INC-5 over")) }, ""},
		{"the incident bot creates another ConfigMap", bot, func(c client.Client) error {
			return c.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "bot-notes"}})
		}, bot.user + " may not create ConfigMap " + namespace + "/bot-notes: " + onCall},
		{"dave creates another ConfigMap", dave, func(c client.Client) error {
			return c.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "dave-notes"}})
		}, dave.user + " may not create ConfigMap " + namespace + "/dave-notes: " + onCall},
		{"an admin pauses", root, func(c client.Client) error { return update(c, pause(root.user, "true", "INC-2")) }, ""},
		{"bob writes another ConfigMap", bob, func(c client.Client) error {
			return update(c, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: release + "-settings"}, Data: map[string]string{"max-concurrent-remediations": "50"}})
		}, "forbidden"}, // RBAC: the group may write the pause ConfigMap only
	} {
		err := tc.write(tc.as.client(t, env.Config))
		if tc.want == "" {
			assert.NoError(t, err, "%s: want allowed", tc.name)
			continue
		}
		if assert.Error(t, err, "%s: want refused", tc.name) {
			assert.True(t, apierrors.IsForbidden(err) || apierrors.IsInvalid(err), "%s: want 403 or 422, got %v", tc.name, err)
			assert.Contains(t, err.Error(), tc.want, "%s", tc.name)
		}
	}
}
