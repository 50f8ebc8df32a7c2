package remediations

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"

	"github.com/remediator/remediator/api/v1alpha1"
)

// pluginPod is the single node-plugin pod recorded at decision time.
func pluginPod(r *Execution) (v1alpha1.PodFacts, error) {
	f := r.RR.Status.Facts
	if f == nil || f.CSI == nil || len(f.CSI.PluginPods) != 1 {
		return v1alpha1.PodFacts{}, fail("the decision's facts do not hold exactly one node-plugin pod")
	}
	return f.CSI.PluginPods[0], nil
}

// deletePluginPod evicts the node's single node-plugin pod (evict), so that the
// DaemonSet starts a fresh one whose registrar registers the driver again.
type deletePluginPod struct{}

func (deletePluginPod) Done(ctx context.Context, r *Execution) (StepResult, error) {
	p, err := pluginPod(r)
	if err != nil {
		return StepResult{}, err
	}
	pod, gone, err := podState(ctx, r, p)
	if err != nil {
		return StepResult{}, err
	}
	if gone || pod.DeletionTimestamp != nil {
		return StepResult{Done: true, Message: fmt.Sprintf("Deleted node-plugin pod %s/%s gracefully", p.Namespace, p.Name),
			Object: "Pod " + p.Namespace + "/" + p.Name, UID: p.UID}, nil
	}
	return StepResult{}, nil
}

// Run evicts the plugin pod the floor has just found, in the fresh facts, to be the
// only one on the node and the one decided on.
func (s deletePluginPod) Run(ctx context.Context, r *Execution) (StepResult, error) {
	f, _, err := r.readFresh(ctx)
	if err != nil {
		return StepResult{}, err
	}
	if f.CSI == nil || len(f.CSI.PluginPods) != 1 {
		return StepResult{}, fail("the node no longer runs exactly one node-plugin pod")
	}
	p := f.CSI.PluginPods[0]
	pod, gone, err := podState(ctx, r, p)
	if err != nil || gone {
		return s.Done(ctx, r)
	}
	refused, err := evict(ctx, r, pod)
	if err != nil {
		return StepResult{}, err
	}
	if refused != "" {
		return StepResult{Message: "Eviction refused, retrying: " + refused, RequeueAfter: 5 * time.Second}, nil
	}
	return s.Done(ctx, r)
}

// pluginPodsOnNode lists the node-plugin pods on the node, live, in the decided
// Trident namespace.
func pluginPodsOnNode(ctx context.Context, r *Execution, node string) ([]corev1.Pod, error) {
	if r.Fresh == nil {
		return nil, fmt.Errorf("no way to list node-plugin pods was wired in")
	}
	return r.Fresh.NodePluginPods(ctx, r.RR.Status.Facts.TridentNamespace, node)
}

func describePods(pods []corev1.Pod) string {
	if len(pods) == 0 {
		return "none"
	}
	out := make([]string, 0, len(pods))
	for _, p := range pods {
		out = append(out, v1alpha1.PodFacts{Name: p.Name, Phase: string(p.Status.Phase), Ready: podReady(&p),
			DeletionTimestamp: p.DeletionTimestamp}.String())
	}
	return strings.Join(out, ", ")
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// pluginPodReady waits until the old plugin pod is gone and exactly one new one runs
// Ready on the node: only then can its registrar register without another pod's
// termination removing the socket again.
func pluginPodReady(ctx context.Context, r *Execution) (StepResult, error) {
	old, err := pluginPod(r)
	if err != nil {
		return StepResult{}, err
	}
	node, err := workNode(r)
	if err != nil {
		return StepResult{}, err
	}
	pods, err := pluginPodsOnNode(ctx, r, node)
	if err != nil {
		return StepResult{}, err
	}
	if len(pods) == 1 && string(pods[0].UID) != old.UID && pods[0].DeletionTimestamp == nil &&
		pods[0].Status.Phase == corev1.PodRunning && podReady(&pods[0]) {
		p := pods[0]
		return StepResult{Done: true, Message: fmt.Sprintf("Replacement node-plugin pod %s is Ready", p.Name),
			Object: "Pod " + p.Namespace + "/" + p.Name, UID: string(p.UID), ResourceVersion: p.ResourceVersion}, nil
	}
	return StepResult{Message: "Waiting for one Ready replacement node-plugin pod; now: " + describePods(pods), RequeueAfter: 2 * time.Second}, nil
}

// driverRegistered waits until the node's CSINode lists the driver again.
func driverRegistered(ctx context.Context, r *Execution) (StepResult, error) {
	node, err := workNode(r)
	if err != nil {
		return StepResult{}, err
	}
	driver := r.RR.Status.Facts.DriverName
	cn := &storagev1.CSINode{}
	err = r.Reader.Get(ctx, types.NamespacedName{Name: node}, cn)
	if err != nil && !apierrors.IsNotFound(err) {
		return StepResult{}, fmt.Errorf("reading CSINode %s: %w", node, err)
	}
	var drivers []string
	for _, d := range cn.Spec.Drivers {
		drivers = append(drivers, d.Name)
	}
	slices.Sort(drivers)
	if slices.Contains(drivers, driver) {
		return StepResult{Done: true, Message: fmt.Sprintf("CSINode %s lists %s again", node, driver),
			Object: "CSINode " + node, UID: string(cn.UID), ResourceVersion: cn.ResourceVersion}, nil
	}
	pods, err := pluginPodsOnNode(ctx, r, node)
	if err != nil {
		return StepResult{}, err
	}
	return StepResult{Message: fmt.Sprintf("Waiting for CSINode %s to list %s; drivers now [%s]; node-plugin pods: %s",
		node, driver, strings.Join(drivers, ", "), describePods(pods)), RequeueAfter: 2 * time.Second}, nil
}
