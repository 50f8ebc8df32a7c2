package plan

// Fuzz targets of plan's and scan's files: the -f request files, the --facts files
// and the manifests scan -o yaml writes for plan to read. Their seeds are also the
// corpus TestPlanAgreesWithAdmissionOnTheCorpus sends to a real API server.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"

	"github.com/remediator/remediator/api/v1alpha1"
	"github.com/remediator/remediator/controllers/facts"
	"github.com/remediator/remediator/internal/cmd/scan"
	"github.com/remediator/remediator/remediations"
)

// planRequestSeeds are request files: the examples, plan's testdata, the refusals of
// TestPlanRefusesWhatAdmissionRefuses, and edges of every bound in the CRD (lengths
// in characters, not bytes; nulls, which the API server prunes; types; metadata).
func planRequestSeeds(t testing.TB) [][]byte {
	t.Helper()
	var seeds [][]byte
	for _, glob := range []string{"../../../examples/requests/*.yaml", "../../../examples/remediation-repo/examples/requests/*.yaml", planTestdata + "*.yaml"} {
		files, err := filepath.Glob(glob)
		require.NoError(t, err)
		require.NotEmpty(t, files, glob)
		for _, file := range files {
			data, err := os.ReadFile(file)
			require.NoError(t, err)
			seeds = append(seeds, data)
		}
	}
	render := func(obj any) []byte {
		data, err := yaml.Marshal(obj)
		require.NoError(t, err)
		return data
	}
	for i, tc := range invalidRequests {
		obj, spec := validRequest(fmt.Sprintf("bad-%d", i))
		tc.edit(obj, spec)
		seeds = append(seeds, render(obj))
	}
	edits := []func(obj, spec map[string]any){
		func(o, _ map[string]any) { o["metadata"].(map[string]any)["name"] = strings.Repeat("a", 253) },
		func(o, _ map[string]any) { o["metadata"].(map[string]any)["name"] = strings.Repeat("a", 254) },
		func(o, _ map[string]any) { o["metadata"].(map[string]any)["namespace"] = strings.Repeat("n", 63) },
		func(o, _ map[string]any) { o["metadata"].(map[string]any)["namespace"] = strings.Repeat("n", 64) },
		func(o, _ map[string]any) { delete(o["metadata"].(map[string]any), "name") },
		func(o, _ map[string]any) {
			md := o["metadata"].(map[string]any)
			delete(md, "name")
			md["generateName"] = "release-"
		},
		func(o, _ map[string]any) {
			o["metadata"].(map[string]any)["labels"] = map[string]any{"team": "storage"}
		},
		func(o, _ map[string]any) { o["metadata"].(map[string]any)["labels"] = map[string]any{"not a key": "x"} },
		func(o, _ map[string]any) {
			o["metadata"].(map[string]any)["labels"] = map[string]any{"team": "not a value!"}
		},
		func(o, _ map[string]any) {
			o["metadata"].(map[string]any)["annotations"] = map[string]any{"ticket": "INC-4711"}
		},
		func(o, _ map[string]any) { o["metadata"].(map[string]any)["annotations"] = map[string]any{"/bad": "x"} },
		func(o, _ map[string]any) {
			o["metadata"].(map[string]any)["finalizers"] = []any{"not a finalizer name!"}
		},
		func(o, _ map[string]any) { o["metadata"].(map[string]any)["uid"] = 42 },
		func(o, _ map[string]any) { o["metadata"].(map[string]any)["colour"] = "blue" },
		func(o, _ map[string]any) { o["status"] = map[string]any{"phase": "Succeeded"} },
		func(o, _ map[string]any) { o["status"] = map[string]any{"colour": "blue"} },
		func(o, _ map[string]any) { o["extra"] = true },
		func(_, s map[string]any) { s["reason"] = strings.Repeat("ä", 10) },
		func(_, s map[string]any) { s["reason"] = strings.Repeat("ä", 9) },
		func(_, s map[string]any) { s["reason"] = strings.Repeat("€", 4096) },
		func(_, s map[string]any) { s["reason"] = strings.Repeat("x", 4097) },
		func(_, s map[string]any) { s["reason"] = nil },
		func(_, s map[string]any) { s["mode"] = nil },
		func(_, s map[string]any) { s["mode"] = "DryRun" },
		func(_, s map[string]any) { s["mode"] = "dryrun" },
		func(_, s map[string]any) { s["remediation"] = nil },
		func(_, s map[string]any) { s["fencing"] = nil },
		func(_, s map[string]any) { s["fencing"] = map[string]any{} },
		func(_, s map[string]any) { s["fencing"] = map[string]any{"confirmed": false} },
		func(_, s map[string]any) {
			s["fencing"] = map[string]any{"confirmed": "true", "method": "NodeShutdown", "node": "n"}
		},
		func(_, s map[string]any) {
			s["fencing"] = map[string]any{"confirmed": true, "method": "NodeShutdown", "node": ""}
		},
		func(_, s map[string]any) { s["fencing"] = map[string]any{"confirmed": false, "method": "Hope"} },
		func(_, s map[string]any) { s["fencing"] = map[string]any{"confirmed": nil} },
		func(_, s map[string]any) { s["maintenanceWindow"] = nil },
		func(_, s map[string]any) {
			s["maintenanceWindow"] = map[string]any{"schedule": "0 2 * * *", "duration": "1.5h"}
		},
		func(_, s map[string]any) {
			s["maintenanceWindow"] = map[string]any{"schedule": "0 2 * * *", "duration": "168h0m0s"}
		},
		func(_, s map[string]any) {
			s["maintenanceWindow"] = map[string]any{"schedule": "0 2 * * *", "duration": "167h60m"}
		},
		func(_, s map[string]any) {
			s["maintenanceWindow"] = map[string]any{"schedule": "0 2 * * *", "duration": "168h0.000000001s"}
		},
		func(_, s map[string]any) {
			s["maintenanceWindow"] = map[string]any{"schedule": "0 2 * * *", "duration": "0.5ns"}
		},
		func(_, s map[string]any) {
			s["maintenanceWindow"] = map[string]any{"schedule": "0 2 * * *", "duration": "1h1h"}
		},
		func(_, s map[string]any) {
			s["maintenanceWindow"] = map[string]any{"schedule": "0 2 * * *", "duration": "90µs"}
		},
		func(_, s map[string]any) {
			s["maintenanceWindow"] = map[string]any{"schedule": "0 2 * * *", "duration": 7200}
		},
		func(_, s map[string]any) {
			s["maintenanceWindow"] = map[string]any{"schedule": "0 2 * * *", "duration": "2h", "timezone": "UTC"}
		},
		func(_, s map[string]any) {
			s["maintenanceWindow"] = map[string]any{"schedule": "TZ=UTC", "duration": "2h"}
		},
		func(_, s map[string]any) {
			s["maintenanceWindow"] = map[string]any{"schedule": "TZ=UTC 0 2 * * *", "duration": "2h"}
		},
		func(_, s map[string]any) {
			s["maintenanceWindow"] = map[string]any{"schedule": "@every 1h30m", "duration": "2h"}
		},
		func(_, s map[string]any) {
			s["maintenanceWindow"] = map[string]any{"schedule": "0 2 * * * *", "duration": "2h"}
		},
		func(_, s map[string]any) {
			s["maintenanceWindow"] = map[string]any{"schedule": strings.Repeat("1", 257), "duration": "2h"}
		},
		func(_, s map[string]any) {
			s["target"] = map[string]any{"persistentVolume": nil, "node": "kwok-node-0"}
			s["remediation"] = "reregister-csi-driver"
		},
		func(_, s map[string]any) {
			s["target"] = map[string]any{"node": "kwok-node-0"}
			s["remediation"] = "reregister-csi-driver"
		},
		func(_, s map[string]any) {
			s["target"] = map[string]any{"node": ""}
			s["remediation"] = "reregister-csi-driver"
		},
		func(_, s map[string]any) {
			s["target"] = map[string]any{"pod": map[string]any{"namespace": "", "name": "web-0"}}
		},
		func(_, s map[string]any) {
			s["target"] = map[string]any{"pod": map[string]any{"namespace": "app", "name": "web-0", "uid": "x"}}
		},
		func(_, s map[string]any) { s["target"] = map[string]any{"pod": "app/web-0"} },
		func(_, s map[string]any) {
			s["target"] = map[string]any{"persistentVolumeClaim": map[string]any{"namespace": strings.Repeat("n", 64), "name": "data"}}
		},
		func(_, s map[string]any) { s["target"] = map[string]any{"persistentVolume": strings.Repeat("p", 254)} },
		func(_, s map[string]any) { s["target"] = map[string]any{"persistentVolume": 12} },
		func(_, s map[string]any) { s["target"] = map[string]any{"persistentVolume": "pvc-1", "node": nil} },
		func(_, s map[string]any) { s["tridentNamespace"] = "" },
		func(_, s map[string]any) { s["tridentNamespace"] = nil },
		func(_, s map[string]any) { s["tridentNamespace"] = strings.Repeat("t", 64) },
		func(_, s map[string]any) { s["driverName"] = "csi.trident.netapp.io" },
		func(_, s map[string]any) { s["driverName"] = "-csi" },
		func(_, s map[string]any) { s["driverName"] = strings.Repeat("d", 64) },
		func(_, s map[string]any) { s["steps"] = []any{"cordon"} },
	}
	for i, edit := range edits {
		obj, spec := validRequest(fmt.Sprintf("edge-%d", i))
		edit(obj, spec)
		seeds = append(seeds, render(obj))
	}
	valid, _ := validRequest("json-request")
	j, err := json.Marshal(valid)
	require.NoError(t, err)
	seeds = append(seeds, j,
		[]byte("apiVersion: remediator.io/v1alpha1\nkind: RemediationRequest\nmetadata:\n  name: dup\n  name: dup2\nspec:\n  remediation: release-luks-lease\n  target:\n    persistentVolume: pvc-1\n  reason: Lease held by a dead node\n"),
		[]byte("apiVersion: remediator.io/v1alpha1\nkind: RemediationRequest\nmetadata:\n  name: anchors\nspec: &s\n  remediation: release-luks-lease\n  target:\n    persistentVolume: pvc-1\n  reason: Lease held by a dead node\n"),
		[]byte("apiVersion: remediator.io/v1alpha1\nkind: RemediationRequest\nmetadata:\n  name: yes\nspec:\n  remediation: release-luks-lease\n  target:\n    persistentVolume: 0x1F\n  reason: Lease held by a dead node\n"),
		[]byte("apiVersion: remediator.io/v1alpha1\nkind: RemediationRequest\nmetadata:\n  name: tab\nspec:\n  remediation: release-luks-lease\n  target:\n    persistentVolume: pvc-1\n  reason: \"\\t\\t\\t\\t\\t\\t\\t\\t\\t\\t\"\n"),
		[]byte("apiVersion: remediator.io/v1\nkind: RemediationRequest\nmetadata:\n  name: other-version\n"),
		[]byte("apiVersion: remediator.io/v1alpha1\nkind: remediationrequest\nmetadata:\n  name: lower-case-kind\n"),
		[]byte("---\n---\n"),
		[]byte("[]"),
		[]byte("\"just a string\""),
		[]byte("{"),
	)
	return seeds
}

