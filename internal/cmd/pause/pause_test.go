package pause

import (
	"bytes"
	"context"
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
		wantErr: []string{"no release of the chart found: no ConfigMap labelled remediator.io/settings=true in any namespace names the pause ConfigMap", "give --pause-configmap NAMESPACE/NAME"},
	}, {
		name: "a release of an older chart",
		objs: []runtime.Object{withoutKey},
		wantErr: []string{"no release of the chart found", `old-system/remediator-settings (key pause-configmap: "") do not`,
			"give --pause-configmap NAMESPACE/NAME"},
	}, {
		name: "several releases",
		objs: []runtime.Object{settingsOf("team-b", "remediator"), settingsOf("team-a", "remediator"), withoutKey},
		wantErr: []string{"2 releases of the chart found, each with its own pause ConfigMap: " +
			"team-a/remediator-pause (published by team-a/remediator-settings); team-b/remediator-pause (published by team-b/remediator-settings); " +
			"choose one with --pause-configmap NAMESPACE/NAME"},
	}, {
		name:    "a malformed flag",
		flag:    "remediator-pause",
		wantErr: []string{`--pause-configmap must be namespace/name, got "remediator-pause"`},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			got, err := findPauseConfigMap(context.Background(), &out, fake.NewClientset(tc.objs...), tc.flag)
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
	_, err := findPauseConfigMap(context.Background(), &bytes.Buffer{}, cs, "")
	require.Error(t, err)
	assert.ErrorContains(t, err, "you may not list ConfigMaps in all namespaces, where the chart's settings ConfigMap (label remediator.io/settings) says which it is")
	assert.ErrorContains(t, err, "give --pause-configmap NAMESPACE/NAME")
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
