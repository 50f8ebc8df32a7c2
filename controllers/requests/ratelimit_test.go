package requests

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// TestRetryBackoffIsCapped: a request that failed many times in a row (an API
// server that was down for a while) is retried within MaxRetryDelay once it is
// back, not after the work queue's default of up to 1,000 s.
func TestRetryBackoffIsCapped(t *testing.T) {
	rl := RateLimiter()
	item := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "remediator", Name: "rr"}}
	var last time.Duration
	for range 30 {
		last = rl.When(item)
	}
	assert.Equal(t, MaxRetryDelay, last)
	rl.Forget(item)
	assert.Less(t, rl.When(item), time.Second, "a success resets the backoff")
}