// planInputsOf reads one request file as plan does (-f -).
func planInputsOf(data []byte) []planInput {
	return readPlanRequests([]string{"-"}, &onceReader{r: bytes.NewReader(data)})
}

// planAccepted reports whether plan would go on to decide the input.
func planAccepted(in planInput) bool { return in.rr != nil && len(in.errs) == 0 }

// FuzzPlanRequestFile reads fuzzed -f files as plan does and checks: no panic;
// every document is either a request to decide or an error, and a file yields at
// least one of them; and every request plan accepts satisfies the CRD's constraints
// (checked here on the typed request, independently of the CRD-driven validation of
// the raw object), decodes in the controller (requests.Decode, from the
// same JSON), is accepted again from its own encoding with the same spec, and has a
// maintenance window that evaluates without panicking. Whether the API server agrees
// with plan is checked on the corpus by TestPlanAgreesWithAdmissionOnTheCorpus.
func FuzzPlanRequestFile(f *testing.F) {
	for _, s := range planRequestSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		inputs := planInputsOf(data)
		require.NotEmpty(t, inputs, "a file that yields neither a request nor an error")
		docs, _ := yamlDocuments(data)
		for _, in := range inputs {
			if !planAccepted(in) {
				require.NotEmpty(t, in.errs, "a document that is neither a request nor an error")
				for _, e := range in.errs {
					require.NotEmpty(t, e)
				}
				continue
			}
			require.GreaterOrEqual(t, in.doc, 1)
			require.LessOrEqual(t, in.doc, len(docs))
			checkAcceptedRequest(t, in.rr, docs[in.doc-1].json)
		}
	})
}

