package pause

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/remediator/remediator/internal/cmd/cmdutil"
)

// settingsOf is a release's settings ConfigMap as the chart renders it: labelled, and
// publishing the pause ConfigMap in the release namespace.
func settingsOf(ns, fullname string) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fullname + "-settings", Labels: map[string]string{settingsLabel: "true"}},
		Data:       map[string]string{cmdutil.SettingPauseConfigMap: ns + "/remediator-pause", "trident-namespace": "trident"},
	}
}

func TestFindPauseConfigMap(t *testing.T) {
	unlabelled := settingsOf("decoy", "remediator")
	unlabelled.Labels = nil
	withoutKey := settingsOf("old-system", "remediator")
	delete(withoutKey.Data, cmdutil.SettingPauseConfigMap)
	for _, tc := range []struct {
		name    string
		objs    []runtime.Object
		flag    string
		ns      string // -n
		want    types.NamespacedName
		wantErr []string // each in the error
	}{{
		name: "one release, in its own namespace and name",
		objs: []runtime.Object{settingsOf("storage-system", "storage-remediator"), unlabelled},
		want: types.NamespacedName{Namespace: "storage-system", Name: "remediator-pause"},
	}, {
		name: "two releases in one namespace share its pause ConfigMap",
		objs: []runtime.Object{settingsOf("storage-system", "a-remediator"), settingsOf("storage-system", "b-remediator")},
		want: types.NamespacedName{Namespace: "storage-system", Name: "remediator-pause"},
	}, {
		name: "the flag wins",
		objs: []runtime.Object{settingsOf("storage-system", "remediator"), settingsOf("lab-system", "remediator")},
		flag: "lab-system/remediator-pause",
		want: types.NamespacedName{Namespace: "lab-system", Name: "remediator-pause"},
	}, {
		name:    "no release",
		objs:    []runtime.Object{unlabelled},
		wantErr: []string{"no release of the chart found: no ConfigMap labelled remediator.io/settings=true in any namespace names the pause ConfigMap", "give -n RELEASE_NAMESPACE, or --pause-configmap NAMESPACE/NAME"},
	}, {
		name: "a release of an older chart",
		objs: []runtime.Object{withoutKey},
		wantErr: []string{"no release of the chart found", `old-system/remediator-settings (key pause-configmap: "") do not`,
			"give -n RELEASE_NAMESPACE, or --pause-configmap NAMESPACE/NAME"},
	}, {
		name: "-n picks the release of its namespace among several",
		objs: []runtime.Object{settingsOf("team-b", "remediator"), settingsOf("team-a", "remediator")},
		ns:   "team-b",
		want: types.NamespacedName{Namespace: "team-b", Name: "remediator-pause"},
	}, {
		name:    "-n naming a namespace without a release",
		objs:    []runtime.Object{settingsOf("storage-system", "remediator")},
		ns:      "remediator-system",
		wantErr: []string{"no ConfigMap labelled remediator.io/settings=true in namespace remediator-system names the pause ConfigMap", "check -n"},
	}, {
		name: "several releases",
		objs: []runtime.Object{settingsOf("team-b", "remediator"), settingsOf("team-a", "remediator"), withoutKey},
		wantErr: []string{"2 releases of the chart found, each with its own pause ConfigMap: " +
			"team-a/remediator-pause (published by team-a/remediator-settings); team-b/remediator-pause (published by team-b/remediator-settings); " +
			"choose one with -n RELEASE_NAMESPACE or --pause-configmap NAMESPACE/NAME"},
	}, {
		name:    "a malformed flag",
		flag:    "remediator-pause",
		wantErr: []string{`--pause-configmap must be namespace/name, got "remediator-pause"`},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			got, _, err := findPauseConfigMap(context.Background(), &out, fake.NewClientset(tc.objs...), tc.flag, tc.ns)
			if tc.wantErr != nil {
				require.Error(t, err)
				for _, w := range tc.wantErr {
					assert.ErrorContains(t, err, w)
				}
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
			if tc.flag == "" {
				assert.Contains(t, out.String(), "The pause ConfigMap is "+tc.want.String()+" (published by ", "says which it found")
			}
		})
	}
}

