// Package chart owns the chart's embedded CRDs, so that the CLI validates requests
// against the very CRD the chart installs: `remediator plan` builds its admission
// check from these bytes rather than from a copy of the schema that could drift
// from it.
//
// The chart's tests live next to it in package chart_test; .helmignore keeps every Go
// file out of the packaged chart.
package chart
