package facts

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/client-go/rest"
)

// TestServerClockReadsTheAPIServersTime: against an API server whose clock is ten
// minutes ahead of this one (or behind), the clock the gates measure ages with is the
// server's, within a second and a round trip, and never ahead of it: a Lease created
// by that server a minute ago is a minute old, not eleven. With the local clock a
// controller whose clock ran ten minutes ahead would pass the five-minute gate at once.
func TestServerClockReadsTheAPIServersTime(t *testing.T) {
	for _, skew := range []time.Duration{10 * time.Minute, -10 * time.Minute, 0} {
		t.Run(skew.String(), func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				require.Equal(t, "/version", r.URL.Path)
				w.Header().Set("Date", time.Now().Add(skew).UTC().Format(http.TimeFormat))
				_, _ = w.Write([]byte(`{"major":"1","minor":"34"}`))
			}))
			defer srv.Close()
			c, err := NewServerClock(context.Background(), &rest.Config{Host: srv.URL})
			require.NoError(t, err)
			server := time.Now().Add(skew)
			got := c.Now()
			assert.LessOrEqual(t, got.Sub(server), 10*time.Millisecond, "never ahead of the server's clock (offset %s)", c.Offset())
			assert.Greater(t, got.Sub(server), -2*time.Second, "within a second and a round trip of the server's clock (offset %s)", c.Offset())
			created := server.Add(-time.Minute)
			assert.InDelta(t, time.Minute.Seconds(), c.Since(created).Seconds(), 2, "a Lease the server created a minute ago")
		})
	}
}

// TestServerClockRefusesAnAnswerWithoutDate: no offset is better than a made-up one.
func TestServerClockRefusesAnAnswerWithoutDate(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header()["Date"] = nil // net/http adds one unless told not to
	}))
	defer srv.Close()
	_, err := NewServerClock(context.Background(), &rest.Config{Host: srv.URL})
	assert.ErrorContains(t, err, "Date header")
}