// TestFindPauseConfigMapForbidden: whoever may not list ConfigMaps in every namespace
// is told so and given the flag, not sent to a default.
func TestFindPauseConfigMapForbidden(t *testing.T) {
	cs := fake.NewClientset(settingsOf("storage-system", "remediator"))
	cs.PrependReactor("list", "configmaps", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "configmaps"}, "", nil)
	})
	_, _, err := findPauseConfigMap(context.Background(), &bytes.Buffer{}, cs, "", "")
	require.Error(t, err)
	assert.ErrorContains(t, err, "you may not list ConfigMaps in any namespace, where the chart's settings ConfigMap (label remediator.io/settings) says which it is")
	assert.ErrorContains(t, err, "give -n RELEASE_NAMESPACE, or --pause-configmap NAMESPACE/NAME")
}

// TestPauseWritesTheReleasesConfigMap: pause and resume, without the flag, write the
// pause ConfigMap of the release installed, in its namespace, not a default's.
func TestPauseWritesTheReleasesConfigMap(t *testing.T) {
	cs := fake.NewClientset(settingsOf("storage-system", "storage-remediator"))
	cs.PrependReactor("create", "selfsubjectreviews", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, &authenticationv1.SelfSubjectReview{Status: authenticationv1.SelfSubjectReviewStatus{
			UserInfo: authenticationv1.UserInfo{Username: "bob@example.com"}}}, nil
	})
	ctx := context.Background()
	now := func() time.Time { return time.Date(2026, 12, 3, 3, 0, 0, 0, time.UTC) }
	var out bytes.Buffer
	require.NoError(t, writePause(ctx, &out, cs, Options{reason: "INC-1: array firmware", now: now}, true))
	assert.Contains(t, out.String(), "The pause ConfigMap is storage-system/remediator-pause (published by storage-system/storage-remediator-settings).")
	assert.Contains(t, out.String(), "Paused by bob@example.com: INC-1: array firmware")
	cm, err := cs.CoreV1().ConfigMaps("storage-system").Get(ctx, "remediator-pause", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"paused": "true", "reason": "INC-1: array firmware", "by": "bob@example.com", "at": "2026-12-03T03:00:00Z"}, cm.Data)
	_, err = cs.CoreV1().ConfigMaps("remediator-system").Get(ctx, "remediator-pause", metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err), "a pause written at the default no controller of this release watches: %v", err)

	out.Reset()
	require.NoError(t, writePause(ctx, &out, cs, Options{reason: "firmware done", now: now}, false))
	assert.Contains(t, out.String(), "Resumed by bob@example.com.")
	cm, err = cs.CoreV1().ConfigMaps("storage-system").Get(ctx, "remediator-pause", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, "false", cm.Data["paused"])
}

// TestPauseNamespaceFlag: pause and resume take kubectl's -n/--namespace, as plan and
// scan do, as the release namespace; it must agree with --pause-configmap.
func TestPauseNamespaceFlag(t *testing.T) {
	for _, tc := range []struct {
		name    string
		args    []string
		want    string
		wantErr string
	}{
		{name: "short", args: []string{"-n", "storage-system"}, want: "storage-system"},
		{name: "long", args: []string{"--namespace=storage-system"}, want: "storage-system"},
		{name: "none: every namespace", args: nil, want: ""},
		{name: "agrees with --pause-configmap", args: []string{"-n", "storage-system", "--pause-configmap", "storage-system/remediator-pause"}, want: "storage-system"},
		{name: "disagrees with --pause-configmap", args: []string{"-n", "storage-system", "--pause-configmap", "remediator-system/remediator-pause"},
			wantErr: `--namespace "storage-system" and --pause-configmap "remediator-system/remediator-pause" disagree`},
	} {
		for _, c := range []struct {
			name  string
			pause bool
		}{{"pause", true}, {"resume", false}} {
			t.Run(c.name+"/"+tc.name, func(t *testing.T) {
				o := NewOptions(c.pause)
				cmd := newCommand(o, c.name, "", "")
				require.NoError(t, cmd.Flags().Parse(tc.args))
				require.Equal(t, "n", cmd.Flags().Lookup("namespace").Shorthand)
				o.reason = "INC-1: array firmware"
				o.Complete()
				err := o.Validate()
				if tc.wantErr != "" {
					assert.ErrorContains(t, err, tc.wantErr)
					return
				}
				require.NoError(t, err)
				assert.Equal(t, tc.want, o.namespace)
			})
		}
	}
}

