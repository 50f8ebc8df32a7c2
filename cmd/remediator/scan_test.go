package main

import (
	"bytes"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/remediator/remediator/controllers/facts"
)

func TestSuggestedRequests(t *testing.T) {
	findings := []facts.Finding{
		{Kind: facts.FindingDeregisteredDriver, Node: "kwok-node-0", Evidence: "CSINode kwok-node-0 does not list csi.trident.netapp.io"},
		{Kind: facts.FindingOverlappingPluginPods, Node: "kwok-node-0", Evidence: "2 node-plugin pods on kwok-node-0"},
		{Kind: facts.FindingStuckLease, Node: "kwok-node-1", Lease: "trident/pvc-75a6fd7f-7aee-45e8-a5fa-d4500272528e", Evidence: "Lease held for 40m"},
	}
	var buf bytes.Buffer
	if err := writeRequests(&buf, suggestedRequests(findings, "remediator")); err != nil {
		t.Fatal(err)
	}
	docs := strings.Split(buf.String(), "\n---\n")
	if len(docs) != 2 {
		t.Fatalf("want one request per target (2), got %d:\n%s", len(docs), buf.String())
	}
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
	if err := yaml.UnmarshalStrict([]byte(docs[0]), &csi); err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict([]byte(docs[1]), &lease); err != nil {
		t.Fatal(err)
	}
	if csi.APIVersion != "remediator.io/v1alpha1" || csi.Kind != "RemediationRequest" {
		t.Errorf("type = %s %s", csi.APIVersion, csi.Kind)
	}
	if csi.Metadata.Name != "reregister-csi-kwok-node-0" || csi.Spec.Target["node"] != "kwok-node-0" ||
		!strings.Contains(csi.Spec.Reason, "does not list") || !strings.Contains(csi.Spec.Reason, "2 node-plugin pods") {
		t.Errorf("csi request = %+v", csi)
	}
	if lease.Spec.Remediation != "release-luks-lease" || lease.Spec.Target["persistentVolume"] != "pvc-75a6fd7f-7aee-45e8-a5fa-d4500272528e" ||
		lease.Metadata.Namespace != "remediator" || !strings.HasPrefix(lease.Spec.Reason, "remediator scan: Lease held") {
		t.Errorf("lease request = %+v", lease)
	}
}
