package remediations

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/remediator/remediator/api/v1alpha1"
)

func TestMaintenanceWindow(t *testing.T) {
	day := func(h, m int) time.Time { return time.Date(2026, 11, 19, h, m, 0, 0, time.Local) }
	window := func(schedule string, d time.Duration) *v1alpha1.MaintenanceWindow {
		return &v1alpha1.MaintenanceWindow{Schedule: schedule, Duration: metav1.Duration{Duration: d}}
	}
	nightly := window("0 2 * * *", 2*time.Hour)
	cases := []struct {
		name   string
		w      *v1alpha1.MaintenanceWindow
		now    time.Time
		inside bool
		next   time.Time
		// err, when set, is a substring the error must contain: it names the field.
		err string
	}{
		{name: "no window", now: day(12, 0), inside: true},
		{name: "at the opening", w: nightly, now: day(2, 0), inside: true},
		{name: "inside", w: nightly, now: day(3, 59), inside: true},
		{name: "at the closing", w: nightly, now: day(4, 0), next: day(2, 0).AddDate(0, 0, 1)},
		{name: "before", w: nightly, now: day(1, 30), next: day(2, 0)},
		{name: "descriptor", w: window("@hourly", 10*time.Minute), now: day(5, 15), next: day(6, 0)},
		{name: "the longest window", w: window("0 2 * * 1", MaxWindowDuration), now: day(1, 0), inside: true},
		{name: "bad schedule", w: window("every night", time.Hour), now: day(1, 0), err: "spec.maintenanceWindow.schedule"},
		// robfig/cron's Next returns the zero time for these; that used to read as
		// "inside", so the request ran at once, outside any window.
		{name: "never fires: February 30", w: window("0 2 30 2 *", 2*time.Hour), now: day(1, 0), err: `spec.maintenanceWindow.schedule "0 2 30 2 *" never fires`},
		{name: "never fires: April 31", w: window("0 2 31 4 *", time.Hour), now: day(3, 0), err: "never fires"},
		{name: "never fires: with a time zone", w: window("CRON_TZ=Europe/Berlin 0 2 30 2 *", time.Hour), now: day(1, 0), err: "never fires"},
		// robfig/cron slices the time zone up to the first space and panicked without
		// one. Admission's pattern refuses these, but a CRD installed without the
		// pattern (an older chart) let one reach the decision, whose panic the
		// reconciler retried for ever instead of rejecting the request.
		{name: "time zone without fields", w: window("TZ=UTC", time.Hour), now: day(1, 0), err: "spec.maintenanceWindow.schedule \"TZ=UTC\""},
		{name: "cron time zone without fields", w: window("CRON_TZ=Europe/Berlin", time.Hour), now: day(1, 0), err: "spec.maintenanceWindow.schedule"},
		{name: "zero duration", w: window("0 2 * * *", 0), now: day(2, 30), err: "spec.maintenanceWindow.duration must be positive"},
		{name: "negative duration", w: window("0 2 * * *", -time.Hour), now: day(2, 30), err: "spec.maintenanceWindow.duration must be positive"},
		{name: "over 168h", w: window("0 2 * * *", MaxWindowDuration+time.Second), now: day(2, 30), err: "spec.maintenanceWindow.duration must be at most 168h0m0s"},
		{name: "absurd duration", w: window("0 2 * * *", 100_000*time.Hour), now: day(2, 30), err: "spec.maintenanceWindow.duration must be at most"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			inside, next, err := MaintenanceWindow(tc.w, tc.now)
			if tc.err != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tc.err)
				assert.False(t, inside, "an invalid window must not count as open")
				assert.True(t, next.IsZero(), "next = %v", next)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.inside, inside, "inside")
			assert.True(t, next.Equal(tc.next), "next = %v, want %v", next, tc.next)
		})
	}
}
