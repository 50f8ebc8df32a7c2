package chart

import _ "embed" // for the go:embed directive below

// RemediationRequestCRD is files/crds/remediator.io_remediationrequests.yaml: the
// CustomResourceDefinition that controller-gen generates from api/v1alpha1 and that
// the chart's templates/crds.yaml installs and upgrades (crds.enabled).
//
//go:embed files/crds/remediator.io_remediationrequests.yaml
var RemediationRequestCRD []byte