// checkAcceptedRequest is what every request plan accepts must satisfy.
func checkAcceptedRequest(t *testing.T, rr *v1alpha1.RemediationRequest, doc []byte) {
	t.Helper()
	require.Empty(t, validation.IsDNS1123Subdomain(rr.Name), "accepted name %q", rr.Name)
	if rr.Namespace != "" {
		require.Empty(t, validation.IsDNS1123Label(rr.Namespace), "accepted namespace %q", rr.Namespace)
	}
	s := rr.Spec
	require.Contains(t, []v1alpha1.Remediation{v1alpha1.RemediationReleaseLUKSLease, v1alpha1.RemediationReregisterCSIDriver}, s.Remediation)
	require.Contains(t, []v1alpha1.Mode{v1alpha1.ModeApply, v1alpha1.ModeDryRun}, s.Mode, "the mode is not defaulted")
	set := 0
	for _, ok := range []bool{s.Target.PersistentVolume != "", s.Target.PersistentVolumeClaim != nil, s.Target.Pod != nil, s.Target.Node != ""} {
		if ok {
			set++
		}
	}
	require.Equal(t, 1, set, "accepted with %d targets: %+v", set, s.Target)
	require.Equal(t, s.Remediation == v1alpha1.RemediationReregisterCSIDriver, s.Target.Node != "", "remediation %s with target %+v", s.Remediation, s.Target)
	// Target names are names the API server accepts for the objects they name
	// (PVs, Nodes, pods and claims: DNS-1123 subdomains in DNS-1123 label namespaces).
	for _, n := range []string{s.Target.PersistentVolume, s.Target.Node} {
		if n != "" {
			require.Empty(t, validation.IsDNS1123Subdomain(n), "accepted target name %q", n)
		}
	}
	for _, ref := range []*v1alpha1.ObjectReference{s.Target.PersistentVolumeClaim, s.Target.Pod} {
		if ref != nil {
			require.Empty(t, validation.IsDNS1123Label(ref.Namespace), "accepted reference %+v", *ref)
			require.Empty(t, validation.IsDNS1123Subdomain(ref.Name), "accepted reference %+v", *ref)
		}
	}
	n := utf8.RuneCountInString(s.Reason)
	require.True(t, n >= 10 && n <= 4096, "accepted a reason of %d characters", n)
	if fe := s.Fencing; fe != nil && fe.Confirmed {
		require.Contains(t, []v1alpha1.FencingMethod{v1alpha1.FencingNodeShutdown, v1alpha1.FencingTridentNodeContainerStopped, v1alpha1.FencingLogsVerified}, fe.Method)
		require.NotEmpty(t, fe.Node, "confirmed fencing that names no node")
	}
	if w := s.MaintenanceWindow; w != nil {
		require.NotEmpty(t, w.Schedule)
		require.True(t, w.Duration.Duration > 0 && w.Duration.Duration <= remediations.MaxWindowDuration, "accepted window duration %s", w.Duration.Duration)
		_, _, _ = remediations.MaintenanceWindow(w, time.Date(2026, 11, 19, 2, 30, 0, 0, time.UTC))
	}
	if s.TridentNamespace != "" {
		require.Empty(t, validation.IsDNS1123Label(s.TridentNamespace), "accepted tridentNamespace %q", s.TridentNamespace)
	}
	require.LessOrEqual(t, len(s.DriverName), 63)

	// What plan accepts, the controller can decode: it reads requests as items of a
	// list, each decoded apart.
	var list v1alpha1.RemediationRequestList
	require.NoError(t, json.Unmarshal([]byte(`{"items":[`+string(doc)+`]}`), &list))
	require.Len(t, list.Items, 1)
	require.NoError(t, list.Items[0].DecodeError(), "plan accepts a request the controller cannot decode")

	// And plan accepts its own reading of the request again.
	re, err := json.Marshal(rr)
	require.NoError(t, err)
	v, err := embeddedRequestValidator()
	require.NoError(t, err)
	again := decodePlanRequest(v, "re-encoded", 1, re)
	require.True(t, planAccepted(again), "plan refuses its own encoding of an accepted request: %v\n%s", again.errs, re)
	require.Equal(t, rr.Spec, again.rr.Spec)
	require.Equal(t, rr.Name, again.rr.Name)
}

