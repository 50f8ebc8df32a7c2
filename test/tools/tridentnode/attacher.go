package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"time"

	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
)

// Attacher is the csi-attacher container: it marks this node's VolumeAttachments of the
// driver attached, as the upstream external-attacher (kubernetes-csi/external-attacher)
// does once ControllerPublishVolume succeeded. The stand-in's volumes are directories
// of the host, so there is nothing to publish; what matters is that the driver declares
// attachRequired: true as Trident's CSIDriver does, so that the real kubelets report
// the volumes in the Node's status.volumesInUse and the attach-detach controller
// creates, and on detach deletes, a VolumeAttachment per volume and node.
//
// It adds no finalizer: the attach-detach controller's delete is the detach, and the
// object is gone at once, as it is with external-attacher once ControllerUnpublish
// returned. So a node that is shut down (its attacher stopped with it) is still
// detached by the attach-detach controller, as a cluster-wide attacher would let it.
type Attacher struct {
	Client     kubernetes.Interface
	DriverName string
	// Node is this node's name: only attachments to it are this attacher's.
	Node string
	Log  *slog.Logger
}

// mine reports whether va is this node's attachment of the driver, still to attach.
func (a *Attacher) mine(va *storagev1.VolumeAttachment) bool {
	return va.Spec.Attacher == a.DriverName && va.Spec.NodeName == a.Node &&
		va.DeletionTimestamp == nil && !va.Status.Attached
}

// Run watches VolumeAttachments until ctx ends and marks this node's attached.
func (a *Attacher) Run(ctx context.Context) error {
	factory := informers.NewSharedInformerFactory(a.Client, 10*time.Minute)
	inf := factory.Storage().V1().VolumeAttachments().Informer()
	queue := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]())
	defer queue.ShutDown()
	enqueue := func(obj any) {
		if va, ok := obj.(*storagev1.VolumeAttachment); ok && a.mine(va) {
			queue.Add(va.Name)
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: enqueue, UpdateFunc: func(_, obj any) { enqueue(obj) },
	}); err != nil {
		return fmt.Errorf("watching VolumeAttachments: %w", err)
	}
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return ctx.Err()
	}
	a.Log.Info("attacher started", "driver", a.DriverName, "node", a.Node)
	go func() { <-ctx.Done(); queue.ShutDown() }()
	for {
		name, quit := queue.Get()
		if quit {
			return nil
		}
		if err := a.attach(ctx, name); err != nil {
			a.Log.Error("attaching", "volumeAttachment", name, "err", err)
			queue.AddRateLimited(name)
		} else {
			queue.Forget(name)
		}
		queue.Done(name)
	}
}

// attach sets status.attached on the VolumeAttachment name.
func (a *Attacher) attach(ctx context.Context, name string) error {
	patch := []byte(`{"status":{"attached":true}}`)
	va, err := a.Client.StorageV1().VolumeAttachments().Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}, "status")
	if err != nil {
		return fmt.Errorf("marking VolumeAttachment %s attached: %w", name, err)
	}
	pv := ""
	if va.Spec.Source.PersistentVolumeName != nil {
		pv = *va.Spec.Source.PersistentVolumeName
	}
	a.Log.Info("attached", "volumeAttachment", name, "persistentVolume", pv, "node", a.Node)
	return nil
}

func runAttacher(ctx context.Context, log *slog.Logger, args []string) error {
	fs := flag.NewFlagSet("attacher", flag.ContinueOnError)
	node := fs.String("node-id", "", "this node's name: only VolumeAttachments to it are marked attached")
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig; in-cluster config when empty")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *node == "" {
		return fmt.Errorf("--node-id is required")
	}
	cs, err := client(*kubeconfig)
	if err != nil {
		return fmt.Errorf("API client: %w", err)
	}
	return (&Attacher{Client: cs, DriverName: DriverName, Node: *node, Log: log}).Run(ctx)
}
