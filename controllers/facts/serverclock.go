package facts

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
)

// ServerClock is the API server's clock as seen from here. The runbook's ages start
// at times the API server sets (a Lease's creationTimestamp, the writes of a node's
// heartbeat); "now" must be the server's too, or a controller whose clock runs ahead
// finds a Lease old enough, or a live kubelet silent, before it is.
//
// It keeps the server's time as a reading (the Date of an API server answer) and the
// monotonic time elapsed since that answer arrived, never the local wall clock: when
// NTP or an operator steps this machine's wall clock, no age and no heartbeat moves
// with it. The monotonic clock does not count time the machine spends suspended; a
// suspended controller's "now" then lags the server's until the next measure, which
// makes ages look younger, never older.
//
// It errs on the safe side: Date has whole seconds and is written before the answer
// arrives, so the server's time when the answer is read is at least Date; taking it
// as exactly Date makes this clock run at most a second and a round trip behind the
// server's, and ages look younger, never older.
type ServerClock struct {
	// probe asks the API server for its time (the Date of an answer).
	probe func(ctx context.Context) (time.Time, error)
	// local is this machine's clock; nil means the real one.
	local   localClock
	reading atomic.Pointer[serverReading]
}

// serverReading is the server's time when an answer arrived, and when that was on
// the local monotonic clock.
type serverReading struct {
	server  time.Time
	elapsed time.Duration
}

// localClock is this machine's clock as ServerClock reads it: Elapsed is monotonic (a
// step of the wall clock does not move it) and carries "now" forward from a reading;
// Now, the wall time, is only compared with the server's for the offset metric.
type localClock interface {
	Now() time.Time
	Elapsed() time.Duration
}

// monotonic is the real local clock: Go's time.Now carries a monotonic reading, and
// time.Since measures with it.
type monotonic struct{ origin time.Time }

func (m monotonic) Now() time.Time { return time.Now() }

func (m monotonic) Elapsed() time.Duration { return time.Since(m.origin) }

var _ clock.PassiveClock = (*ServerClock)(nil)

// NewServerClock measures the API server's clock through cfg once, so that the first
// decision already reads it.
func NewServerClock(ctx context.Context, cfg *rest.Config) (*ServerClock, error) {
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("the API server's clock: %w", err)
	}
	url := cfg.Host + "/version"
	c := &ServerClock{probe: func(ctx context.Context) (time.Time, error) { return serverDate(ctx, hc, url) }}
	if err := c.Measure(ctx); err != nil {
		return nil, err
	}
	return c, nil
}

// serverDate is the Date header of the API server's answer to GET url.
func serverDate(ctx context.Context, hc *http.Client, url string) (time.Time, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return time.Time{}, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return time.Time{}, fmt.Errorf("reading the API server's clock: %w", err)
	}
	_ = resp.Body.Close()
	date, err := http.ParseTime(resp.Header.Get("Date"))
	if err != nil {
		return time.Time{}, fmt.Errorf("reading the API server's clock: its answer's Date header %q: %w", resp.Header.Get("Date"), err)
	}
	return date, nil
}

var realLocal = monotonic{origin: time.Now()}

func (c *ServerClock) localClock() localClock {
	if c.local == nil {
		return realLocal
	}
	return c.local
}

// Measure reads the API server's clock and keeps it as the reading "now" counts
// from.
func (c *ServerClock) Measure(ctx context.Context) error {
	date, err := c.probe(ctx)
	if err != nil {
		return err
	}
	// Taken after the answer arrived: the server's time was at least date then.
	c.reading.Store(&serverReading{server: date.Round(0), elapsed: c.localClock().Elapsed()})
	return nil
}

// Offset is how far the API server's clock is ahead of this machine's wall clock now
// (negative: behind), the remediator_server_clock_offset_seconds metric. No age is
// measured with it: a step of the local wall clock shows here at once, and moves no
// age.
func (c *ServerClock) Offset() time.Duration {
	return c.Now().Sub(c.localClock().Now().Round(0))
}

// Now implements clock.PassiveClock: the last reading of the server's time plus the
// monotonic time elapsed since.
func (c *ServerClock) Now() time.Time {
	r := c.reading.Load()
	if r == nil {
		// Only a ServerClock built without NewServerClock and never measured.
		return c.localClock().Now().Round(0)
	}
	return r.server.Add(c.localClock().Elapsed() - r.elapsed)
}

// Since implements clock.PassiveClock.
func (c *ServerClock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }

// ServerClockInterval is how often Start measures the API server's clock again: clocks
// drift by seconds a day, and the runbook's gates are minutes.
const ServerClockInterval = time.Minute

// Start measures the API server's clock every ServerClockInterval until ctx ends (a
// manager.Runnable, on every replica). A failed measure keeps the last reading.
func (c *ServerClock) Start(ctx context.Context) error {
	log := ctrl.LoggerFrom(ctx).WithName("server-clock")
	// NonSliding: a measure every interval, however long the last one took.
	wait.JitterUntilWithContext(ctx, func(ctx context.Context) { c.remeasure(ctx, log) }, ServerClockInterval, 0, false)
	return nil
}

// remeasure measures again and logs a reading that moved against the time elapsed.
func (c *ServerClock) remeasure(ctx context.Context, log logr.Logger) {
	carried := c.Now()
	if err := c.Measure(ctx); err != nil {
		if ctx.Err() == nil {
			log.Error(err, "Measuring the API server's clock failed; the last reading stays", "offset", c.Offset())
		}
		return
	}
	// Within a second (Date's resolution), the new reading agrees with the last one
	// carried forward; more is the server's clock stepped, or this machine suspended.
	if d := c.Now().Sub(carried); d > time.Second || d < -time.Second {
		log.Info("The API server's clock moved against the time elapsed here", "moved", d, "offset", c.Offset())
	}
}
