package controllers

import (
	"fmt"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/remediator/remediator/api/v1alpha1"
)

// MaintenanceWindow reports whether now is inside the request's maintenance window
// and, when it is not, when the next one opens. A request without a window is always
// inside. A window is [activation, activation+duration) for each activation of the
// cron schedule. It is pure, so that `remediator plan` can tell whether a request
// applied at a given time would wait for its window.
func MaintenanceWindow(w *v1alpha1.MaintenanceWindow, now time.Time) (inside bool, next time.Time, err error) {
	if w == nil {
		return true, time.Time{}, nil
	}
	sched, err := cron.ParseStandard(w.Schedule)
	if err != nil {
		return false, time.Time{}, fmt.Errorf("spec.maintenanceWindow.schedule %q: %w", w.Schedule, err)
	}
	d := w.Duration.Duration
	if d <= 0 {
		return false, time.Time{}, fmt.Errorf("spec.maintenanceWindow.duration must be positive, got %s", d)
	}
	// The first activation after now-d opened a window that is still open if it is
	// not later than now.
	if first := sched.Next(now.Add(-d)); !first.After(now) {
		return true, time.Time{}, nil
	}
	return false, sched.Next(now), nil
}
