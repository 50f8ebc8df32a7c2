package registrar

import (
	"context"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
)

// Config configures Run.
type Config struct {
	Client kubernetes.Interface
	// Namespace and Selector (a label selector) pick the node-plugin pods.
	Namespace string
	Selector  string
	// Driver is the CSI driver name, e.g. csi.trident.netapp.io.
	Driver string
	// Log receives kubelet-style log lines; os.Stderr if nil.
	Log io.Writer
}

// Run watches the node-plugin pods and keeps the nodes' CSINodes in line until ctx ends.
func Run(ctx context.Context, cfg Config) error {
	if cfg.Log == nil {
		cfg.Log = os.Stderr
	}
	// The real nodes (RealNodeLabel=true): their kubelets own their CSINodes. Only those
	// Nodes are cached.
	nodeFactory := informers.NewSharedInformerFactoryWithOptions(cfg.Client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = RealNodeLabel + "=true" }))
	realNodes := nodeFactory.Core().V1().Nodes()
	nodeInformer := realNodes.Informer()
	isReal := func(node string) bool {
		n, err := realNodes.Lister().Get(node)
		return err == nil && IsRealNode(n)
	}
	r := &runner{
		cfg:     cfg,
		log:     &Logger{W: cfg.Log},
		tracker: NewTracker(),
		syncer:  &Syncer{Client: cfg.Client, Driver: cfg.Driver, Skip: isReal},
		isReal:  isReal,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "csinodes"}),
	}
	defer r.queue.ShutDown()

	// Only the node-plugin pods: the simulator must not cache every pod of the cluster.
	factory := informers.NewSharedInformerFactoryWithOptions(cfg.Client, 0,
		informers.WithNamespace(cfg.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = cfg.Selector }))
	pods := factory.Core().V1().Pods().Informer()
	// One handler: client-go delivers its events one at a time, in watch order, which is
	// what makes "terminated after the other pod registered" meaningful.
	if _, err := pods.AddEventHandler(cache.ResourceEventHandlerDetailedFuncs{
		AddFunc:    func(obj any, initial bool) { r.observe(obj, initial) },
		UpdateFunc: func(_, obj any) { r.observe(obj, false) },
		DeleteFunc: r.forget,
	}); err != nil {
		return fmt.Errorf("add pod event handler: %w", err)
	}
	r.log.Info("trident-sim", "", "Watching node-plugin pods in namespace %s with selector %q for driver %s",
		cfg.Namespace, cfg.Selector, cfg.Driver)
	nodeFactory.Start(ctx.Done())
	defer nodeFactory.Shutdown()
	// Real nodes first: a real node's plugin pod must not be taken for a simulated one.
	if !cache.WaitForCacheSync(ctx.Done(), nodeInformer.HasSynced) {
		return fmt.Errorf("node informer did not sync: %w", ctx.Err())
	}
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	if !cache.WaitForCacheSync(ctx.Done(), pods.HasSynced) {
		return fmt.Errorf("pod informer did not sync: %w", ctx.Err())
	}
	r.log.Info("trident-sim", "", "Pod informer synced; leaving nodes labelled %s=true to their real kubelets", RealNodeLabel)

	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for r.next(ctx) {
		}
	}()
	<-ctx.Done()
	r.queue.ShutDown()
	wg.Wait()
	r.log.Info("trident-sim", "", "Stopped")
	return nil
}

type runner struct {
	cfg    Config
	log    *Logger
	syncer *Syncer
	// isReal tells the real nodes, whose kubelets own their CSINodes.
	isReal func(node string) bool
	queue  workqueue.TypedRateLimitingInterface[string]

	mu      sync.Mutex
	tracker *Tracker
}

func podOf(obj any) (*corev1.Pod, bool) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	p, ok := obj.(*corev1.Pod)
	return p, ok
}

// PodFrom extracts what the Tracker needs from a pod.
func PodFrom(p *corev1.Pod) Pod {
	running := p.Status.Phase == corev1.PodRunning
	ready := false
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			ready = running && c.Status == corev1.ConditionTrue
		}
	}
	return Pod{
		UID:         string(p.UID),
		Name:        p.Namespace + "/" + p.Name,
		Node:        p.Spec.NodeName,
		Running:     running,
		Ready:       ready,
		Terminating: p.DeletionTimestamp != nil,
	}
}

