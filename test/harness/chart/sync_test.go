package chart_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"

	"github.com/remediator/remediator/test/harness/helmchart"
)

func syncValues() map[string]any {
	return map[string]any{
		"requestNamespaces": []any{"remediator", "remediator-staging"},
		"sync":              map[string]any{"enabled": true, "repo": "https://git.example.com/platform/remediation.git", "interval": "30s"},
	}
}

// TestSyncIsOffByDefault: the default install runs no sync agent.
func TestSyncIsOffByDefault(t *testing.T) {
	for _, o := range render(t, nil) {
		assert.NotContains(t, o.GetName(), "-sync", "%s rendered without sync.enabled", ref(o))
	}
}

// TestSyncRunsAsItsOwnLeastPrivilegeServiceAccount: the sync agent may read and write
// RemediationRequests in the request namespaces, and nothing else.
func TestSyncRunsAsItsOwnLeastPrivilegeServiceAccount(t *testing.T) {
	objs := render(t, syncValues())
	const sa = release + "-sync"
	require.NotNil(t, find(objs, "ServiceAccount", namespace, sa))
	for _, ns := range []string{"remediator", "remediator-staging"} {
		role := find(objs, "Role", ns, sa)
		require.NotNil(t, role, "the sync Role in %s", ns)
		assert.Equal(t, []rbacv1.PolicyRule{{APIGroups: []string{"remediator.io"}, Resources: []string{"remediationrequests"},
			Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}}}, typed[rbacv1.Role](t, role).Rules)
		rb := find(objs, "RoleBinding", ns, sa)
		require.NotNil(t, rb, "the sync RoleBinding in %s", ns)
		binding := typed[rbacv1.RoleBinding](t, rb)
		assert.Equal(t, rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: sa}, binding.RoleRef)
		assert.Equal(t, []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa, Namespace: namespace}}, binding.Subjects)
	}
	for _, o := range objs {
		if strings.HasSuffix(o.GetName(), "-sync") {
			assert.NotContains(t, []string{"ClusterRole", "ClusterRoleBinding"}, o.GetKind(), "the sync agent has no cluster-wide rights: %s", ref(o))
		}
	}

	d := typed[appsv1.Deployment](t, find(objs, "Deployment", namespace, sa))
	assert.Equal(t, int32(1), *d.Spec.Replicas)
	assert.Equal(t, appsv1.RecreateDeploymentStrategyType, d.Spec.Strategy.Type, "never two sync pods at once")
	pod := d.Spec.Template.Spec
	assert.Equal(t, sa, pod.ServiceAccountName)
	require.Len(t, pod.Containers, 1)
	assert.Equal(t, []string{"/remediator"}, pod.Containers[0].Command, "the image's CLI, not its default command (the controller)")
	assert.Equal(t, []string{"sync", "--repo=https://git.example.com/platform/remediation.git", "--revision=HEAD", "--path=requests",
		"--namespaces=remediator,remediator-staging", "--prune=true", "--interval=30s", "--timeout=5m", "--work-dir=/work",
		"--metrics-bind-address=:8080", "--health-probe-bind-address=:8081", "--v=0", "--logging-format=text"},
		pod.Containers[0].Args)
	assert.Equal(t, deployment(t, objs).Spec.Template.Spec.Containers[0].SecurityContext, pod.Containers[0].SecurityContext,
		"the controller's hardening")
	mounts := map[string]string{}
	for _, m := range pod.Containers[0].VolumeMounts {
		mounts[m.Name] = m.MountPath
	}
	assert.Equal(t, map[string]string{"work": "/work", "tmp": "/tmp"}, mounts)
}

// TestSyncPodIsNotTheController: the controller's Deployment, Service and
// PodDisruptionBudget do not select the sync pod.
func TestSyncPodIsNotTheController(t *testing.T) {
	values := syncValues()
	values["replicaCount"] = 2
	objs := render(t, values)
	syncPod := labels.Set(typed[appsv1.Deployment](t, find(objs, "Deployment", namespace, release+"-sync")).Spec.Template.Labels)
	controller := deployment(t, objs)
	sel := labels.SelectorFromSet(controller.Spec.Selector.MatchLabels)
	assert.False(t, sel.Matches(syncPod), "the controller's Deployment selects the sync pod")
	for _, o := range objs {
		switch o.GetKind() {
		case "Service":
			if o.GetName() == release+"-sync-metrics" {
				continue // the sync agent's own
			}
			svc := typed[corev1.Service](t, o)
			assert.False(t, labels.SelectorFromSet(svc.Spec.Selector).Matches(syncPod), "%s selects the sync pod", ref(o))
		case "PodDisruptionBudget":
			pdb := typed[policyv1.PodDisruptionBudget](t, o)
			assert.False(t, labels.SelectorFromSet(pdb.Spec.Selector.MatchLabels).Matches(syncPod), "%s selects the sync pod", ref(o))
		}
	}
}

