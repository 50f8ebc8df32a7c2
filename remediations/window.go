package remediations

import (
	"fmt"
	"strings"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/remediator/remediator/api/v1alpha1"
)

// MaxWindowDuration is the longest a maintenance window may stay open, as the CRD's
// CEL rule says; checked here too for `remediator plan`, whose manifests never went
// through admission, and for a CRD from an older chart.
const MaxWindowDuration = 168 * time.Hour

// MaintenanceWindow reports whether now is inside the maintenance window
// ([activation, activation+duration) for each cron activation; always without one)
// and, when it is not, when the next one opens. It fails closed: a schedule that does
// not parse or never fires (0 2 30 2 *) and a duration outside (0, MaxWindowDuration]
// are errors, never "always open".
func MaintenanceWindow(w *v1alpha1.MaintenanceWindow, now time.Time) (inside bool, next time.Time, err error) {
	if w == nil {
		return true, time.Time{}, nil
	}
	sched, err := parseSchedule(w.Schedule)
	if err != nil {
		return false, time.Time{}, fmt.Errorf("spec.maintenanceWindow.schedule %q: %w", w.Schedule, err)
	}
	d := w.Duration.Duration
	if d <= 0 {
		return false, time.Time{}, fmt.Errorf("spec.maintenanceWindow.duration must be positive, got %s", d)
	}
	if d > MaxWindowDuration {
		return false, time.Time{}, fmt.Errorf("spec.maintenanceWindow.duration must be at most %s (7 days), got %s", MaxWindowDuration, d)
	}
	// Next returns the zero time for no activation within five years, which would
	// read as a window always open.
	following := sched.Next(now)
	if following.IsZero() {
		return false, time.Time{}, fmt.Errorf("spec.maintenanceWindow.schedule %q never fires (no activation within five years), so its window would never open", w.Schedule)
	}
	// The first activation after now-d opened a window still open if not after now.
	if first := sched.Next(now.Add(-d)); !first.IsZero() && !first.After(now) {
		return true, time.Time{}, nil
	}
	return false, following, nil
}

// parseSchedule is cron.ParseStandard without its panic on a TZ= or CRON_TZ= prefix
// with no space after it ("TZ=UTC"), which a CRD without admission's pattern lets
// through; a panic would be retried for ever instead of rejecting the request.
func parseSchedule(schedule string) (cron.Schedule, error) {
	if (strings.HasPrefix(schedule, "TZ=") || strings.HasPrefix(schedule, "CRON_TZ=")) && !strings.Contains(schedule, " ") {
		return nil, fmt.Errorf("a TZ= or CRON_TZ= prefix must be followed by a space and the schedule")
	}
	return cron.ParseStandard(schedule)
}
