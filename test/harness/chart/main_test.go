package chart_test

import (
	"fmt"
	"os"
	"testing"

	"github.com/remediator/remediator/test/harness/helmchart"
)

// TestMain runs the tests in the chart's directory, charts/remediator, where they
// lived before they moved into the harness module (they import Helm's library, which
// the controller's module does not): they read the chart's files (values.yaml,
// templates/, files/) by paths relative to the chart, and the repository's sources by
// ../../ from there.
func TestMain(m *testing.M) {
	if err := os.Chdir(helmchart.Dir()); err != nil {
		fmt.Fprintln(os.Stderr, "chart tests:", err)
		os.Exit(1)
	}
	os.Exit(m.Run())
}
