package scan

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"

	"github.com/remediator/remediator/controllers/facts"
	"github.com/remediator/remediator/internal/cmd/cmdtest"
	"github.com/remediator/remediator/internal/cmd/cmdutil"
)

func TestSuggestedRequests(t *testing.T) {
	findings := []facts.Finding{
		{Kind: facts.FindingDeregisteredDriver, Node: "kwok-node-0", Evidence: "CSINode kwok-node-0 does not list csi.trident.netapp.io"},
		{Kind: facts.FindingOverlappingPluginPods, Node: "kwok-node-0", Evidence: "2 node-plugin pods on kwok-node-0"},
		{Kind: facts.FindingStuckLease, Node: "kwok-node-1", Lease: "trident/pvc-75a6fd7f-7aee-45e8-a5fa-d4500272528e", Evidence: "Lease held for 40m"},
	}
	var buf bytes.Buffer
	require.NoError(t, WriteRequests(&buf, SuggestedRequests(findings, "remediator")))
	docs := strings.Split(buf.String(), "\n---\n")
	require.Len(t, docs, 2, "want one request per target:\n%s", buf.String())
	type rr struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct{ Name, Namespace string }
		Spec       struct {
			Remediation string
			Target      map[string]string
			Reason      string
		}
	}
	var csi, lease rr
	require.NoError(t, yaml.UnmarshalStrict([]byte(docs[0]), &csi))
	require.NoError(t, yaml.UnmarshalStrict([]byte(docs[1]), &lease))
	assert.Equal(t, "remediator.io/v1alpha1", csi.APIVersion)
	assert.Equal(t, "RemediationRequest", csi.Kind)

	assert.Equal(t, "reregister-csi-kwok-node-0", csi.Metadata.Name, "csi request")
	assert.Equal(t, "kwok-node-0", csi.Spec.Target["node"], "csi request")
	assert.Contains(t, csi.Spec.Reason, "does not list", "csi request")
	assert.Contains(t, csi.Spec.Reason, "2 node-plugin pods", "csi request")

	assert.Equal(t, "release-luks-lease", lease.Spec.Remediation, "lease request")
	assert.Equal(t, "pvc-75a6fd7f-7aee-45e8-a5fa-d4500272528e", lease.Spec.Target["persistentVolume"], "lease request")
	assert.Equal(t, "remediator", lease.Metadata.Namespace, "lease request")
	assert.True(t, strings.HasPrefix(lease.Spec.Reason, "remediator scan: Lease held"), "lease request reason %q", lease.Spec.Reason)
}

// TestScanOutputsAgree: -o yaml and -o json print the same requests (as plan's two
// print the same report), and the JSON one is a List kubectl apply takes.
func TestScanOutputsAgree(t *testing.T) {
	findings := []facts.Finding{
		{Kind: facts.FindingDeregisteredDriver, Node: "kwok-node-0", Evidence: "CSINode kwok-node-0 does not list csi.trident.netapp.io"},
		{Kind: facts.FindingStuckLease, Node: "kwok-node-1", Lease: "trident/pvc-75a6fd7f-7aee-45e8-a5fa-d4500272528e", Evidence: "Lease held for 40m"},
	}
	var asYAML, asJSON bytes.Buffer
	require.NoError(t, writeFindings(&asYAML, findings, Options{output: cmdutil.NewOutputFlags("yaml"), requestNamespace: "remediator"}))
	require.NoError(t, writeFindings(&asJSON, findings, Options{output: cmdutil.NewOutputFlags("json"), requestNamespace: "remediator"}))

	var fromYAML []map[string]any
	for _, doc := range strings.Split(asYAML.String(), "\n---\n") {
		var m map[string]any
		require.NoError(t, yaml.Unmarshal([]byte(doc), &m))
		fromYAML = append(fromYAML, m)
	}
	var list struct {
		APIVersion string           `json:"apiVersion"`
		Kind       string           `json:"kind"`
		Items      []map[string]any `json:"items"`
	}
	require.NoError(t, json.Unmarshal(asJSON.Bytes(), &list))
	assert.Equal(t, "v1", list.APIVersion)
	assert.Equal(t, "List", list.Kind)
	require.Len(t, list.Items, 2)
	assert.Equal(t, fromYAML, list.Items)

	var none bytes.Buffer
	require.NoError(t, writeFindings(&none, nil, Options{output: cmdutil.NewOutputFlags("json")}))
	assert.JSONEq(t, `{"apiVersion": "v1", "kind": "List", "items": []}`, none.String())
}

