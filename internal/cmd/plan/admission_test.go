package plan

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/rest"

	"github.com/remediator/remediator/api/v1alpha1"
	"github.com/remediator/remediator/test/testenv"
)

// TestPlanAgreesWithAdmissionOnTheCorpus: plan says it "refuses what admission would
// refuse". For every document of FuzzPlanRequestFile's corpus (its seeds and the
// files under testdata/fuzz/FuzzPlanRequestFile) that claims to be a
// remediator.io RemediationRequest, the CRD's OpenAPI schema and CEL rules on a real
// API server (envtest, a server-side dry run with strict field validation, the
// document sent as the YAML it is) and plan's validation must give the same verdict:
// plan accepts exactly what admission accepts. Fuzzing runs without an API server;
// this test is what ties its corpus to admission.
func TestPlanAgreesWithAdmissionOnTheCorpus(t *testing.T) {
	env := testenv.StartT(t)
	hc, err := rest.HTTPClientFor(env.Config)
	require.NoError(t, err)
	ctx := context.Background()

	corpus := planRequestSeeds(t)
	files, err := filepath.Glob("testdata/fuzz/FuzzPlanRequestFile/*")
	require.NoError(t, err)
	for _, file := range files {
		data, err := readCorpusBytes(file)
		require.NoError(t, err, file)
		corpus = append(corpus, data)
	}

	namespaces := map[string]bool{}
	compared := 0
	for i, data := range corpus {
		inputs := planInputsOf(data)
		raw, err := rawDocuments(data)
		if err != nil {
			continue // not YAML that both can split into documents
		}
		for _, in := range inputs {
			if in.doc < 1 || in.doc > len(raw) || !claimsRequest(raw[in.doc-1]) {
				continue
			}
			doc := raw[in.doc-1]
			ns := "remediator"
			if in.rr != nil && in.rr.Namespace != "" {
				ns = in.rr.Namespace
			}
			if len(validation.IsDNS1123Label(ns)) > 0 {
				continue // plan refuses it; the URL could not even name it
			}
			if !namespaces[ns] {
				err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
				if err != nil && !apierrors.IsAlreadyExists(err) {
					require.NoError(t, err)
				}
				namespaces[ns] = true
			}
			admitted, why := dryRunCreate(t, hc, env.Config.Host, ns, doc)
			compared++
			name := fmt.Sprintf("corpus %d document %d", i, in.doc)
			if !planAccepted(in) && admitted && in.rr != nil && in.rr.Name == "" && in.rr.GenerateName != "" {
				// The one difference, on purpose: kubectl create admits a request that
				// has only generateName, but plan refuses it, as remediator sync and
				// kubectl apply do. A request in Git needs a stable name, to be synced,
				// pruned and traced back to its pull request.
				assert.Contains(t, strings.Join(in.errs, "\n"), "metadata.name: Required value: a request needs a name", name)
				continue
			}
			if planAccepted(in) {
				assert.True(t, admitted, "%s: plan accepts what admission refuses (%s):\n%s", name, why, doc)
			} else {
				assert.False(t, admitted, "%s: plan refuses what admission accepts (plan: %v):\n%s", name, in.errs, doc)
			}
		}
	}
	t.Logf("compared %d documents with admission", compared)
	require.Greater(t, compared, 100, "the corpus compared too few requests")
}

// claimsRequest reports whether a document says it is a remediator.io/v1alpha1
// RemediationRequest; others are refused by plan and would not be sent to the
// requests' endpoint by kubectl.
func claimsRequest(doc []byte) bool {
	s := string(doc)
	return strings.Contains(s, v1alpha1.GroupVersion.String()) && strings.Contains(s, "RemediationRequest")
}

// dryRunCreate sends a document to the API server as kubectl create would (YAML,
// strict field validation), as a dry run, and reports whether it was admitted.
func dryRunCreate(t *testing.T, hc *http.Client, host, ns string, doc []byte) (bool, string) {
	t.Helper()
	u := fmt.Sprintf("%s/apis/%s/namespaces/%s/remediationrequests?%s", strings.TrimSuffix(host, "/"), v1alpha1.GroupVersion, ns,
		url.Values{"dryRun": {"All"}, "fieldValidation": {"Strict"}, "fieldManager": {"plan-agreement"}}.Encode())
	req, err := http.NewRequest(http.MethodPost, u, bytes.NewReader(doc))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/yaml")
	req.Header.Set("Accept", "application/json")
	resp, err := hc.Do(req)
	require.NoError(t, err)
	defer func() {
		// The body is read to the end below; closing it has nothing left to report.
		_ = resp.Body.Close()
	}()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	switch {
	case resp.StatusCode == http.StatusCreated || resp.StatusCode == http.StatusOK:
		return true, ""
	case resp.StatusCode >= 400 && resp.StatusCode < 500:
		return false, string(body)
	}
	require.Failf(t, "the API server answered neither a success nor a client error", "status %d: %s", resp.StatusCode, body)
	return false, ""
}

// rawDocuments splits a file into its YAML documents as plan's yamlDocuments does,
// keeping each document's bytes, so that the API server is sent exactly what plan read.
func rawDocuments(data []byte) ([][]byte, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var docs [][]byte
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, err
		}
		docs = append(docs, doc)
	}
}

// readCorpusBytes reads a go test fuzz v1 file of one []byte value.
func readCorpusBytes(file string) ([]byte, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	lines := strings.SplitN(strings.TrimSpace(string(data)), "\n", 2)
	if len(lines) != 2 || lines[0] != "go test fuzz v1" {
		return nil, fmt.Errorf("%s: not a go test fuzz v1 file", file)
	}
	v := strings.TrimSpace(lines[1])
	if !strings.HasPrefix(v, "[]byte(") || !strings.HasSuffix(v, ")") {
		return nil, fmt.Errorf("%s: want one []byte value, got %q", file, v)
	}
	s, err := strconv.Unquote(strings.TrimSuffix(strings.TrimPrefix(v, "[]byte("), ")"))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	return []byte(s), nil
}
