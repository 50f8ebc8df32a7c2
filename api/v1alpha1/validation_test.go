package v1alpha1_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/remediator/remediator/test/badinput"
	"github.com/remediator/remediator/test/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, &env) }

const ns = "validation"

func ensureNamespace(t *testing.T, name string) {
	t.Helper()
	err := env.Client.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})
	if !apierrors.IsAlreadyExists(err) {
		require.NoError(t, err, "creating namespace %s", name)
	}
}

// request builds an unstructured request so that tests can send what the typed API
// could not express (unknown enum values, missing required fields).
func request(name string, spec map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
	u.SetGroupVersionKind(testenv.GVK)
	u.SetNamespace(ns)
	u.SetName(name)
	return u
}

func validSpec() map[string]any {
	return map[string]any{
		"remediation": "release-luks-lease",
		"target":      map[string]any{"persistentVolume": "pvc-75a6fd7f-7aee-45e8-a5fa-d4500272528e"},
		"reason":      "Lease held by a dead node for 40 minutes",
	}
}

// TestAdmissionRefusesBadInput applies the malformed requests of the bad-input
// campaign (test/badinput) and checks that the API server refuses each one and names
// the field that is wrong. A valid request created among them is stored as sent.
func TestAdmissionRefusesBadInput(t *testing.T) {
	ensureNamespace(t, ns)
	ctx := context.Background()
	cases := badinput.Admission()
	for i, tc := range cases {
		t.Run(tc.Name, func(t *testing.T) {
			err := createAs(ctx, env.Client, tc.Malformed(ns, fmt.Sprintf("bad-%d", i)), tc.Strict)
			require.Error(t, err, "the API server accepted %s", tc.Name)
			if len(err.Error()) < 2000 {
				t.Logf("refused: %v", err)
			}
			if tc.Strict {
				require.True(t, apierrors.IsBadRequest(err), "want a strict decoding error, got %v", err)
			} else {
				require.True(t, apierrors.IsInvalid(err), "want an Invalid error, got %v", err)
			}
			for _, w := range append([]string{tc.Field}, tc.Want...) {
				require.Contains(t, err.Error(), w, "the refusal must name what is wrong")
			}
		})
		if i == len(cases)/2 {
			// One valid request among the malformed ones is unaffected by them.
			valid := badinput.Object(ns, "valid-among-bad", badinput.ValidSpec())
			require.NoError(t, env.Client.Create(ctx, valid))
		}
	}
	got := &unstructured.Unstructured{}
	got.SetGroupVersionKind(testenv.GVK)
	require.NoError(t, env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "valid-among-bad"}, got))
	reason, _, _ := unstructured.NestedString(got.Object, "spec", "reason")
	require.Equal(t, badinput.ValidSpec()["reason"], reason)
	t.Logf("%d malformed requests refused at admission, each naming its field", len(cases))
}

// createAs creates u the way kubectl apply sends it: with strict field validation
// when strict, so that an unknown field is refused instead of dropped.
func createAs(ctx context.Context, c client.Client, u *unstructured.Unstructured, strict bool) error {
	var opts []client.CreateOption
	if strict {
		opts = append(opts, client.FieldValidation("Strict"))
	}
	return c.Create(ctx, u, opts...)
}

// TestUnknownFieldsAreDroppedWithoutStrictValidation documents why the unknown-field
// cases ask for strict validation: without it the API server drops the field, and a
// misspelt maintenanceWindow would be a request without a window.
func TestUnknownFieldsAreDroppedWithoutStrictValidation(t *testing.T) {
	ensureNamespace(t, ns)
	ctx := context.Background()
	for _, tc := range badinput.Admission() {
		if !tc.Strict || !strings.Contains(tc.Name, "maintenanceWindow") {
			continue
		}
		u := tc.Malformed(ns, "typo-dropped")
		require.NoError(t, env.Client.Create(ctx, u))
		_, found, _ := unstructured.NestedFieldNoCopy(u.Object, "spec", "maintenanceWindows")
		require.False(t, found, "the API server kept an unknown field")
		_, found, _ = unstructured.NestedFieldNoCopy(u.Object, "spec", "maintenanceWindow")
		require.False(t, found)
		return
	}
	require.FailNow(t, "no maintenanceWindow typo case in the table")
}

func TestAdmissionAcceptsValidInput(t *testing.T) {
	ensureNamespace(t, ns)
	ctx := context.Background()
	u := request("valid-defaults", validSpec())
	require.NoError(t, env.Client.Create(ctx, u), "valid request refused")
	mode, _, _ := unstructured.NestedString(u.Object, "spec", "mode")
	assert.Equal(t, "Apply", mode, "spec.mode default")

	// The target and remediation are immutable: a different target is a new review.
	require.NoError(t, unstructured.SetNestedField(u.Object, "pvc-other", "spec", "target", "persistentVolume"))
	err := env.Client.Update(ctx, u)
	require.ErrorContains(t, err, "spec.target is immutable", "changing spec.target: want an immutability error")
}

// TestAdmissionAcceptsWindowsAndFencing: the bounds on the window and the fencing
// statement refuse only what they must.
func TestAdmissionAcceptsWindowsAndFencing(t *testing.T) {
	ensureNamespace(t, ns)
	window := func(schedule, duration string) func(map[string]any) {
		return func(s map[string]any) {
			s["maintenanceWindow"] = map[string]any{"schedule": schedule, "duration": duration}
		}
	}
	cases := []struct {
		name string
		edit func(spec map[string]any)
	}{
		{"the longest window", window("0 2 * * 6", "168h")},
		{"minutes", window("0 2 * * *", "90m")},
		{"descriptor", window("@daily", "2h")},
		{"time zone", window("CRON_TZ=Europe/Berlin 0 2 * * *", "2h")},
		{"weekdays", window("0 2 * * 1-5", "2h")},
		{"every", window("@every 1h", "30m")},
		// The pattern checks only the shape: a schedule that never fires is refused
		// when the request is decided (controllers.MaintenanceWindow), not here.
		{"never fires, refused later", window("0 2 30 2 *", "2h")},
		{"fencing names the node", func(s map[string]any) {
			s["fencing"] = map[string]any{"confirmed": true, "method": "NodeShutdown", "node": "kwok-node-2"}
		}},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			spec := validSpec()
			tc.edit(spec)
			err := env.Client.Create(context.Background(), request(fmt.Sprintf("good-%d", i), spec))
			require.NoError(t, err, "the API server refused %s", tc.name)
		})
	}
}

func TestExamplesAreAccepted(t *testing.T) {
	// The sample requests and the remediation repository template's requests.
	var files []string
	for _, dir := range []string{"requests", filepath.Join("remediation-repo", "examples", "requests")} {
		found, err := filepath.Glob(filepath.Join(testenv.Root(), "examples", dir, "*.yaml"))
		require.NoError(t, err)
		require.NotEmpty(t, found, "no examples found in examples/%s", dir)
		files = append(files, found...)
	}
	ctx := context.Background()
	for _, f := range files {
		rel, _ := filepath.Rel(filepath.Join(testenv.Root(), "examples"), f)
		t.Run(rel, func(t *testing.T) {
			data, err := os.ReadFile(f)
			require.NoError(t, err)
			u := &unstructured.Unstructured{}
			require.NoError(t, yaml.Unmarshal(data, &u.Object), "parsing")
			ensureNamespace(t, u.GetNamespace())
			require.NoError(t, env.Client.Create(ctx, u), "example refused")
		})
	}
}
