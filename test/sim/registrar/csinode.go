package registrar

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
)

// DefaultTopologyKeys are the topology keys Trident reports for its node plugin.
var DefaultTopologyKeys = []string{"topology.kubernetes.io/zone"}

// RealNodeLabel (value "true") marks the nodes of the local cluster that run a real kubelet
// (make cluster REAL_NODES=N, test/realnode). Their kubelet's plugin watcher registers the
// driver from the node plugin's real registration socket and owns their CSINode, so the
// simulator leaves those nodes alone.
const RealNodeLabel = "node.remediator.io/real"

// IsRealNode reports whether n carries RealNodeLabel=true.
func IsRealNode(n *corev1.Node) bool { return n != nil && n.Labels[RealNodeLabel] == "true" }

// Syncer writes intents to CSINode objects the way kubelet's nodeinfomanager does.
type Syncer struct {
	Client       kubernetes.Interface
	Driver       string
	TopologyKeys []string
	// Skip, if set, names the nodes whose CSINode the Syncer must not touch (the real
	// nodes, from Run's node informer). Independently of it, the Syncer never creates a
	// CSINode for a Node labelled RealNodeLabel=true.
	Skip func(node string) bool
}

// Sync makes node's CSINode agree with intent and reports whether it changed anything.
func (s *Syncer) Sync(ctx context.Context, node string, intent Intent) (changed bool, err error) {
	if intent == IntentNone || (s.Skip != nil && s.Skip(node)) {
		return false, nil
	}
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		changed = false
		cn, err := s.Client.StorageV1().CSINodes().Get(ctx, node, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			if intent == IntentDeregister {
				return nil
			}
			changed, err = s.create(ctx, node)
			return err
		}
		if err != nil {
			return fmt.Errorf("get CSINode %s: %w", node, err)
		}
		i := slices.IndexFunc(cn.Spec.Drivers, func(d storagev1.CSINodeDriver) bool { return d.Name == s.Driver })
		switch {
		case intent == IntentDeregister && i >= 0:
			cn.Spec.Drivers = slices.Delete(cn.Spec.Drivers, i, i+1)
		case intent == IntentRegister && i < 0:
			cn.Spec.Drivers = append(cn.Spec.Drivers, s.driver(node))
		default:
			// Already as wanted; an Adopt never touches an existing CSINode.
			return nil
		}
		if _, err := s.Client.StorageV1().CSINodes().Update(ctx, cn, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("update CSINode %s: %w", node, err)
		}
		changed = true
		return nil
	})
	return changed, err
}

// create creates node's CSINode listing the driver, owned by the Node like kubelet's, so that
// the garbage collector deletes it with the Node. A Node that does not exist has no kubelet
// that could register anything.
func (s *Syncer) create(ctx context.Context, node string) (bool, error) {
	n, err := s.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("get Node %s for its CSINode: %w", node, err)
	}
	if IsRealNode(n) {
		// Its real kubelet creates its CSINode when it registers with the API server.
		return false, nil
	}
	cn := &storagev1.CSINode{
		ObjectMeta: metav1.ObjectMeta{
			Name: node,
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "v1",
				Kind:       "Node",
				Name:       n.Name,
				UID:        n.UID,
			}},
		},
		Spec: storagev1.CSINodeSpec{Drivers: []storagev1.CSINodeDriver{s.driver(node)}},
	}
	if _, err := s.Client.StorageV1().CSINodes().Create(ctx, cn, metav1.CreateOptions{}); err != nil {
		if apierrors.IsAlreadyExists(err) {
			// Created meanwhile: report a conflict so that RetryOnConflict re-reads it.
			return false, apierrors.NewConflict(storagev1.Resource("csinodes"), node, err)
		}
		return false, fmt.Errorf("create CSINode %s: %w", node, err)
	}
	return true, nil
}

func (s *Syncer) driver(node string) storagev1.CSINodeDriver {
	keys := s.TopologyKeys
	if keys == nil {
		keys = DefaultTopologyKeys
	}
	return storagev1.CSINodeDriver{Name: s.Driver, NodeID: node, TopologyKeys: slices.Clone(keys)}
}
