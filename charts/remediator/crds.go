// Package chart embeds the chart's CRDs, so that the CLI validates requests against
// the very CRD the chart installs: `remediator plan` builds its admission check from
// these bytes rather than from a copy of the schema that could drift from it.
//
// The chart's tests live next to it in package chart_test; .helmignore keeps every Go
// file out of the packaged chart.
package chart

import _ "embed" // for the go:embed directive below

// RemediationRequestCRD is crds/remediator.io_remediationrequests.yaml: the
// CustomResourceDefinition that controller-gen generates from api/v1alpha1 and that
// Helm installs before the chart's templates.
//
//go:embed crds/remediator.io_remediationrequests.yaml
var RemediationRequestCRD []byte
