package scan

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/cli-runtime/pkg/resource"
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
	require.NoError(t, writeFindings(&asYAML, report{findings: findings}, Options{output: cmdutil.NewOutputFlags("yaml"), requestNamespace: "remediator"}))
	require.NoError(t, writeFindings(&asJSON, report{findings: findings}, Options{output: cmdutil.NewOutputFlags("json"), requestNamespace: "remediator"}))

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
	require.NoError(t, writeFindings(&none, report{}, Options{output: cmdutil.NewOutputFlags("json")}))
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
		require.NoError(t, writeFindings(&b, report{findings: findings}, Options{output: cmdutil.NewOutputFlags(output, "table"), requestNamespace: "remediator"}))
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
	err := writeFindings(&b, report{findings: findings}, Options{output: cmdutil.NewOutputFlags("xml")})
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

// TestScanHeldLeases: with --node, every output lists the Leases the node holds, in
// the order Scan sorts them, each stuck or not and why; the requests are the stuck
// findings' only, so that -o yaml and -o json stay the manifests to commit or
// apply. Without --node (held nil) nothing is added.
func TestScanHeldLeases(t *testing.T) {
	const stuckPV, youngPV = "pvc-b-stuck", "pvc-a-young"
	stuck := facts.HeldLease{Lease: "trident/" + stuckPV, Node: "node-2", NodeState: "Healthy", AgeSeconds: 120, RetainedEvents: 2, Stuck: true,
		Why:      "2 LeaseRetained event(s) since the hold began: Trident kept it after a failed operation",
		Symptoms: []facts.Symptom{{Kind: facts.SymptomFailedMount, Pod: "app/web-0", Count: 3}}}
	young := facts.HeldLease{Lease: "trident/" + youngPV, Node: "node-2", NodeState: "Healthy", AgeSeconds: 60,
		Why: "young: held 1m0s, under 10m0s; no LeaseRetained event since the hold began"}
	withNode := report{
		findings: []facts.Finding{{Kind: facts.FindingStuckLease, Node: "node-2", NodeState: "Healthy", Lease: stuck.Lease,
			AgeSeconds: 120, RetainedEvents: 2, Evidence: "Lease held for 2m0s, 2 LeaseRetained event(s)", Symptoms: stuck.Symptoms}},
		held: []facts.HeldLease{young, stuck},
	}
	render := func(t *testing.T, output string, r report) string {
		t.Helper()
		var b bytes.Buffer
		require.NoError(t, writeFindings(&b, r, Options{node: "node-2", output: cmdutil.NewOutputFlags(output, "table"), requestNamespace: "remediator"}))
		return b.String()
	}

	for _, tc := range []struct {
		name, output string
		r            report
		want         []string // regexps, one per line, in order
	}{
		{name: "table", output: "", r: withNode, want: []string{
			`^KIND +NODE +NODE STATE +LEASE +SYMPTOMS +EVIDENCE$`,
			`^StuckLease +node-2 +Healthy +trident/pvc-b-stuck +3 FailedMount +Lease held for 2m0s`,
			`^$`,
			`^Trident Leases held by node-2:$`,
			`^LEASE +STUCK +NODE STATE +AGE +LEASERETAINED +SYMPTOMS +WHY$`,
			`^trident/pvc-a-young +NotStuck +Healthy +1m0s +0 +- +young: held 1m0s, under 10m0s; no LeaseRetained event since the hold began$`,
			`^trident/pvc-b-stuck +Stuck +Healthy +2m0s +2 +3 FailedMount +2 LeaseRetained event\(s\) since the hold began`,
		}},
		{name: "wide names the stuck one's request", output: "wide", r: withNode, want: []string{
			`^KIND `, `^StuckLease `, `^$`, `^Trident Leases held by node-2:$`,
			`^LEASE +STUCK +NODE STATE +AGE +LEASERETAINED +SYMPTOMS +REQUEST +WHY$`,
			`^trident/pvc-a-young +NotStuck +Healthy +1m0s +0 +- +- +young: `,
			`^trident/pvc-b-stuck +Stuck +Healthy +2m0s +2 +3 FailedMount +remediator/release-lease-pvc-b-stuck +2 LeaseRetained`,
		}},
		{name: "a node that holds no Lease says so", output: "", r: report{held: []facts.HeldLease{}}, want: []string{
			`^KIND `,
			`^No stuck Leases, deregistered drivers or overlapping node-plugin pods found.$`,
			`^$`,
			`^No Trident Leases held by node-2.$`,
		}},
		{name: "yaml: comments first, then the stuck Lease's request", output: "yaml", r: withNode, want: []string{
			`^# remediator scan: Trident Leases held by node-2: 2, a request below for each stuck one$`,
			`^#   trident/pvc-a-young: NotStuck \(young: held 1m0s, .*\); no request$`,
			`^#   trident/pvc-b-stuck: Stuck \(2 LeaseRetained .*\); request remediator/release-lease-pvc-b-stuck$`,
			`^apiVersion: remediator.io/v1alpha1$`,
		}},
		{name: "yaml with nothing stuck", output: "yaml", r: report{held: []facts.HeldLease{young}}, want: []string{
			`^# remediator scan: Trident Leases held by node-2: 1, a request below for each stuck one$`,
			`^#   trident/pvc-a-young: NotStuck `,
			`^# remediator scan: nothing to remediate$`,
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := render(t, tc.output, tc.r)
			lines := strings.Split(out, "\n")
			require.GreaterOrEqual(t, len(lines), len(tc.want), out)
			for i, re := range tc.want {
				assert.Regexp(t, re, lines[i], "line %d of:\n%s", i, out)
			}
		})
	}

	// -o json: the List's items are the requests, heldLeases the listing, with the
	// request named for the stuck one; jsonpath reads the same List.
	var list struct {
		Items      []map[string]any `json:"items"`
		HeldLeases []map[string]any `json:"heldLeases"`
	}
	require.NoError(t, json.Unmarshal([]byte(render(t, "json", withNode)), &list))
	require.Len(t, list.Items, 1)
	require.Len(t, list.HeldLeases, 2)
	assert.Equal(t, map[string]any{"lease": "trident/pvc-a-young", "node": "node-2", "nodeState": "Healthy", "ageSeconds": 60.0,
		"retainedEvents": 0.0, "stuck": false, "why": young.Why}, list.HeldLeases[0])
	assert.Equal(t, true, list.HeldLeases[1]["stuck"])
	assert.Equal(t, "remediator/release-lease-pvc-b-stuck", list.HeldLeases[1]["request"])
	assert.Equal(t, "trident/pvc-a-young=false trident/pvc-b-stuck=true ",
		render(t, `jsonpath={range .heldLeases[*]}{.lease}={.stuck} {end}`, withNode))
	assert.Equal(t, "remediationrequest.remediator.io/release-lease-pvc-b-stuck\n", render(t, "name", withNode))
	assert.JSONEq(t, `{"apiVersion": "v1", "kind": "List", "items": [], "heldLeases": []}`, render(t, "json", report{held: []facts.HeldLease{}}))

	// Without --node the outputs are what they were.
	plain := report{findings: withNode.findings}
	for _, output := range []string{"", "wide", "yaml", "json"} {
		out := render(t, output, plain)
		assert.NotContains(t, out, "held by node-2", output)
		assert.NotContains(t, out, "heldLeases", output)
	}
}

