package gitsync

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/argoproj/gitops-engine/pkg/sync/common"
	"github.com/stretchr/testify/require"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/remediator/remediator/api/v1alpha1"
)

// fuzzNamespaces are the namespaces FuzzAdmit's Syncer may sync into.
var fuzzNamespaces = []string{"remediator", "team-a"}

// FuzzAdmit feeds two manifest files of one revision to admit, the gate between Git
// and the cluster, and checks the property the package promises: a revision is
// accepted only if everything in it is a remediator.io/v1alpha1 RemediationRequest
// with a name, in an allowed namespace. It is checked twice. On what admit returns
// (which is exactly what the engine applies): kind, apiVersion, namespace and name as
// the API server will read them, the sync's annotations, no hook annotations nor
// recreating sync options, no finalizers nor owner references, and no status. And on
// the files themselves, read by an independent reader (YAML documents split on ---,
// or a JSON stream): an accepted revision holds as many objects as admit returned,
// each of them a request in an allowed namespace, so that nothing in the files was
// skipped instead of refused.
func FuzzAdmit(f *testing.F) {
	for _, glob := range []string{"../../examples/remediation-repo/examples/requests/*.yaml", "../../examples/requests/*.yaml", "../../internal/cmd/plan/testdata/plan/*.yaml"} {
		files, err := filepath.Glob(glob)
		require.NoError(f, err)
		require.NotEmpty(f, files, glob)
		for _, file := range files {
			data, err := os.ReadFile(file)
			require.NoError(f, err)
			f.Add(data, []byte{})
			f.Add(data, data) // the same request twice
		}
	}
	rr := func(ns, extra string) []byte {
		return []byte("apiVersion: remediator.io/v1alpha1\nkind: RemediationRequest\nmetadata:\n  name: release-a\n" + ns +
			"spec:\n  remediation: release-luks-lease\n  target:\n    persistentVolume: pvc-1\n  reason: Lease held by a dead node for 40 minutes\n" + extra)
	}
	f.Add(rr("", ""), rr("  namespace: team-a\n", ""))
	f.Add(rr("  namespace: kube-system\n", ""), []byte{})
	f.Add(rr("  namespace: remediator\n", "---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n"), []byte{})
	f.Add(rr("", "---\n---\n# only a comment\n"), []byte("{\"apiVersion\":\"remediator.io/v1alpha1\",\"kind\":\"RemediationRequest\",\"metadata\":{\"name\":\"b\"}}"))
	f.Add(rr("  namespace: 7\n", ""), []byte{})
	f.Add(rr("  annotations:\n    argocd.argoproj.io/hook: PreSync\n", ""), []byte{})
	f.Add(rr("  annotations:\n    argocd.argoproj.io/sync-options: Replace=true\n", ""), []byte{})
	f.Add(rr("  finalizers: [remediator.io/restore]\n", ""), []byte{})
	f.Add(rr("  finalizers: []\n  ownerReferences: null\n", ""), []byte{})
	f.Add(rr("  ownerReferences:\n  - {apiVersion: v1, kind: ConfigMap, name: owner, uid: u}\n", ""), []byte{})
	f.Add([]byte("apiVersion: remediator.io/v1beta1\nkind: RemediationRequest\nmetadata:\n  name: a\n"), []byte("kind: RemediationRequest\n"))
	f.Add([]byte("apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: Secret\n  metadata:\n    name: s\n"), []byte{})
	f.Add([]byte("{\"apiVersion\":\"remediator.io/v1alpha1\",\"kind\":\"RemediationRequest\",\"metadata\":{\"name\":\"a\"}}\n{\"apiVersion\":\"v1\",\"kind\":\"Secret\",\"metadata\":{\"name\":\"s\"}}"), []byte{})
	f.Add([]byte("- apiVersion: v1\n  kind: Secret\n"), []byte("just a string\n"))

	s := &Syncer{opts: Options{Namespaces: fuzzNamespaces}, source: "fuzz-source"}
	f.Fuzz(func(t *testing.T, a, b []byte) {
		files := []manifestFile{{Path: "requests/a.yaml", Data: a, Commit: "c1"}, {Path: "requests/b.json", Data: b, Commit: "c2"}}
		targets, err := s.admit(files, "c2")
		if err != nil {
			require.Nil(t, targets, "a refused revision still returned objects to apply")
			require.Contains(t, err.Error(), "problem(s):")
			return
		}

		keys := map[string]bool{}
		for _, o := range targets {
			obj := o.Object
			require.Equal(t, v1alpha1.GroupVersion.String(), obj["apiVersion"], "applied: %v", obj)
			require.Equal(t, "RemediationRequest", obj["kind"], "applied: %v", obj)
			md, ok := obj["metadata"].(map[string]any)
			require.True(t, ok, "applied without metadata: %v", obj)
			ns, _ := md["namespace"].(string)
			name, _ := md["name"].(string)
			require.Contains(t, fuzzNamespaces, ns, "applied into a namespace not allowed: %v", obj)
			require.NotEmpty(t, name, "applied without a name: %v", obj)
			require.False(t, keys[ns+"/"+name], "%s/%s applied twice", ns, name)
			keys[ns+"/"+name] = true
			ann := o.GetAnnotations()
			require.Equal(t, s.source, ann[AnnotationSyncSource])
			require.NotEmpty(t, ann[AnnotationGitPath])
			for _, a := range []string{common.AnnotationKeyHook, common.AnnotationKeyHookDeletePolicy, "helm.sh/hook", "helm.sh/hook-delete-policy"} {
				require.NotContains(t, ann, a)
			}
			opts := strings.ToLower(ann[common.AnnotationSyncOptions])
			require.False(t, strings.Contains(opts, "force=true") || strings.Contains(opts, "replace=true"), "sync options %q applied", opts)
			require.NotContains(t, obj, "status")
			// Finalizers and owners are the controller's and the API server's: Git
			// may not set one (an empty list or null sets nothing).
			require.Empty(t, o.GetFinalizers(), "finalizers applied: %v", obj)
			require.Empty(t, o.GetOwnerReferences(), "owner references applied: %v", obj)
			for _, f := range []string{"finalizers", "ownerReferences"} {
				if v, ok := md[f]; ok && v != nil {
					l, isList := v.([]any)
					require.True(t, isList && len(l) == 0, "metadata.%s %v applied", f, v)
				}
			}
		}

		var docs []any
		for _, file := range files {
			d, err := referenceDocuments(file.Data)
			if err != nil {
				// The reference reader cannot read what admit accepted: only the
				// check on the applied objects above applies.
				return
			}
			docs = append(docs, d...)
		}
		require.Len(t, docs, len(targets), "the files hold %d objects, admit returned %d: something was skipped instead of refused", len(docs), len(targets))
		for _, d := range docs {
			obj, ok := d.(map[string]any)
			require.True(t, ok, "a document that is not an object was accepted: %#v", d)
			require.Equal(t, v1alpha1.GroupVersion.String(), obj["apiVersion"], "accepted: %v", obj)
			require.Equal(t, "RemediationRequest", obj["kind"], "accepted: %v", obj)
			md, _ := obj["metadata"].(map[string]any)
			if ns, ok := md["namespace"].(string); ok && ns != "" {
				require.Contains(t, fuzzNamespaces, ns, "a request in a namespace not allowed was accepted: %v", obj)
			}
		}
	})
}

// referenceDocuments reads the objects of a manifest file the way kubectl's
// documentation describes the formats, independently of gitops-engine's reader: a
// stream of JSON values when the file starts with '{', YAML documents separated by
// --- otherwise; documents that are empty, null or only comments hold nothing.
func referenceDocuments(data []byte) ([]any, error) {
	var out []any
	if t := bytes.TrimSpace(data); len(t) > 0 && t[0] == '{' {
		dec := json.NewDecoder(bytes.NewReader(data))
		for {
			var v any
			if err := dec.Decode(&v); errors.Is(err, io.EOF) {
				return out, nil
			} else if err != nil {
				return nil, err
			}
			if v != nil {
				out = append(out, v)
			}
		}
	}
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		var v any
		if err := yaml.Unmarshal(doc, &v); err != nil {
			return nil, err
		}
		if v != nil {
			out = append(out, v)
		}
	}
}
