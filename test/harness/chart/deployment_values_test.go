package chart_test

// This file owns the Deployment's overridable parts: the pod and container
// securityContext, the PodDisruptionBudget, the controller's timeouts and limits,
// extraArgs and extraEnv.

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/remediator/remediator/controllers/detection"
	"github.com/remediator/remediator/controllers/facts"
	"github.com/remediator/remediator/controllers/verification"
	"github.com/remediator/remediator/remediations"
	"github.com/remediator/remediator/test/harness/helmchart"
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

// flagDefaults reads the defaults of the controller's flags from the flag
// registrations in internal/cmd/controller and the cluster flags it shares in
// internal/cmd/cmdutil (f.DurationVar(&o.x, "name", default, usage) and the like).
// This module does not import the main module's internal packages (nor could it:
// they are internal), so the source is parsed; a default
// that is a name (remediations.DefaultTimeouts.Eviction) is looked up in known,
// which holds the Go values behind those names. Every default comes back as a
// string: durations in time.Duration's form, numbers as Go prints them.
func flagDefaults(t *testing.T, known map[string]string) map[string]string {
	t.Helper()
	var paths []string
	for _, dir := range []string{filepath.Join("..", "..", "internal", "cmd", "controller"), filepath.Join("..", "..", "internal", "cmd", "cmdutil")} {
		entries, err := os.ReadDir(dir)
		require.NoError(t, err)
		for _, e := range entries {
			if strings.HasSuffix(e.Name(), ".go") && !strings.HasSuffix(e.Name(), "_test.go") {
				paths = append(paths, filepath.Join(dir, e.Name()))
			}
		}
	}
	fset := token.NewFileSet()
	out := map[string]string{}
	units := map[string]time.Duration{"Nanosecond": time.Nanosecond, "Microsecond": time.Microsecond,
		"Millisecond": time.Millisecond, "Second": time.Second, "Minute": time.Minute, "Hour": time.Hour}
	for _, path := range paths {
		src, err := os.ReadFile(path)
		require.NoError(t, err)
		f, err := parser.ParseFile(fset, path, src, 0)
		require.NoError(t, err)
		text := func(n ast.Node) string {
			return string(src[fset.Position(n.Pos()).Offset:fset.Position(n.End()).Offset])
		}
		eval := func(x ast.Expr) (string, bool) {
			switch x := x.(type) {
			case *ast.BasicLit:
				if x.Kind == token.STRING {
					s, err := strconv.Unquote(x.Value)
					return s, err == nil
				}
				return x.Value, true
			case *ast.BinaryExpr: // N * time.Unit
				n, ok := x.X.(*ast.BasicLit)
				sel, ok2 := x.Y.(*ast.SelectorExpr)
				if !ok || !ok2 || x.Op != token.MUL || text(sel.X) != "time" {
					return "", false
				}
				i, err := strconv.ParseInt(n.Value, 10, 64)
				return (time.Duration(i) * units[sel.Sel.Name]).String(), err == nil && units[sel.Sel.Name] != 0
			default:
				v, ok := known[text(x)]
				return v, ok
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok || len(call.Args) < 3 {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok || !strings.HasSuffix(sel.Sel.Name, "Var") {
				return true
			}
			name, ok := call.Args[1].(*ast.BasicLit)
			if !ok || name.Kind != token.STRING {
				return true
			}
			flag, _ := strconv.Unquote(name.Value)
			if v, ok := eval(call.Args[2]); ok {
				out[flag] = v
			} else {
				out[flag] = "<cannot evaluate " + text(call.Args[2]) + ">"
			}
			return true
		})
	}
	return out
}

// normal puts a flag value into the form flagDefaults returns, so that "10m" and
// "10m0s" compare equal.
func normal(v string) string {
	if d, err := time.ParseDuration(v); err == nil {
		return d.String()
	}
	if f, err := strconv.ParseFloat(v, 64); err == nil {
		return strconv.FormatFloat(f, 'g', -1, 64)
	}
	return v
}

// TestDefaultsAreTheFlagDefaults keeps one source of truth: the chart's default for
// each of the controller's flags is the binary's own default, read from the flag
// registrations in internal/cmd (controller, cmdutil), so a change of a flag default fails here until
// values.yaml follows. There is no exception.
func TestDefaultsAreTheFlagDefaults(t *testing.T) {
	defaults := flagDefaults(t, map[string]string{
		"remediations.DefaultTimeouts.Eviction":            remediations.DefaultTimeouts.Eviction.String(),
		"remediations.DefaultTimeouts.PodTermination":      remediations.DefaultTimeouts.PodTermination.String(),
		"remediations.DefaultTimeouts.PluginRestart":       remediations.DefaultTimeouts.PluginRestart.String(),
		"facts.DefaultNodeLeaseGracePeriod":                facts.DefaultNodeLeaseGracePeriod.String(),
		"facts.DefaultTridentNamespace":                    facts.DefaultTridentNamespace,
		"facts.DefaultDriverName":                          facts.DefaultDriverName,
		"facts.DefaultNodePluginSelector":                  facts.DefaultNodePluginSelector,
		"remediations.DefaultFloor.UnreachableMinLeaseAge": remediations.DefaultFloor.UnreachableMinLeaseAge.String(),
		"remediations.DefaultFloor.HealthyStuckLeaseAge":   remediations.DefaultFloor.HealthyStuckLeaseAge.String(),
		"detection.DefaultInterval":                        detection.DefaultInterval.String(),
		"verification.DefaultVerifyFixFor":                 verification.DefaultVerifyFixFor.String(),
	})
	// --policy-reload-interval is passed only with policies.
	args := map[string]string{}
	for _, a := range controllerArgs(t, render(t, map[string]any{"policies": map[string]any{"p.cue": "package policies\n"}})) {
		if k, v, ok := strings.Cut(a, "="); ok {
			args[strings.TrimPrefix(k, "--")] = v
		}
	}
	for _, flag := range []string{
		"eviction-timeout", "pod-termination-timeout", "plugin-restart-timeout", "verify-fix-for",
		"node-lease-grace-period", "policy-reload-interval",
		"max-concurrent-remediations", "max-concurrent-reconciles",
		"kube-api-qps", "kube-api-burst",
		"trident-namespace", "driver-name", "node-plugin-selector",
		"floor-unreachable-lease-age", "floor-healthy-lease-age", "detect-interval",
	} {
		want, ok := defaults[flag]
		if !assert.True(t, ok, "internal/cmd/controller registers no --%s", flag) {
			continue
		}
		got, ok := args[flag]
		if !assert.True(t, ok, "the chart does not pass --%s", flag) {
			continue
		}
		assert.Equal(t, normal(want), normal(got), "--%s: values.yaml's default differs from the binary's", flag)
	}
}

// TestControllerFlagValues: each typed value reaches its flag, and extraArgs come
// last, so that a flag repeated there overrides the chart's (the last one wins).
func TestControllerFlagValues(t *testing.T) {
	args := deployment(t, render(t, map[string]any{
		"evictionTimeout":         "20m",
		"podTerminationTimeout":   "15m",
		"pluginRestartTimeout":    "90s",
		"verifyFixFor":            "1h",
		"maxConcurrentReconciles": 4,
		"kubeAPI":                 map[string]any{"qps": 12.5, "burst": 25},
		"extraArgs":               []any{"--pprof-bind-address=:6060", "--eviction-timeout=30m"},
	})).Spec.Template.Spec.Containers[0].Args
	for _, w := range []string{
		"--eviction-timeout=20m", "--pod-termination-timeout=15m", "--plugin-restart-timeout=90s", "--verify-fix-for=1h",
		"--max-concurrent-reconciles=4", "--kube-api-qps=12.5", "--kube-api-burst=25",
	} {
		assert.Contains(t, args, w)
	}
	require.GreaterOrEqual(t, len(args), 2)
	assert.Equal(t, []string{"--pprof-bind-address=:6060", "--eviction-timeout=30m"}, args[len(args)-2:], "extraArgs come last")
}

// TestExtraEnv: extraEnv reaches the controller container after the chart's own
// variables and sync.extraEnv the sync agent's, each only its own; by default
// there is none. A cluster whose pods cannot reach the API server through the
// kubernetes Service (no kube-proxy, as on the local cluster's real nodes) points
// the in-cluster client at the API server this way.
func TestExtraEnv(t *testing.T) {
	names := func(env []corev1.EnvVar) []string {
		var out []string
		for _, e := range env {
			out = append(out, e.Name)
		}
		return out
	}
	containers := func(values map[string]any) (controller, sync corev1.Container) {
		objs := render(t, values)
		return deployment(t, objs).Spec.Template.Spec.Containers[0],
			typed[appsv1.Deployment](t, find(objs, "Deployment", namespace, release+"-sync")).Spec.Template.Spec.Containers[0]
	}
	own := []string{"POD_NAMESPACE", "POD_NAME", "POD_UID", // and the settings, from the settings ConfigMap
		"SETTING_ALLOWED_TRIDENT_NAMESPACES", "SETTING_DRIVER_NAME", "SETTING_FLOOR_HEALTHY_LEASE_AGE", "SETTING_FLOOR_UNREACHABLE_LEASE_AGE",
		"SETTING_MAX_CONCURRENT_REMEDIATIONS", "SETTING_NODE_LEASE_GRACE_PERIOD", "SETTING_NODE_PLUGIN_SELECTOR", "SETTING_PAUSE_CONFIGMAP",
		"SETTING_TRIDENT_NAMESPACE"}
	controller, sync := containers(syncValues())
	assert.Equal(t, own, names(controller.Env), "the controller's default env")
	assert.Empty(t, sync.Env, "the sync agent's default env")

	values := syncValues()
	values["extraEnv"] = []any{
		map[string]any{"name": "KUBERNETES_SERVICE_HOST", "value": "192.0.2.2"},
		map[string]any{"name": "KUBERNETES_SERVICE_PORT", "value": "6443"},
	}
	values["sync"].(map[string]any)["extraEnv"] = []any{
		map[string]any{"name": "HTTPS_PROXY", "value": "http://proxy.example.com:3128"},
		map[string]any{"name": "GOMEMLIMIT", "valueFrom": map[string]any{"resourceFieldRef": map[string]any{"resource": "limits.memory"}}},
	}
	controller, sync = containers(values)
	assert.Equal(t, append(slices.Clone(own), "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT"), names(controller.Env),
		"extraEnv comes after the chart's own")
	assert.Equal(t, corev1.EnvVar{Name: "KUBERNETES_SERVICE_PORT", Value: "6443"}, controller.Env[len(own)+1])
	assert.Equal(t, []corev1.EnvVar{
		{Name: "HTTPS_PROXY", Value: "http://proxy.example.com:3128"},
		{Name: "GOMEMLIMIT", ValueFrom: &corev1.EnvVarSource{ResourceFieldRef: &corev1.ResourceFieldSelector{Resource: "limits.memory"}}},
	}, sync.Env, "sync.extraEnv")

	// Kubernetes takes env values as strings only; the schema says so before the API
	// server would.
	_, err := helmchart.Render(release, namespace, map[string]any{"extraEnv": []any{map[string]any{"name": "KUBERNETES_SERVICE_PORT", "value": 6443}}})
	assert.ErrorContains(t, err, "extraEnv", "a number as an env value")
	_, err = helmchart.Render(release, namespace, map[string]any{"extraEnv": []any{map[string]any{"value": "x"}}})
	assert.ErrorContains(t, err, "extraEnv", "an env variable without a name")
}