// TestScanHeldOutputApplies: what -o yaml and -o json print with --node is read by
// kubectl apply (cli-runtime's builder, as kubectl reads -f) as the stuck Leases'
// requests and nothing else, also when the evidence of a held Lease would carry a
// line break into a comment.
func TestScanHeldOutputApplies(t *testing.T) {
	r := report{
		findings: []facts.Finding{{Kind: facts.FindingStuckLease, Node: "node-2", Lease: "trident/pvc-b-stuck", Evidence: "Lease held"}},
		held: []facts.HeldLease{
			{Lease: "trident/pvc-a-young", Why: "young\nkind: Secret\u2028apiVersion: v1\u0085x"},
			{Lease: "trident/pvc-b-stuck", Stuck: true, Why: "old"},
		},
	}
	for _, output := range []string{"yaml", "json"} {
		t.Run(output, func(t *testing.T) {
			var b bytes.Buffer
			require.NoError(t, writeFindings(&b, r, Options{node: "node-2", output: cmdutil.NewOutputFlags(output), requestNamespace: "remediator"}))
			infos, err := resource.NewLocalBuilder().Unstructured().Stream(&b, "scan").Flatten().Do().Infos()
			require.NoError(t, err, b.String())
			require.Len(t, infos, 1, b.String())
			assert.Equal(t, "RemediationRequest", infos[0].Object.GetObjectKind().GroupVersionKind().Kind)
			assert.Equal(t, "release-lease-pvc-b-stuck", infos[0].Name)
		})
	}
	assert.Equal(t, `young\u000akind: Secret\u2028apiVersion: v1\u0085x`, commentSafe(r.held[0].Why))
}
