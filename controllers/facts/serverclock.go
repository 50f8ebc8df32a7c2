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
	ctrl "sigs.k8s.io/controller-runtime"
)

// ServerClock is the API server's clock as seen from here. The runbook's ages start
// at times the API server sets; "now" must be the server's too, or a controller whose
// clock runs ahead finds a Lease old enough, or a live kubelet silent, too soon.
//
// It is the Date of an API server answer plus the monotonic time elapsed since it
// arrived, so a step of the local wall clock moves no age. Every error makes ages
// younger, never older: Date has whole seconds and is written before the answer
// arrives (the clock runs up to a second and a round trip behind), and the monotonic
// clock does not count time suspended.
type ServerClock struct {
	// probe asks the API server for its time (the Date of an answer).
	probe func(ctx context.Context) (time.Time, error)
	// local is this machine's clock.
	local   localClock
	reading atomic.Pointer[serverReading]
}

// serverReading is the server's time when an answer arrived, and the local
// monotonic time then.
type serverReading struct {
	server  time.Time
	elapsed time.Duration
}

// localClock is this machine's clock: Elapsed, monotonic, carries "now" forward from
// a reading; Now, the wall time, only feeds the offset metric.
type localClock interface {
	Now() time.Time
	Elapsed() time.Duration
}

// monotonic is the real local clock (time.Since measures monotonically).
type monotonic struct{ origin time.Time }

func (m monotonic) Now() time.Time         { return time.Now() }
func (m monotonic) Elapsed() time.Duration { return time.Since(m.origin) }

// NewServerClock measures the API server's clock through cfg once, so that the first
// decision already reads it.
func NewServerClock(ctx context.Context, cfg *rest.Config) (*ServerClock, error) {
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("the API server's clock: %w", err)
	}
	c := &ServerClock{local: monotonic{origin: time.Now()}}
	c.probe = func(ctx context.Context) (time.Time, error) { return serverDate(ctx, hc, cfg.Host+"/version") }
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

// Measure reads the API server's clock as the reading "now" counts from.
func (c *ServerClock) Measure(ctx context.Context) error {
	date, err := c.probe(ctx)
	if err != nil {
		return err
	}
	c.reading.Store(&serverReading{server: date.Round(0), elapsed: c.local.Elapsed()})
	return nil
}

// Offset is how far the API server's clock is ahead of this machine's wall clock
// (remediator_server_clock_offset_seconds); no age is measured with it.
func (c *ServerClock) Offset() time.Duration {
	return c.Now().Sub(c.local.Now().Round(0))
}

// Now implements clock.PassiveClock.
func (c *ServerClock) Now() time.Time {
	r := c.reading.Load()
	if r == nil {
		return c.local.Now().Round(0) // never measured
	}
	return r.server.Add(c.local.Elapsed() - r.elapsed)
}

// Since implements clock.PassiveClock.
func (c *ServerClock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }

// ServerClockInterval is how often Start measures again: clocks drift by seconds a
// day, and the runbook's gates are minutes.
const ServerClockInterval = time.Minute

// Start measures the API server's clock every ServerClockInterval until ctx ends (a
// manager.Runnable, on every replica); a failed measure keeps the last reading.
func (c *ServerClock) Start(ctx context.Context) error {
	log := ctrl.LoggerFrom(ctx).WithName("server-clock")
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
	// More than Date's resolution is the server's clock stepped, or this machine suspended.
	if d := c.Now().Sub(carried); d > time.Second || d < -time.Second {
		log.Info("The API server's clock moved against the time elapsed here", "moved", d, "offset", c.Offset())
	}
}
