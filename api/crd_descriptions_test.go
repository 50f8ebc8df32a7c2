package api_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"
)

// crdFile is the generated CRD (TestGeneratedFilesAreCurrent holds it to the types).
const crdFile = "../charts/remediator/files/crds/remediator.io_remediationrequests.yaml"

// TestCRDDescribesEveryField: `kubectl explain remediationrequest.<path>` describes
// every field of the CRD, and a field with a fixed set of values (an enum: the
// remediation, the mode, the fencing method, the phase) names each value in its
// description, so that explain says what each one means. The descriptions are the
// Go doc comments of api/v1alpha1, which controller-gen copies into the CRD.
// metadata is the one exception: the API server documents it as ObjectMeta.
func TestCRDDescribesEveryField(t *testing.T) {
	data, err := os.ReadFile(filepath.FromSlash(crdFile))
	require.NoError(t, err)
	var crd apiextensionsv1.CustomResourceDefinition
	require.NoError(t, yaml.UnmarshalStrict(data, &crd))
	require.NotEmpty(t, crd.Spec.Versions)

	var problems []string
	for _, v := range crd.Spec.Versions {
		require.NotNil(t, v.Schema, "version %s has no schema", v.Name)
		require.NotNil(t, v.Schema.OpenAPIV3Schema, "version %s has no openAPIV3Schema", v.Name)
		root := *v.Schema.OpenAPIV3Schema
		assert.NotEmpty(t, root.Description, "version %s: the kind has no description", v.Name)
		for name, p := range root.Properties {
			if name == "metadata" {
				continue
			}
			problems = append(problems, undescribed("."+name, p)...)
		}
	}
	sort.Strings(problems)
	for _, p := range problems {
		t.Errorf("%s (kubectl explain shows nothing useful: write the field's doc comment in api/v1alpha1 and run make manifests)", p)
	}
}

// undescribed lists the problems of the property at path and of everything under it.
func undescribed(path string, p apiextensionsv1.JSONSchemaProps) []string {
	var out []string
	if strings.TrimSpace(p.Description) == "" {
		out = append(out, path+": no description")
	} else {
		for _, raw := range p.Enum {
			var value string
			if json.Unmarshal(raw.Raw, &value) == nil && !strings.Contains(p.Description, value) {
				out = append(out, path+`: the description does not name the value "`+value+`"`)
			}
		}
	}
	for name, child := range p.Properties {
		out = append(out, undescribed(path+"."+name, child)...)
	}
	if p.Items != nil && p.Items.Schema != nil {
		out = append(out, undescribedUnder(path+"[]", *p.Items.Schema)...)
	}
	if p.AdditionalProperties != nil && p.AdditionalProperties.Schema != nil {
		out = append(out, undescribedUnder(path+"{}", *p.AdditionalProperties.Schema)...)
	}
	return out
}

// undescribedUnder checks what is under a list's items or a map's values: the items
// schema itself repeats the list's description only when it is a named type, so only
// its properties need one.
func undescribedUnder(path string, p apiextensionsv1.JSONSchemaProps) []string {
	var out []string
	for name, child := range p.Properties {
		out = append(out, undescribed(path+"."+name, child)...)
	}
	if p.Items != nil && p.Items.Schema != nil {
		out = append(out, undescribedUnder(path+"[]", *p.Items.Schema)...)
	}
	return out
}

// TestExplainDescribesTheFencingMethods: `kubectl explain
// remediationrequest.spec.fencing.method` says what each method means, not only its
// name (issue 26).
func TestExplainDescribesTheFencingMethods(t *testing.T) {
	data, err := os.ReadFile(filepath.FromSlash(crdFile))
	require.NoError(t, err)
	var crd apiextensionsv1.CustomResourceDefinition
	require.NoError(t, yaml.UnmarshalStrict(data, &crd))
	method := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"].Properties["fencing"].Properties["method"]
	// Compared with the line breaks and indentation folded into single spaces.
	description := strings.Join(strings.Fields(method.Description), " ")
	for _, want := range []string{
		"- NodeShutdown: the node was powered off or shut down out of band",
		"- TridentNodeContainerStopped: the Trident node container on the node was stopped",
		"- LogsVerified: the trident-main logs show the node can neither acquire nor delete the Lease and is not running cryptsetup",
	} {
		assert.Contains(t, description, want, "spec.fencing.method's description")
	}
}