func (r *runner) observe(obj any, initial bool) {
	p, ok := podOf(obj)
	if !ok {
		return
	}
	r.mu.Lock()
	ts := r.tracker.Observe(PodFrom(p), initial)
	r.mu.Unlock()
	r.handle(ts)
}

func (r *runner) forget(obj any) {
	p, ok := podOf(obj)
	if !ok {
		return
	}
	r.mu.Lock()
	ts := r.tracker.Forget(PodFrom(p))
	r.mu.Unlock()
	r.handle(ts)
}

// handle logs what kubelet would log for each transition and queues the node's CSINode.
func (r *runner) handle(ts []Transition) {
	sock := "/var/lib/kubelet/plugins_registry/" + r.cfg.Driver + "-reg.sock"
	endpoint := "/var/lib/kubelet/plugins/" + r.cfg.Driver + "/csi.sock"
	for _, t := range ts {
		l := func(src, format string, args ...any) {
			r.log.Info(src, fmt.Sprintf("node=%q pod=%q", t.Node, t.Pod), format, args...)
		}
		if r.isReal != nil && r.isReal(t.Node) {
			l("trident-sim", "Real node: its kubelet registers the driver from the plugin pod's own socket; leaving its CSINode alone (intent %s not applied)", t.Intent)
			continue
		}
		switch t.Intent {
		case IntentRegister, IntentAdopt:
			l("plugin_watcher.go:203", "Adding socket path or updating timestamp %s to desired state cache", sock)
			if t.Intent == IntentAdopt {
				l("trident-sim", "Pod was Ready before the simulator started; registering only if the node has no CSINode")
			}
			l("reconciler.go:156", "operationExecutor.RegisterPlugin started for plugin at %q", sock)
			l("csi_plugin.go:100", "kubernetes.io/csi: Trying to validate a new CSI Driver with name: %s endpoint: %s versions: 1.2.0", r.cfg.Driver, endpoint)
			l("csi_plugin.go:113", "kubernetes.io/csi: Register new plugin with name: %s at endpoint: %s", r.cfg.Driver, endpoint)
		case IntentDeregister:
			l("trident-sim", "Node-plugin pod is terminating; its driver-registrar removes the registration socket on SIGTERM")
			l("plugin_watcher.go:212", "Removing socket path %s from desired state cache", sock)
			l("reconciler.go:139", "operationExecutor.UnregisterPlugin started for plugin at %q", sock)
			l("csi_plugin.go:177", "kubernetes.io/csi: registrationHandler.DeRegisterPlugin request for plugin %s", r.cfg.Driver)
		}
		r.queue.Add(t.Node)
	}
}

func (r *runner) next(ctx context.Context) bool {
	node, shutdown := r.queue.Get()
	if shutdown {
		return false
	}
	defer r.queue.Done(node)
	r.mu.Lock()
	intent := r.tracker.Intent(node)
	r.mu.Unlock()
	changed, err := r.syncer.Sync(ctx, node, intent)
	if err != nil {
		if ctx.Err() == nil {
			r.log.Error("trident-sim", fmt.Sprintf("node=%q", node), "Syncing CSINode failed, retrying: %v", err)
			r.queue.AddRateLimited(node)
		}
		return true
	}
	r.queue.Forget(node)
	if changed {
		r.log.Info("trident-sim", fmt.Sprintf("node=%q", node), "Updated CSINode for intent %s", intent)
	}
	return true
}

// Logger writes klog-formatted lines ("I0102 15:04:05.000000 pid file:line] msg") whose
// source location is the kubelet file the line imitates, so the simulator's log reads like
// the kubelet log of the seed.
type Logger struct {
	W  io.Writer
	mu sync.Mutex
}

// Info logs an informational line; kv (e.g. node="x") is appended when not empty.
func (l *Logger) Info(src, kv, format string, args ...any) { l.write('I', src, kv, format, args...) }

// Error logs an error line.
func (l *Logger) Error(src, kv, format string, args ...any) { l.write('E', src, kv, format, args...) }

func (l *Logger) write(sev byte, src, kv, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if kv != "" {
		msg += " " + kv
	}
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	fmt.Fprintf(l.W, "%c%s %7d %s] %s\n", sev, now.Format("0102 15:04:05.000000"), os.Getpid(), src, msg)
}