// TestPauseForbidden: a pause or resume the API server refuses says which chart
// values allow whom, and the helm and kubectl commands that grant the right, with the
// release, its namespace and the caller filled in: a cluster-admin through a
// ClusterRoleBinding has the RBAC but not the admission policy's leave.
func TestPauseForbidden(t *testing.T) {
	admission := `configmaps "remediator-pause" is forbidden: ValidatingAdmissionPolicy 'storage-remediator-pause' with binding 'storage-remediator-pause' denied request: only the on-call may write it`
	for _, tc := range []struct {
		name  string
		who   string
		pause bool
		// exists: the pause ConfigMap is there (an update), else a create.
		exists  bool
		refusal error
		want    []string
	}{{
		name: "a cluster-admin refused by the admission policy", who: "alice@example.com", pause: true,
		refusal: apierrors.NewForbidden(schema.GroupResource{Resource: "configmaps"}, "remediator-pause", errors.New(admission)),
		want: []string{
			"alice@example.com may not pause Remediator: the chart's admission policy refused writing the pause ConfigMap storage-system/remediator-pause: ",
			"ValidatingAdmissionPolicy 'storage-remediator-pause'",
			"pause.groups, pause.users and pause.serviceAccounts",
			"cluster-admin through a ClusterRoleBinding is not enough",
			"helm upgrade storage <chart> -n storage-system --reuse-values --set 'pause.users={alice@example.com}'",
			"--set 'pause.groups={remediator:on-call,GROUP}'",
			"kubectl create rolebinding storage-remediator-pause-alice-example.com -n storage-system --role=storage-remediator-pause --user=alice@example.com",
		},
	}, {
		name: "a user without RBAC resumes", who: "bob", exists: true,
		refusal: apierrors.NewForbidden(schema.GroupResource{Resource: "configmaps"}, "remediator-pause", errors.New(`User "bob" cannot update resource "configmaps"`)),
		want: []string{
			"bob may not resume Remediator: RBAC refused writing the pause ConfigMap storage-system/remediator-pause: ",
			"helm upgrade storage <chart> -n storage-system --reuse-values --set 'pause.users={bob}'",
			"kubectl create rolebinding storage-remediator-pause-bob -n storage-system --role=storage-remediator-pause --user=bob",
		},
	}, {
		name: "a ServiceAccount", who: "system:serviceaccount:ops:incident-bot", pause: true,
		refusal: apierrors.NewForbidden(schema.GroupResource{Resource: "configmaps"}, "remediator-pause", errors.New(admission)),
		want: []string{
			"system:serviceaccount:ops:incident-bot may not pause Remediator",
			"--set 'pause.serviceAccounts[0].namespace=ops,pause.serviceAccounts[0].name=incident-bot'",
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			settings := settingsOf("storage-system", "storage-remediator")
			settings.Labels["app.kubernetes.io/instance"] = "storage"
			objs := []runtime.Object{settings}
			if tc.exists {
				objs = append(objs, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "storage-system", Name: "remediator-pause"}})
			}
			cs := fake.NewClientset(objs...)
			cs.PrependReactor("create", "selfsubjectreviews", func(k8stesting.Action) (bool, runtime.Object, error) {
				return true, &authenticationv1.SelfSubjectReview{Status: authenticationv1.SelfSubjectReviewStatus{
					UserInfo: authenticationv1.UserInfo{Username: tc.who}}}, nil
			})
			for _, verb := range []string{"create", "update"} {
				cs.PrependReactor(verb, "configmaps", func(k8stesting.Action) (bool, runtime.Object, error) { return true, nil, tc.refusal })
			}
			err := writePause(context.Background(), &bytes.Buffer{}, cs, Options{reason: "INC-1: array firmware", now: time.Now}, tc.pause)
			require.Error(t, err)
			t.Logf("%v", err)
			assert.True(t, apierrors.IsForbidden(err), "the API server's error is wrapped: %v", err)
			for _, w := range tc.want {
				assert.ErrorContains(t, err, w)
			}
		})
	}
}
