package plan

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"

	"github.com/remediator/remediator/api/v1alpha1"
	chart "github.com/remediator/remediator/charts/remediator"
)

// placeholderRequest is valid under the chart's CRD: its reason is long enough, even
// though it says nothing yet.
const placeholderRequest = `apiVersion: remediator.io/v1alpha1
kind: RemediationRequest
metadata:
  name: release-lease-todo
  namespace: remediator
spec:
  remediation: release-luks-lease
  target:
    persistentVolume: pvc-0b8e5d21-6c3f-4a7e-b1d9-5e2f8c4a6d30
  reason: TODO explain why the Lease is stuck
  driverName: csi.trident.netapp.io
`

// editedCRD returns the chart's CRD with edit applied to the v1alpha1 version's
// schema of spec, as someone changing api/v1alpha1's markers would regenerate it.
func editedCRD(t *testing.T, edit func(spec map[string]any)) []byte {
	t.Helper()
	var crd map[string]any
	require.NoError(t, yaml.Unmarshal(chart.RemediationRequestCRD, &crd))
	versions, _ := crd["spec"].(map[string]any)["versions"].([]any)
	found := false
	for _, ver := range versions {
		ver := ver.(map[string]any)
		if ver["name"] != v1alpha1.GroupVersion.Version {
			continue
		}
		found = true
		root := ver["schema"].(map[string]any)["openAPIV3Schema"].(map[string]any)
		edit(root["properties"].(map[string]any)["spec"].(map[string]any))
	}
	require.True(t, found, "the chart's CRD has no %s version", v1alpha1.GroupVersion.Version)
	out, err := yaml.Marshal(crd)
	require.NoError(t, err)
	return out
}

// specProperty is the schema of one of spec's fields.
func specProperty(spec map[string]any, name string) map[string]any {
	return spec["properties"].(map[string]any)[name].(map[string]any)
}

// planOne decodes a one-document manifest the way plan reads each document of an -f
// file, with the given validator.
func planOne(t *testing.T, v *requestValidator, manifest string) planInput {
	t.Helper()
	docs, err := yamlDocuments([]byte(manifest))
	require.NoError(t, err)
	require.Len(t, docs, 1)
	require.NoError(t, docs[0].err)
	return decodePlanRequest(v, "-", 1, docs[0].json)
}

func embedded(t *testing.T) *requestValidator {
	t.Helper()
	v, err := embeddedRequestValidator()
	require.NoError(t, err, "the chart's CRD does not make a validator")
	return v
}

// TestPlanEnforcesANewCRDRule: a CEL rule added to the CRD is enforced by plan with
// no change to plan's code. The rule goes into the CRD's bytes, the validator is
// built from them as plan builds its own from the embedded CRD, and a request that
// was valid is refused with the rule's message.
func TestPlanEnforcesANewCRDRule(t *testing.T) {
	before := planOne(t, embedded(t), placeholderRequest)
	require.True(t, planAccepted(before), "the chart's CRD refuses the request already: %v", before.errs)

	const message = "spec.reason must say why the remediation is needed, not TODO"
	crd := editedCRD(t, func(spec map[string]any) {
		reason := specProperty(spec, "reason")
		rules, _ := reason["x-kubernetes-validations"].([]any)
		reason["x-kubernetes-validations"] = append(rules, map[string]any{"rule": "!self.startsWith('TODO')", "message": message})
	})
	v, err := newRequestValidator(crd)
	require.NoError(t, err)

	after := planOne(t, v, placeholderRequest)
	assert.False(t, planAccepted(after), "the new rule is not enforced")
	require.Len(t, after.errs, 2, "%v", after.errs)
	assert.Equal(t, "- (document 1): RemediationRequest remediator/release-lease-todo is invalid (the API server would refuse it):", after.errs[0])
	assert.Equal(t, `spec.reason: Invalid value: "string": `+message, after.errs[1])

	// A request the rule allows is still accepted.
	fixed := planOne(t, v, strings.Replace(placeholderRequest, "TODO explain why the Lease is stuck", "kwok-node-3 is powered off and still holds the Lease", 1))
	assert.True(t, planAccepted(fixed), "%v", fixed.errs)
}

// TestPlanDefaultsAndPrunesFromTheCRD: the mode's default and the set of known
// fields are the CRD's too.
func TestPlanDefaultsAndPrunesFromTheCRD(t *testing.T) {
	in := planOne(t, embedded(t), placeholderRequest)
	require.True(t, planAccepted(in), "%v", in.errs)
	assert.Equal(t, v1alpha1.ModeApply, in.rr.Spec.Mode, "the chart's CRD defaults the mode to Apply")
	assert.Equal(t, "csi.trident.netapp.io", in.rr.Spec.DriverName)

	v, err := newRequestValidator(editedCRD(t, func(spec map[string]any) {
		specProperty(spec, "mode")["default"] = string(v1alpha1.ModeDryRun)
		delete(spec["properties"].(map[string]any), "driverName")
	}))
	require.NoError(t, err)
	in = planOne(t, v, placeholderRequest)
	assert.Equal(t, []string{
		"- (document 1): RemediationRequest remediator/release-lease-todo is invalid (the API server would refuse it):",
		`unknown field "spec.driverName"`,
	}, in.errs)
	require.NotNil(t, in.rr)
	assert.Equal(t, v1alpha1.ModeDryRun, in.rr.Spec.Mode, "the default is not the CRD's")
	assert.Empty(t, in.rr.Spec.DriverName, "a field the CRD does not know is pruned")
}

// TestPlanRefusesEverythingUnderARuleThatDoesNotCompile: the API server would not
// install such a CRD; should one reach plan anyway, plan fails closed and says why.
func TestPlanRefusesEverythingUnderARuleThatDoesNotCompile(t *testing.T) {
	v, err := newRequestValidator(editedCRD(t, func(spec map[string]any) {
		reason := specProperty(spec, "reason")
		reason["x-kubernetes-validations"] = []any{map[string]any{"rule": "self.noSuchFunction()"}}
	}))
	require.NoError(t, err)
	in := planOne(t, v, strings.Replace(placeholderRequest, "TODO explain why the Lease is stuck", "kwok-node-3 is powered off and still holds the Lease", 1))
	assert.False(t, planAccepted(in))
	assert.Contains(t, strings.Join(in.errs, "\n"), "spec.reason: Invalid value: \"string\": rule compile error")
}

// TestNewRequestValidatorRefusesOtherCRDs: the validator decodes what it accepts
// into api/v1alpha1's types, so a CRD for anything else is refused when it is built.
func TestNewRequestValidatorRefusesOtherCRDs(t *testing.T) {
	crd := string(chart.RemediationRequestCRD)
	for _, tc := range []struct {
		name, crd, want string
	}{
		{"not YAML", "{", "decoding the CustomResourceDefinition"},
		{"a field a CRD does not have", crd + "extra: true\n", `unknown field "extra"`},
		{"not a CRD", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n", "want an apiextensions.k8s.io/v1 CustomResourceDefinition, got v1 ConfigMap"},
		{"another group", strings.Replace(crd, "group: remediator.io", "group: example.com", 1), `defines RemediationRequest in group "example.com", want RemediationRequest in "remediator.io"`},
		{"another version", strings.Replace(crd, "name: v1alpha1", "name: v1beta1", 1), "does not serve version v1alpha1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := newRequestValidator([]byte(tc.crd))
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}