// TestScanPrinterFlags: scan takes kubectl's printer flags. The default table is what
// it was (-o table is the same) plus the symptoms counted by kind, wide adds the Lease's age, its LeaseRetained events,
// the node-plugin pods and the suggested request; name, jsonpath and go-template print
// the suggested requests, the List -o json prints.
func TestScanPrinterFlags(t *testing.T) {
	findings := []facts.Finding{
		{Kind: facts.FindingDeregisteredDriver, Node: "kwok-node-0", NodeState: "Healthy", PluginPods: []string{"trident/trident-node-linux-abcde"},
			Evidence: "CSINode kwok-node-0 does not list csi.trident.netapp.io"},
		{Kind: facts.FindingStuckLease, Node: "kwok-node-1", NodeState: "Unreachable", Lease: "trident/pvc-75a6fd7f-7aee-45e8-a5fa-d4500272528e",
			AgeSeconds: 2400, RetainedEvents: 3, Evidence: "Lease held for 40m", Symptoms: []facts.Symptom{
				{Kind: facts.SymptomContainerCreating, Pod: "app/web-0", Count: 1, Message: "on kwok-node-2"},
				{Kind: facts.SymptomFailedMount, Pod: "app/web-0", Count: 3, Message: "MountVolume.MountDevice failed"},
				{Kind: facts.SymptomFailedMount, Pod: "app/web-1", Count: 1, Message: "MountVolume.MountDevice failed"},
			}},
	}
	render := func(t *testing.T, output string, findings []facts.Finding) string {
		t.Helper()
		var b bytes.Buffer
		require.NoError(t, writeFindings(&b, findings, Options{output: cmdutil.NewOutputFlags(output, "table"), requestNamespace: "remediator"}))
		return b.String()
	}
	table := render(t, "", findings)
	assert.Equal(t, "KIND                NODE         NODE STATE   LEASE                                             SYMPTOMS                            EVIDENCE\n"+
		"DeregisteredDriver  kwok-node-0  Healthy      -                                                 -                                   CSINode kwok-node-0 does not list csi.trident.netapp.io\n"+
		"StuckLease          kwok-node-1  Unreachable  trident/pvc-75a6fd7f-7aee-45e8-a5fa-d4500272528e  1 ContainerCreating, 4 FailedMount  Lease held for 40m\n", table)
	assert.Equal(t, table, render(t, "table", findings), "-o table is the default")

	wide := render(t, "wide", findings)
	lines := strings.Split(strings.TrimSpace(wide), "\n")
	require.Len(t, lines, 3, wide)
	assert.Regexp(t, `^KIND +NODE +NODE STATE +LEASE +AGE +LEASERETAINED +PLUGIN PODS +SYMPTOMS +REQUEST +EVIDENCE$`, lines[0])
	assert.Regexp(t, `^DeregisteredDriver +kwok-node-0 +Healthy +- +- +0 +trident/trident-node-linux-abcde +- +remediator/reregister-csi-kwok-node-0 +CSINode kwok-node-0 does not list`, lines[1])
	assert.Regexp(t, `^StuckLease +kwok-node-1 +Unreachable +trident/pvc-75a6fd7f-7aee-45e8-a5fa-d4500272528e +40m0s +3 +- +1 ContainerCreating, 4 FailedMount +remediator/release-lease-pvc-75a6fd7f-7aee-45e8-a5fa-d4500272528e +Lease held for 40m$`, lines[2])

	assert.Equal(t, "remediationrequest.remediator.io/reregister-csi-kwok-node-0\nremediationrequest.remediator.io/release-lease-pvc-75a6fd7f-7aee-45e8-a5fa-d4500272528e\n",
		render(t, "name", findings))
	assert.Equal(t, "kwok-node-0 pvc-75a6fd7f-7aee-45e8-a5fa-d4500272528e",
		render(t, "jsonpath={.items[*].spec.target.*}", findings))
	assert.Equal(t, "reregister-csi-driver\nrelease-luks-lease\n",
		render(t, `go-template={{range .items}}{{.spec.remediation}}{{"\n"}}{{end}}`, findings))
	assert.Equal(t, "List", render(t, "jsonpath={.kind}", nil), "jsonpath reads the v1 List, also when it is empty")

	assert.Empty(t, render(t, "name", nil), "-o name with nothing found prints nothing")
	assert.Contains(t, render(t, "", nil), "No stuck Leases, deregistered drivers or overlapping node-plugin pods found.")

	var b bytes.Buffer
	err := writeFindings(&b, findings, Options{output: cmdutil.NewOutputFlags("xml")})
	assert.ErrorContains(t, err, `unknown --output "xml"`)
	assert.NoError(t, Options{output: cmdutil.NewOutputFlags("jsonpath={.items}")}.output.Validate())
	assert.ErrorContains(t, Options{output: cmdutil.NewOutputFlags("jsonpath={.items")}.output.Validate(), "error parsing jsonpath")
}

// TestScanNamespaceFlag: -n is where the suggested requests go, and it may not
// contradict --request-namespace.
func TestScanNamespaceFlag(t *testing.T) {
	_, err := cmdtest.Execute(NewCommand(), "-n", "ops", "--request-namespace", "remediator")
	require.Error(t, err)
	assert.Contains(t, err.Error(), `--namespace "ops" and --request-namespace "remediator" disagree`)
}