// FuzzPlanFactsFile reads fuzzed --facts files as plan does and checks: no panic; a
// file either fails the plan with an error or yields facts, each of them non-nil
// and surviving its own encoding through the strict decoder; and matching them to a
// request never panics and gives facts only when they are for that request's target
// or are the only facts and name no target.
func FuzzPlanFactsFile(f *testing.F) {
	for _, glob := range []string{"../../../examples/remediation-repo/examples/facts/*.yaml", planTestdata + "facts/*", "../../../policies/testdata/*.yaml"} {
		files, err := filepath.Glob(glob)
		require.NoError(f, err)
		require.NotEmpty(f, files, glob)
		for _, file := range files {
			data, err := os.ReadFile(file)
			require.NoError(f, err)
			f.Add(data)
		}
	}
	f.Add([]byte("kind: List\nitems:\n- kind: RemediationRequest\n  metadata: {name: a, namespace: remediator}\n  status:\n    facts:\n      target: {ref: Node kwok-node-0, found: true}\n"))
	f.Add([]byte("kind: RemediationRequestList\nitems: [{kind: List, items: []}]\n"))
	f.Add([]byte("target: {ref: \"\"}\n---\ntarget: {ref: \"\"}\n"))
	f.Add([]byte("gatheredAt: yesterday\n"))
	f.Add([]byte("lease: {ageSeconds: 1e30}\n"))
	f.Add([]byte("kind: RemediationRequest\nstatus: {facts: null}\n"))
	f.Add([]byte("null\n---\n"))

	requests := []*v1alpha1.RemediationRequest{
		{Spec: v1alpha1.RemediationRequestSpec{Remediation: v1alpha1.RemediationReleaseLUKSLease, Target: v1alpha1.Target{PersistentVolume: "pvc-0b8e5d21-6c3f-4a7e-b1d9-5e2f8c4a6d30"}}},
		{Spec: v1alpha1.RemediationRequestSpec{Remediation: v1alpha1.RemediationReregisterCSIDriver, Target: v1alpha1.Target{Node: "kwok-node-0"}}},
	}
	requests[0].Namespace, requests[0].Name = "remediator", "a"
	f.Fuzz(func(t *testing.T, data []byte) {
		saved, err := readSavedFacts([]string{"-"}, &onceReader{r: bytes.NewReader(data)})
		if err != nil {
			require.Nil(t, saved)
			require.True(t, strings.HasPrefix(err.Error(), "--facts -"), "the error does not name the file: %v", err)
			return
		}
		require.NotEmpty(t, saved, "a facts file that yields neither facts nor an error")
		for _, s := range saved {
			require.NotNil(t, s.facts)
			require.NotEmpty(t, s.from)
			enc, err := json.Marshal(s.facts)
			require.NoError(t, err)
			back, err := strictFacts(enc)
			require.NoError(t, err, "saved facts do not decode from their own encoding: %s", enc)
			enc2, err := json.Marshal(back)
			require.NoError(t, err)
			require.JSONEq(t, string(enc), string(enc2))
		}
		for _, rr := range requests {
			m, err := matchSavedFacts(saved, rr)
			if err != nil {
				continue
			}
			ref := facts.TargetRef(rr.Spec.Target)
			require.True(t, m.facts.Target.Ref == ref || (len(saved) == 1 && m.facts.Target.Ref == ""),
				"facts for %q matched to a request for %q", m.facts.Target.Ref, ref)
		}
	})
}

