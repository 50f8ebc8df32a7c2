package facts

import (
	"context"

	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// SplitReader reads each object either from the informer cache or live from the API
// server. The controller decides on cached facts, which a watch keeps within
// milliseconds of the cluster, and reads live what must not be even that old: the
// holder node's state right before a destructive step, and pods, which it never
// caches (their number grows with the cluster, the controller's memory must not).
// Everything the cache does not hold (a Lease in a Trident namespace a request
// overrides, say) is read live too.
type SplitReader struct {
	Cache client.Reader
	Live  client.Reader
	// Cached reports whether obj, in namespace (empty for cluster-scoped objects and
	// lists across namespaces), is read from Cache.
	Cached func(obj runtime.Object, namespace string) bool
}

var _ client.Reader = SplitReader{}

func (r SplitReader) pick(obj runtime.Object, namespace string) client.Reader {
	if r.Cached != nil && r.Cached(obj, namespace) {
		return r.Cache
	}
	return r.Live
}

// Get implements client.Reader.
func (r SplitReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	return r.pick(obj, key.Namespace).Get(ctx, key, obj, opts...)
}

// List implements client.Reader.
func (r SplitReader) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	o := &client.ListOptions{}
	o.ApplyOptions(opts)
	return r.pick(list, o.Namespace).List(ctx, list, opts...)
}