// TestSyncPodPlacement: nodeSelector, tolerations and priorityClassName place the
// sync agent's pod with the controller's (on nodes that can reach the API server and
// the repository) unless the sync section sets its own; the controller's default pod
// anti-affinity stays its own.
func TestSyncPodPlacement(t *testing.T) {
	values := syncValues()
	values["nodeSelector"] = map[string]any{"node-role.example.com/infra": "true"}
	values["tolerations"] = []any{map[string]any{"key": "infra", "operator": "Exists", "effect": "NoSchedule"}}
	objs := render(t, values)
	sync := typed[appsv1.Deployment](t, find(objs, "Deployment", namespace, release+"-sync")).Spec.Template.Spec
	controller := deployment(t, objs).Spec.Template.Spec
	assert.Equal(t, map[string]string{"node-role.example.com/infra": "true"}, sync.NodeSelector)
	assert.Equal(t, controller.NodeSelector, sync.NodeSelector, "the controller's nodeSelector")
	assert.Equal(t, []corev1.Toleration{{Key: "infra", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}, sync.Tolerations)
	assert.Equal(t, controller.Tolerations, sync.Tolerations, "the controller's tolerations")
	assert.Nil(t, sync.Affinity, "the controller's anti-affinity on the sync pod")

	sync = typed[appsv1.Deployment](t, find(render(t, syncValues()), "Deployment", namespace, release+"-sync")).Spec.Template.Spec
	assert.Empty(t, sync.NodeSelector, "default nodeSelector")
	assert.Empty(t, sync.Tolerations, "default tolerations")
	assert.Nil(t, sync.Affinity, "default affinity")
	assert.Empty(t, sync.PriorityClassName, "default priorityClassName")

	t.Run("the controller's priorityClassName", func(t *testing.T) {
		values := syncValues()
		values["priorityClassName"] = "system-cluster-critical"
		sync := typed[appsv1.Deployment](t, find(render(t, values), "Deployment", namespace, release+"-sync")).Spec.Template.Spec
		assert.Equal(t, "system-cluster-critical", sync.PriorityClassName)
	})
	t.Run("the sync section's own", func(t *testing.T) {
		values := syncValues()
		values["nodeSelector"] = map[string]any{"node-role.example.com/infra": "true"}
		values["tolerations"] = []any{map[string]any{"key": "infra", "operator": "Exists", "effect": "NoSchedule"}}
		values["priorityClassName"] = "system-cluster-critical"
		affinity := map[string]any{"nodeAffinity": map[string]any{"requiredDuringSchedulingIgnoredDuringExecution": map[string]any{
			"nodeSelectorTerms": []any{map[string]any{"matchExpressions": []any{map[string]any{
				"key": "topology.kubernetes.io/zone", "operator": "In", "values": []any{"zone-a"},
			}}}},
		}}}
		values["sync"].(map[string]any)["nodeSelector"] = map[string]any{"node-role.example.com/gitops": "true"}
		values["sync"].(map[string]any)["tolerations"] = []any{map[string]any{"key": "gitops", "operator": "Equal", "value": "yes", "effect": "NoExecute"}}
		values["sync"].(map[string]any)["affinity"] = affinity
		values["sync"].(map[string]any)["priorityClassName"] = "remediator-sync"
		objs := render(t, values)
		sync := typed[appsv1.Deployment](t, find(objs, "Deployment", namespace, release+"-sync")).Spec.Template.Spec
		assert.Equal(t, map[string]string{"node-role.example.com/gitops": "true"}, sync.NodeSelector)
		assert.Equal(t, []corev1.Toleration{{Key: "gitops", Operator: corev1.TolerationOpEqual, Value: "yes", Effect: corev1.TaintEffectNoExecute}}, sync.Tolerations)
		assert.Equal(t, "remediator-sync", sync.PriorityClassName)
		if assert.NotNil(t, sync.Affinity) && assert.NotNil(t, sync.Affinity.NodeAffinity) {
			terms := sync.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
			assert.Equal(t, []corev1.NodeSelectorRequirement{{Key: "topology.kubernetes.io/zone", Operator: corev1.NodeSelectorOpIn, Values: []string{"zone-a"}}},
				terms[0].MatchExpressions)
		}
		assert.Nil(t, sync.Affinity.PodAntiAffinity, "not the controller's anti-affinity")
		controller := deployment(t, objs).Spec.Template.Spec
		assert.Equal(t, map[string]string{"node-role.example.com/infra": "true"}, controller.NodeSelector, "the controller keeps its own")
		assert.Equal(t, "system-cluster-critical", controller.PriorityClassName, "the controller keeps its own")
		assert.Nil(t, controller.Affinity.NodeAffinity, "the controller keeps its own")
	})
}

// TestSyncProbesAndMetrics: the sync agent serves its metrics and probes; the kubelet
// probes it, a Service exposes the metrics, and with metrics.serviceMonitor a
// ServiceMonitor scrapes them.
func TestSyncProbesAndMetrics(t *testing.T) {
	objs := render(t, syncValues())
	const name = release + "-sync"
	d := typed[appsv1.Deployment](t, find(objs, "Deployment", namespace, name))
	c := d.Spec.Template.Spec.Containers[0]
	assert.Equal(t, []corev1.ContainerPort{
		{Name: "http-metrics", ContainerPort: 8080, Protocol: corev1.ProtocolTCP},
		{Name: "health", ContainerPort: 8081, Protocol: corev1.ProtocolTCP},
	}, c.Ports)
	assert.Subset(t, c.Args, []string{"--metrics-bind-address=:8080", "--health-probe-bind-address=:8081"})
	if assert.NotNil(t, c.LivenessProbe) && assert.NotNil(t, c.LivenessProbe.HTTPGet) {
		assert.Equal(t, "/healthz", c.LivenessProbe.HTTPGet.Path)
		assert.Equal(t, "health", c.LivenessProbe.HTTPGet.Port.String())
	}
	if assert.NotNil(t, c.ReadinessProbe) && assert.NotNil(t, c.ReadinessProbe.HTTPGet) {
		assert.Equal(t, "/readyz", c.ReadinessProbe.HTTPGet.Path)
		assert.Equal(t, "health", c.ReadinessProbe.HTTPGet.Port.String())
	}

	svc := typed[corev1.Service](t, find(objs, "Service", namespace, name+"-metrics"))
	assert.Equal(t, d.Spec.Selector.MatchLabels, svc.Spec.Selector, "the sync pod")
	if assert.Len(t, svc.Spec.Ports, 1) {
		assert.Equal(t, "http-metrics", svc.Spec.Ports[0].Name)
		assert.Equal(t, int32(8080), svc.Spec.Ports[0].Port)
		assert.Equal(t, "http-metrics", svc.Spec.Ports[0].TargetPort.String())
	}
	assert.Nil(t, find(objs, "ServiceMonitor", namespace, name), "no ServiceMonitor without metrics.serviceMonitor.enabled")

	t.Run("ServiceMonitor", func(t *testing.T) {
		values := syncValues()
		values["metrics"] = map[string]any{"serviceMonitor": map[string]any{"enabled": true, "interval": "15s", "labels": map[string]any{"release": "kube-prometheus"}}}
		objs := render(t, values)
		o := find(objs, "ServiceMonitor", namespace, name)
		require.NotNil(t, o, "no ServiceMonitor %s in %q", name, refs(objs))
		sm := decodeServiceMonitor(t, o)
		assert.Equal(t, "kube-prometheus", o.GetLabels()["release"])
		svc := find(objs, "Service", namespace, name+"-metrics")
		require.NotNil(t, svc)
		sel := labels.SelectorFromSet(sm.Spec.Selector.MatchLabels)
		assert.True(t, sel.Matches(labels.Set(svc.GetLabels())), "the sync agent's ServiceMonitor selects its Service")
		controllerSvc := find(objs, "Service", namespace, release+"-metrics")
		assert.False(t, sel.Matches(labels.Set(controllerSvc.GetLabels())), "and not the controller's")
		controllerSM := decodeServiceMonitor(t, find(objs, "ServiceMonitor", namespace, release))
		assert.False(t, labels.SelectorFromSet(controllerSM.Spec.Selector.MatchLabels).Matches(labels.Set(svc.GetLabels())),
			"the controller's ServiceMonitor does not select the sync agent's Service")
		if assert.Len(t, sm.Spec.Endpoints, 1) {
			e := sm.Spec.Endpoints[0]
			assert.Equal(t, "http-metrics", e.Port)
			assert.Equal(t, "/metrics", e.Path)
			assert.Equal(t, "15s", e.Interval)
			assert.Empty(t, e.Scheme, "plain HTTP")
			assert.Nil(t, e.TLSConfig)
		}
		assert.Equal(t, []string{namespace}, sm.Spec.NamespaceSelector.MatchNames)
	})
	t.Run("other ports", func(t *testing.T) {
		values := syncValues()
		values["sync"].(map[string]any)["metrics"] = map[string]any{"port": 9090}
		values["sync"].(map[string]any)["healthPort"] = 9091
		objs := render(t, values)
		c := typed[appsv1.Deployment](t, find(objs, "Deployment", namespace, name)).Spec.Template.Spec.Containers[0]
		assert.Subset(t, c.Args, []string{"--metrics-bind-address=:9090", "--health-probe-bind-address=:9091"})
		assert.Equal(t, int32(9090), typed[corev1.Service](t, find(objs, "Service", namespace, name+"-metrics")).Spec.Ports[0].Port)
	})
	t.Run("metrics off", func(t *testing.T) {
		values := syncValues()
		values["sync"].(map[string]any)["metrics"] = map[string]any{"enabled": false}
		values["metrics"] = map[string]any{"serviceMonitor": map[string]any{"enabled": true}}
		objs := render(t, values)
		c := typed[appsv1.Deployment](t, find(objs, "Deployment", namespace, name)).Spec.Template.Spec.Containers[0]
		assert.NotContains(t, strings.Join(c.Args, " "), "--metrics-bind-address")
		assert.Contains(t, c.Args, "--health-probe-bind-address=:8081", "the probes stay")
		assert.Nil(t, find(objs, "Service", namespace, name+"-metrics"))
		assert.Nil(t, find(objs, "ServiceMonitor", namespace, name))
		assert.NotNil(t, c.LivenessProbe)
	})
}

func TestSyncNeedsARepoAndNamespaces(t *testing.T) {
	_, err := helmchart.Render(release, namespace, map[string]any{"sync": map[string]any{"enabled": true}})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "sync.enabled needs sync.repo")

	values := syncValues()
	values["watchAllNamespaces"] = true
	values["requestNamespaces"] = []any{}
	_, err = helmchart.Render(release, namespace, values)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "sync may only write requests into namespaces it is given")

	bad := syncValues()
	bad["sync"].(map[string]any)["interval"] = 30
	_, err = helmchart.Render(release, namespace, bad)
	require.Error(t, err, "the schema refuses a number for sync.interval")
}

