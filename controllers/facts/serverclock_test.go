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

// steppedClock is a local clock whose wall time and monotonic time move apart, as
// they do when NTP (or an operator) steps the wall clock: step moves only the wall
// time, elapse moves both.
type steppedClock struct {
	wall time.Time
	mono time.Duration
}

func (s *steppedClock) Now() time.Time         { return s.wall }
func (s *steppedClock) Elapsed() time.Duration { return s.mono }
func (s *steppedClock) step(d time.Duration)   { s.wall = s.wall.Add(d) }
func (s *steppedClock) elapse(d time.Duration) { s.wall = s.wall.Add(d); s.mono += d }

// TestServerClockIgnoresAStepOfTheLocalWallClock: the server's time is a reading plus
// the monotonic time elapsed since it. When the controller's wall clock is stepped
// ten minutes forward (or back), "now" does not move: before, every age and heartbeat
// looked ten minutes older until the next measure, and a Lease a minute old passed
// the five-minute gate. Time that elapses does advance it, and the offset metric shows
// the step.
func TestServerClockIgnoresAStepOfTheLocalWallClock(t *testing.T) {
	for _, step := range []time.Duration{10 * time.Minute, -10 * time.Minute} {
		t.Run(step.String(), func(t *testing.T) {
			server := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
			local := &steppedClock{wall: server.Add(-time.Hour), mono: 42 * time.Second}
			c := &ServerClock{local: local, probe: func(context.Context) (time.Time, error) { return server, nil }}
			require.NoError(t, c.Measure(context.Background()))
			assert.Equal(t, server, c.Now(), "right after the measure")
			assert.Equal(t, time.Hour, c.Offset(), "server minus local wall time")

			created := server.Add(-time.Minute)
			local.step(step)
			assert.Equal(t, server, c.Now(), "a step of the local wall clock moved the server's time")
			assert.Equal(t, time.Minute, c.Since(created), "a Lease created a minute ago")
			assert.Equal(t, time.Hour-step, c.Offset(), "the offset shows the local clock's step")

			local.elapse(30 * time.Second)
			assert.Equal(t, server.Add(30*time.Second), c.Now(), "elapsed time advances the server's time")
			assert.Equal(t, 90*time.Second, c.Since(created))
		})
	}
}