// FuzzScanSuggestions turns fuzzed findings into the manifests scan -o yaml prints
// ("ready to commit") and reads them back as plan does: for findings about a
// PersistentVolume and a node with valid names, every manifest is a request plan
// accepts, for the finding's target, with the finding's evidence in its reason.
func FuzzScanSuggestions(f *testing.F) {
	f.Add(uint8(0), "kwok-node-1", "pvc-75a6fd7f-7aee-45e8-a5fa-d4500272528e", "Lease held for 40m", uint8(1), "kwok-node-0", "CSINode kwok-node-0 does not list csi.trident.netapp.io")
	f.Add(uint8(1), "kwok-node-0", "", "CSINode kwok-node-0 does not list csi.trident.netapp.io", uint8(2), "kwok-node-0", "2 node-plugin pods on kwok-node-0")
	f.Add(uint8(0), "n", strings.Repeat("p", 253), strings.Repeat("é", 3000), uint8(0), "n", "x")
	f.Add(uint8(1), strings.Repeat("a", 240)+"."+strings.Repeat("b", 12), "", "e", uint8(1), "m", "\x00\xff")
	f.Add(uint8(0), "n", strings.Repeat("a", 238)+"-"+strings.Repeat("b", 14), "evidence", uint8(2), "m", "")

	kinds := []string{facts.FindingStuckLease, facts.FindingDeregisteredDriver, facts.FindingOverlappingPluginPods, facts.FindingOldPluginPodOverlap}
	f.Fuzz(func(t *testing.T, kind1 uint8, node1, pv1, evidence1 string, kind2 uint8, node2, evidence2 string) {
		finding := func(kind uint8, node, pv, evidence string) (facts.Finding, bool) {
			k := kinds[int(kind)%len(kinds)]
			if len(validation.IsDNS1123Subdomain(node)) > 0 {
				return facts.Finding{}, false // kubelet registers only such node names
			}
			fd := facts.Finding{Kind: k, Node: node, Evidence: evidence}
			if k == facts.FindingStuckLease {
				if len(validation.IsDNS1123Subdomain(pv)) > 0 {
					return facts.Finding{}, false // Trident names the Lease after the PV
				}
				fd.Lease = "trident/" + pv
			}
			return fd, true
		}
		var findings []facts.Finding
		for _, a := range []struct {
			kind               uint8
			node, pv, evidence string
		}{{kind1, node1, pv1, evidence1}, {kind2, node2, pv1, evidence2}} {
			if fd, ok := finding(a.kind, a.node, a.pv, a.evidence); ok {
				findings = append(findings, fd)
			}
		}
		if len(findings) == 0 {
			return
		}
		var buf bytes.Buffer
		require.NoError(t, scan.WriteRequests(&buf, scan.SuggestedRequests(findings, "remediator")))
		inputs := planInputsOf(buf.Bytes())
		docs, err := yamlDocuments(buf.Bytes())
		require.NoError(t, err)
		for _, in := range inputs {
			require.True(t, planAccepted(in), "scan suggested a request plan refuses: %v\n%s", in.errs, buf.String())
			checkAcceptedRequest(t, in.rr, docs[in.doc-1].json)
			tg := in.rr.Spec.Target
			covered := slices.ContainsFunc(findings, func(fd facts.Finding) bool {
				if fd.Kind == facts.FindingStuckLease {
					return tg.PersistentVolume == strings.TrimPrefix(fd.Lease, "trident/")
				}
				return tg.Node == fd.Node
			})
			require.True(t, covered, "a suggested request for %+v, which no finding is about", tg)
			reason := in.rr.Spec.Reason
			require.True(t, strings.HasPrefix(reason, "remediator scan: "), "reason %q", reason)
			if utf8.ValidString(evidence1) && utf8.ValidString(evidence2) && !strings.Contains(evidence1+evidence2, "\uFFFD") {
				require.True(t, utf8.ValidString(reason) && !strings.Contains(reason, "\uFFFD"), "the reason was cut inside a character: %q", reason)
			}
		}
		require.NotEmpty(t, inputs)
	})
}
