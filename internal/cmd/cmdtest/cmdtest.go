// Package cmdtest holds the test helpers the command packages share, as kubectl's
// cmd/testing does: running a command in-process, a kubeconfig for envtest, and the
// cluster objects a test world needs.
package cmdtest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"
)

// Execute runs cmd with args and an empty stdin, and returns what it wrote to its
// stdout and stderr, together.
func Execute(cmd *cobra.Command, args ...string) (string, error) {
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetIn(strings.NewReader(""))
	cmd.SetArgs(args)
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	err := cmd.ExecuteContext(context.Background())
	return out.String(), err
}

// WriteKubeconfig writes a kubeconfig for an envtest rest.Config, as an operator's
// read-only kubeconfig would be passed to plan.
func WriteKubeconfig(t *testing.T, cfg *rest.Config) string {
	t.Helper()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["envtest"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["envtest"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData, Token: cfg.BearerToken}
	kc.Contexts["envtest"] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: "envtest"}
	kc.CurrentContext = "envtest"
	p := filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, clientcmd.WriteToFile(*kc, p))
	return p
}

// World creates cluster objects the way kubelet, kube-controller-manager and
// Trident would leave them; envtest runs no controllers, so status is written directly.
type World struct {
	T *testing.T
	C client.Client
}

// Create creates obj, and writes its status for a Node or a Pod.
func (w *World) Create(obj client.Object) {
	w.T.Helper()
	ctx := context.Background()
	var status func()
	switch o := obj.(type) {
	case *corev1.Node:
		s := o.Status
		status = func() { o.Status = s }
	case *corev1.Pod:
		s := o.Status
		status = func() { o.Status = s }
	}
	if err := w.C.Create(ctx, obj); !apierrors.IsAlreadyExists(err) {
		require.NoError(w.T, err, "creating %T %s", obj, obj.GetName())
	}
	if status != nil {
		status()
		require.NoError(w.T, w.C.Status().Update(ctx, obj), "updating status of %T %s", obj, obj.GetName())
	}
}

// Node creates a node, Ready or not, with taints, and its kube-node-lease renewed
// renewedAgo ago (none when negative).
func (w *World) Node(name string, ready corev1.ConditionStatus, taints []string, renewedAgo time.Duration) {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
	for _, k := range taints {
		n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: k, Effect: corev1.TaintEffectNoExecute})
	}
	// A reporting kubelet posts its heartbeat now; a node that went down 30 minutes
	// ago posted its last one then.
	heartbeat := metav1.Now()
	if ready != corev1.ConditionTrue {
		heartbeat = metav1.NewTime(time.Now().Add(-30 * time.Minute))
	}
	n.Status.Conditions = []corev1.NodeCondition{{
		Type: corev1.NodeReady, Status: ready, Reason: "KubeletReady",
		LastHeartbeatTime: heartbeat, LastTransitionTime: metav1.NewTime(time.Now().Add(-30 * time.Minute)),
	}}
	w.Create(n)
	if renewedAgo >= 0 {
		w.Create(&coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Namespace: corev1.NamespaceNodeLease, Name: name},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(name), LeaseDurationSeconds: ptr.To[int32](40),
				RenewTime: ptr.To(metav1.NewMicroTime(time.Now().Add(-renewedAgo)))},
		})
	}
}

// Volume creates a bound LUKS PV and PVC and the Lease Trident retained on it.
func (w *World) Volume(pv, ns, pvc, holder string, retained int) {
	w.Create(&corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: pv},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:    corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("10Gi")},
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany},
			ClaimRef:    &corev1.ObjectReference{Namespace: ns, Name: pvc},
			PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{
				Driver: "csi.trident.netapp.io", VolumeHandle: pv, VolumeAttributes: map[string]string{"luksEncryption": "true"},
			}},
		},
	})
	w.Create(&corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: pvc},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("10Gi")}},
			VolumeName:  pv,
		},
	})
	l := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: "trident", Name: pv},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(holder),
			AcquireTime: ptr.To(metav1.NewMicroTime(time.Now().Add(-40 * time.Minute)))},
	}
	w.Create(l)
	for i := range retained {
		w.Create(&corev1.Event{
			ObjectMeta: metav1.ObjectMeta{Namespace: "trident", Name: fmt.Sprintf("%s.retained-%d", pv, i)},
			InvolvedObject: corev1.ObjectReference{
				APIVersion: "coordination.k8s.io/v1", Kind: "Lease", Namespace: "trident", Name: pv, UID: l.UID,
			},
			Reason: "LeaseRetained", Type: corev1.EventTypeWarning, Count: 1,
			Message:        fmt.Sprintf("Retaining lease after failed LUKS operation on %s: cryptsetup luksOpen exited with status 5 (attempt %d)", holder, i+1),
			FirstTimestamp: metav1.Now(), LastTimestamp: metav1.Now(),
			Source: corev1.EventSource{Component: "trident-node", Host: holder},
		})
	}
}

// ChartRender returns the objects of a render of the chart (release remediator in
// remediator-system, the default plan reads) that the commands' tests read: its
// ConfigMaps, its Deployment and the plan ClusterRole, from this package's testdata/chart/<fixture>.yaml.
// This module does not import Helm: the harness module renders the chart with Helm's
// library and fails while a fixture differs from the chart's render
// (TestCmdFixturesAreTheChartsRender in test/harness/chart, which lists each fixture's
// values and rewrites them with -update).
func ChartRender(t *testing.T, fixture string) []*unstructured.Unstructured {
	t.Helper()
	f, err := os.Open(filepath.Join(chartDir(), fixture+".yaml"))
	require.NoError(t, err, "the chart's render %s (written by go -C test/harness test ./chart -run TestCmdFixturesAreTheChartsRender -update)", fixture)
	defer func() { _ = f.Close() }()
	var objs []*unstructured.Unstructured
	r := utilyaml.NewYAMLReader(bufio.NewReader(f))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return objs
		}
		require.NoError(t, err, "reading testdata/chart/%s.yaml", fixture)
		o := map[string]any{}
		require.NoError(t, yaml.Unmarshal(doc, &o), "testdata/chart/%s.yaml", fixture)
		if len(o) > 0 { // not only the header's comments
			objs = append(objs, &unstructured.Unstructured{Object: o})
		}
	}
}

// chartDir is this package's testdata/chart, wherever the test that reads it runs.
func chartDir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "testdata", "chart")
}
