package chart

import _ "embed" // for the go:embed directive below

// RemediationRequestCRD is crds/remediator.io_remediationrequests.yaml: the
// CustomResourceDefinition that controller-gen generates from api/v1alpha1 and that
// Helm installs before the chart's templates.
//
//go:embed crds/remediator.io_remediationrequests.yaml
var RemediationRequestCRD []byte
