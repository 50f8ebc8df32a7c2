package controllers

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/remediator/remediator/api/v1alpha1"
)

func TestMaintenanceWindow(t *testing.T) {
	day := func(h, m int) time.Time { return time.Date(2026, 11, 19, h, m, 0, 0, time.Local) }
	nightly := &v1alpha1.MaintenanceWindow{Schedule: "0 2 * * *", Duration: metav1.Duration{Duration: 2 * time.Hour}}
	cases := []struct {
		name   string
		w      *v1alpha1.MaintenanceWindow
		now    time.Time
		inside bool
		next   time.Time
		err    bool
	}{
		{"no window", nil, day(12, 0), true, time.Time{}, false},
		{"at the opening", nightly, day(2, 0), true, time.Time{}, false},
		{"inside", nightly, day(3, 59), true, time.Time{}, false},
		{"at the closing", nightly, day(4, 0), false, day(2, 0).AddDate(0, 0, 1), false},
		{"before", nightly, day(1, 30), false, day(2, 0), false},
		{"descriptor", &v1alpha1.MaintenanceWindow{Schedule: "@hourly", Duration: metav1.Duration{Duration: 10 * time.Minute}}, day(5, 15), false, day(6, 0), false},
		{"bad schedule", &v1alpha1.MaintenanceWindow{Schedule: "every night", Duration: metav1.Duration{Duration: time.Hour}}, day(1, 0), false, time.Time{}, true},
	}
	for _, tc := range cases {
		inside, next, err := MaintenanceWindow(tc.w, tc.now)
		if (err != nil) != tc.err || inside != tc.inside || !next.Equal(tc.next) {
			t.Errorf("%s: inside=%v next=%v err=%v; want inside=%v next=%v err=%v", tc.name, inside, next, err, tc.inside, tc.next, tc.err)
		}
	}
}