// TestSyncCredentials: a private repository's Secret is mounted read-only and named to
// sync by file, never put in the URL or the arguments.
func TestSyncCredentials(t *testing.T) {
	args := func(cred map[string]any) ([]string, []corev1.Volume) {
		values := syncValues()
		values["sync"].(map[string]any)["credentials"] = cred
		d := typed[appsv1.Deployment](t, find(render(t, values), "Deployment", namespace, release+"-sync"))
		return d.Spec.Template.Spec.Containers[0].Args, d.Spec.Template.Spec.Volumes
	}
	a, vols := args(map[string]any{"secretName": "remediation-repo", "type": "https", "username": "oauth2"})
	assert.Subset(t, a, []string{"--git-username=oauth2", "--git-password-file=/etc/remediator/git/password"})
	assert.NotContains(t, strings.Join(a, " "), "--git-ssh-key-file")
	var secret *corev1.SecretVolumeSource
	for _, v := range vols {
		if v.Name == "git-credentials" {
			secret = v.Secret
		}
	}
	if assert.NotNil(t, secret, "the credentials volume") {
		assert.Equal(t, "remediation-repo", secret.SecretName)
		assert.Equal(t, int32(0o400), *secret.DefaultMode)
	}
	// The kubelet writes the Secret's files owned by root; the agent runs as 65532. An
	// fsGroup makes them its group's (0440): without it the agent could not read them
	// (open /etc/remediator/git/password: permission denied, on the real nodes).
	podSC := func(values map[string]any) *corev1.PodSecurityContext {
		d := typed[appsv1.Deployment](t, find(render(t, values), "Deployment", namespace, release+"-sync"))
		return d.Spec.Template.Spec.SecurityContext
	}
	withCredentials := func(podSecurityContext map[string]any) map[string]any {
		values := syncValues()
		values["sync"].(map[string]any)["credentials"] = map[string]any{"secretName": "remediation-repo", "type": "https"}
		if podSecurityContext != nil {
			values["podSecurityContext"] = podSecurityContext
		}
		return values
	}
	assert.Equal(t, ptr.To[int64](65532), podSC(withCredentials(nil)).FSGroup, "the sync pod's fsGroup: its runAsGroup")
	assert.Equal(t, ptr.To[int64](4000), podSC(withCredentials(map[string]any{"fsGroup": 4000})).FSGroup, "an fsGroup of the values")
	assert.Nil(t, podSC(withCredentials(map[string]any{"runAsUser": nil, "runAsGroup": nil})).FSGroup,
		"no fixed group (OpenShift, whose SCC assigns the fsGroup): none set")
	assert.Nil(t, podSC(syncValues()).FSGroup, "no credentials, no fsGroup")
	assert.Nil(t, deployment(t, render(t, withCredentials(nil))).Spec.Template.Spec.SecurityContext.FSGroup, "the controller's pod")

	a, _ = args(map[string]any{"secretName": "remediation-repo", "type": "ssh"})
	assert.Subset(t, a, []string{"--git-username=git", "--git-ssh-key-file=/etc/remediator/git/ssh-privatekey",
		"--git-known-hosts-file=/etc/remediator/git/known_hosts"})

	a, vols = args(map[string]any{})
	assert.NotContains(t, strings.Join(a, " "), "--git-")
	for _, v := range vols {
		assert.NotEqual(t, "git-credentials", v.Name)
	}

	values := syncValues()
	values["sync"].(map[string]any)["credentials"] = map[string]any{"secretName": "remediation-repo"}
	_, err := helmchart.Render(release, namespace, values)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "sync.credentials.type must be https or ssh")
}

