package facts

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
)

// ServerClock is the API server's clock as seen from here: the local clock plus the
// offset last measured from the Date header of an API server answer. The runbook's
// ages start at times the API server sets (a Lease's creationTimestamp, the writes of
// a node's heartbeat); "now" must be the server's too, or a controller whose clock
// runs ahead finds a Lease old enough, or a live kubelet silent, before it is.
//
// The offset errs on the safe side: Date has whole seconds and is written before
// the answer arrives, so the server's time when the answer is read is at least Date;
// taking it as exactly Date makes this clock run at most a second and a round trip
// behind the server's, and ages look younger, never older.
type ServerClock struct {
	// probe asks the API server for its time (the Date of an answer).
	probe func(ctx context.Context) (time.Time, error)
	// local is the clock the offset is added to; nil means the real one.
	local  clock.PassiveClock
	offset atomic.Int64
}

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

func (c *ServerClock) localNow() time.Time {
	if c.local == nil {
		return time.Now()
	}
	return c.local.Now()
}

// Measure reads the API server's clock and sets the offset from it.
func (c *ServerClock) Measure(ctx context.Context) error {
	date, err := c.probe(ctx)
	if err != nil {
		return err
	}
	received := c.localNow()
	c.offset.Store(int64(date.Sub(received)))
	return nil
}

// Offset is the last measured difference, server minus local.
func (c *ServerClock) Offset() time.Duration { return time.Duration(c.offset.Load()) }

// Now implements clock.PassiveClock.
func (c *ServerClock) Now() time.Time { return c.localNow().Add(c.Offset()) }

// Since implements clock.PassiveClock.
func (c *ServerClock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }

// ServerClockInterval is how often Start measures the API server's clock again: clocks
// drift by seconds a day, and the runbook's gates are minutes.
const ServerClockInterval = time.Minute

// Start measures the API server's clock every ServerClockInterval until ctx ends (a
// manager.Runnable, on every replica). A failed measure keeps the last offset.
func (c *ServerClock) Start(ctx context.Context) error {
	log := ctrl.LoggerFrom(ctx).WithName("server-clock")
	t := time.NewTicker(ServerClockInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		before := c.Offset()
		if err := c.Measure(ctx); err != nil {
			if ctx.Err() == nil {
				log.Error(err, "Measuring the API server's clock failed; the last offset stays", "offset", before)
			}
			continue
		}
		if d := c.Offset() - before; d > time.Second || d < -time.Second {
			log.Info("The API server's clock moved against this one", "offset", c.Offset(), "before", before)
		}
	}
}
