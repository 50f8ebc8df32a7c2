package chart_test

// This file owns the Deployment's overridable parts: the pod and container
// securityContext, the PodDisruptionBudget, the controller's timeouts and limits,
// and extraArgs.

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// TestSecurityContext: the default is today's hardening; a platform that assigns
// the UID itself (OpenShift's restricted SCC) can drop the fixed runAsUser and
// runAsGroup with null and keep the rest.
func TestSecurityContext(t *testing.T) {
	t.Run("default", func(t *testing.T) {
		pod := deployment(t, render(t, nil)).Spec.Template.Spec
		assert.Equal(t, &corev1.PodSecurityContext{
			RunAsNonRoot:   ptr.To(true),
			RunAsUser:      ptr.To[int64](65532),
			RunAsGroup:     ptr.To[int64](65532),
			SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		}, pod.SecurityContext, "pod securityContext")
		assert.Equal(t, &corev1.SecurityContext{
			RunAsNonRoot:             ptr.To(true),
			RunAsUser:                ptr.To[int64](65532),
			RunAsGroup:               ptr.To[int64](65532),
			ReadOnlyRootFilesystem:   ptr.To(true),
			AllowPrivilegeEscalation: ptr.To(false),
			Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
			SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		}, pod.Containers[0].SecurityContext, "container securityContext")
	})
	t.Run("OpenShift: no fixed UID", func(t *testing.T) {
		pod := deployment(t, render(t, map[string]any{
			"podSecurityContext": map[string]any{"runAsUser": nil, "runAsGroup": nil},
			"securityContext":    map[string]any{"runAsUser": nil, "runAsGroup": nil},
		})).Spec.Template.Spec
		psc, sc := pod.SecurityContext, pod.Containers[0].SecurityContext
		require.NotNil(t, psc)
		require.NotNil(t, sc)
		assert.Nil(t, psc.RunAsUser, "pod runAsUser")
		assert.Nil(t, psc.RunAsGroup, "pod runAsGroup")
		assert.Nil(t, sc.RunAsUser, "container runAsUser")
		assert.Nil(t, sc.RunAsGroup, "container runAsGroup")
		// The rest of the hardening stays.
		assert.Equal(t, ptr.To(true), psc.RunAsNonRoot)
		assert.Equal(t, ptr.To(true), sc.RunAsNonRoot)
		assert.Equal(t, ptr.To(true), sc.ReadOnlyRootFilesystem)
		assert.Equal(t, ptr.To(false), sc.AllowPrivilegeEscalation)
		assert.Equal(t, []corev1.Capability{"ALL"}, sc.Capabilities.Drop)
	})
	t.Run("additions", func(t *testing.T) {
		pod := deployment(t, render(t, map[string]any{
			"podSecurityContext": map[string]any{"fsGroup": 2000},
		})).Spec.Template.Spec
		assert.Equal(t, ptr.To[int64](2000), pod.SecurityContext.FSGroup)
		assert.Equal(t, ptr.To[int64](65532), pod.SecurityContext.RunAsUser, "values merge over the default")
	})
}

// TestPodDisruptionBudget: with more than one replica a drain keeps one running (the
// standby takes over the Lease); a single replica gets none, which would block every
// drain of its node.
func TestPodDisruptionBudget(t *testing.T) {
	for _, tc := range []struct {
		replicas any
		want     bool
	}{{nil, true}, {2, true}, {3, true}, {1, false}, {0, false}} {
		t.Run(fmt.Sprint("replicas ", tc.replicas), func(t *testing.T) {
			var values map[string]any
			if tc.replicas != nil {
				values = map[string]any{"replicaCount": tc.replicas}
			}
			objs := render(t, values)
			o := find(objs, "PodDisruptionBudget", namespace, release)
			if !tc.want {
				assert.Nil(t, o, "a PodDisruptionBudget with %v replica(s) blocks every drain", tc.replicas)
				return
			}
			pdb := typed[policyv1.PodDisruptionBudget](t, o)
			assert.Equal(t, ptr.To(intstr.FromInt32(1)), pdb.Spec.MinAvailable, "minAvailable")
			assert.Nil(t, pdb.Spec.MaxUnavailable, "maxUnavailable")
			assert.Equal(t, deployment(t, objs).Spec.Selector, pdb.Spec.Selector, "the PDB selects the Deployment's pods")
		})
	}
}