// TestSyncPolicies: with sync.policies the sync agent writes the repository's
// policies into <fullname>-policies, which the controller loads as --policies-dir;
// its only right besides requests is that one ConfigMap.
func TestSyncPolicies(t *testing.T) {
	values := syncValues()
	values["sync"].(map[string]any)["policies"] = map[string]any{"enabled": true}
	objs := render(t, values)
	const sa = release + "-sync"
	d := typed[appsv1.Deployment](t, find(objs, "Deployment", namespace, sa))
	assert.Subset(t, d.Spec.Template.Spec.Containers[0].Args, []string{"--policies-path=policies",
		"--policies-configmap=" + namespace + "/" + release + "-policies"})
	role := typed[rbacv1.Role](t, find(objs, "Role", namespace, sa+"-policies"))
	assert.Equal(t, []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"create"}},
		{APIGroups: []string{""}, Resources: []string{"configmaps"}, ResourceNames: []string{release + "-policies"}, Verbs: []string{"get", "patch", "update"}},
	}, role.Rules)
	rb := typed[rbacv1.RoleBinding](t, find(objs, "RoleBinding", namespace, sa+"-policies"))
	assert.Equal(t, []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa, Namespace: namespace}}, rb.Subjects)

	controller := deployment(t, objs).Spec.Template.Spec
	assert.Contains(t, controller.Containers[0].Args, "--policies-dir="+policiesDir)
	var fromConfigMap string
	for _, v := range controller.Volumes {
		if v.Name == "policies" && v.ConfigMap != nil {
			fromConfigMap = v.ConfigMap.Name
		}
	}
	assert.Equal(t, release+"-policies", fromConfigMap, "the controller loads the synced ConfigMap")
	assert.Nil(t, find(objs, "ConfigMap", namespace, release+"-policies"), "the chart does not render the ConfigMap the sync owns")

	values["policies"] = map[string]any{"p.cue": "package policies\n"}
	_, err := helmchart.Render(release, namespace, values)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "the controller's policies come from policies and sync.policies.enabled: keep one source")
}
