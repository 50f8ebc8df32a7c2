// Package chart owns the chart's embedded CRDs, so that the CLI validates requests
// against the very CRD the chart installs: `remediator plan` builds its admission
// check from these bytes rather than from a copy of the schema that could drift
// from it.
//
// The chart's tests live in the harness module (test/harness/chart), which imports
// Helm's library; .helmignore keeps the Go files here out of the packaged chart.
package chart
