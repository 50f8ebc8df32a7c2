package remediations

import (
	"fmt"
	"strings"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/remediator/remediator/api/v1alpha1"
)

// MaxWindowDuration is the longest a maintenance window may stay open: the same
// bound as the CRD's CEL rule on spec.maintenanceWindow.duration. It is checked here
// too because `remediator plan` decides on manifests that never went through
// admission, and because a CRD installed from an older chart may lack the rule.
const MaxWindowDuration = 168 * time.Hour

// MaintenanceWindow reports whether now is inside the request's maintenance window
// and, when it is not, when the next one opens. A request without a window is always
// inside. A window is [activation, activation+duration) for each activation of the
// cron schedule. It is pure, so that `remediator plan` can tell whether a request
// applied at a given time would wait for its window.
//
// It fails closed: a schedule that does not parse, a schedule that never fires (such
// as 0 2 30 2 *, February 30) and a duration that is not positive or longer than
// MaxWindowDuration are errors, never "always open".
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
	// robfig/cron's Next returns the zero time when it finds no activation within
	// five years. The zero time is before every now, so without this check a schedule
	// that never fires would read as a window that is always open.
	following := sched.Next(now)
	if following.IsZero() {
		return false, time.Time{}, fmt.Errorf("spec.maintenanceWindow.schedule %q never fires (no activation within five years), so its window would never open", w.Schedule)
	}
	// The first activation after now-d opened a window that is still open if it is
	// not later than now. It is never zero here: an activation after now exists, and
	// so one after the earlier now-d.
	if first := sched.Next(now.Add(-d)); !first.IsZero() && !first.After(now) {
		return true, time.Time{}, nil
	}
	return false, following, nil
}

// parseSchedule is cron.ParseStandard without its panic: robfig/cron v3 reads a TZ=
// or CRON_TZ= prefix up to the first space and slices out of range when there is
// none ("TZ=UTC"). Admission's pattern refuses such a schedule, but a CRD installed
// without it lets one reach the decision, where a panic would be retried for ever
// instead of rejecting the request.
func parseSchedule(schedule string) (cron.Schedule, error) {
	if (strings.HasPrefix(schedule, "TZ=") || strings.HasPrefix(schedule, "CRON_TZ=")) && !strings.Contains(schedule, " ") {
		return nil, fmt.Errorf("a TZ= or CRON_TZ= prefix must be followed by a space and the schedule")
	}
	return cron.ParseStandard(schedule)
}
