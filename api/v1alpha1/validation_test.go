package v1alpha1_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/remediator/remediator/test/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, &env) }

const ns = "validation"

func ensureNamespace(t *testing.T, name string) {
	t.Helper()
	err := env.Client.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("creating namespace %s: %v", name, err)
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

func TestAdmissionRefusesBadInput(t *testing.T) {
	ensureNamespace(t, ns)
	cases := []struct {
		name string
		edit func(spec map[string]any)
		// want are substrings the API server's message must contain, so the
		// operator is told which field is wrong.
		want []string
	}{
		{"missing reason", func(s map[string]any) { delete(s, "reason") }, []string{"spec.reason", "Required value"}},
		{"too-short reason", func(s map[string]any) { s["reason"] = "fix it" }, []string{"spec.reason", "at least 10"}},
		{"no target", func(s map[string]any) { delete(s, "target") }, []string{"spec.target", "Required value"}},
		{"empty target", func(s map[string]any) { s["target"] = map[string]any{} }, []string{"spec.target", "exactly one of"}},
		{"two targets", func(s map[string]any) {
			s["target"] = map[string]any{"persistentVolume": "pv-1", "pod": map[string]any{"namespace": "app", "name": "web-0"}}
		}, []string{"spec.target", "exactly one of"}},
		{"empty-string target", func(s map[string]any) { s["target"] = map[string]any{"persistentVolume": ""} }, []string{"spec.target.persistentVolume"}},
		{"csi remediation on a PV", func(s map[string]any) { s["remediation"] = "reregister-csi-driver" }, []string{"spec.target", "reregister-csi-driver needs spec.target.node"}},
		{"lease remediation on a node", func(s map[string]any) { s["target"] = map[string]any{"node": "kwok-node-0"} }, []string{"spec.target", "release-luks-lease needs"}},
		{"unknown remediation", func(s map[string]any) { s["remediation"] = "delete-everything" }, []string{"spec.remediation", "Unsupported value"}},
		{"missing remediation", func(s map[string]any) { delete(s, "remediation") }, []string{"spec.remediation", "Required value"}},
		{"unknown mode", func(s map[string]any) { s["mode"] = "Force" }, []string{"spec.mode", "Unsupported value"}},
		{"malformed window duration", func(s map[string]any) {
			s["maintenanceWindow"] = map[string]any{"schedule": "0 2 * * *", "duration": "two hours"}
		}, []string{"spec.maintenanceWindow.duration"}},
		// 9999999999h overflows a Go duration: it passed the pattern, then the
		// controller could not decode the request and stalled on it.
		{"overflowing window duration", func(s map[string]any) {
			s["maintenanceWindow"] = map[string]any{"schedule": "0 2 * * *", "duration": "9999999999h"}
		}, []string{"spec.maintenanceWindow.duration", "positive duration of at most 168h"}},
		{"zero window duration", func(s map[string]any) {
			s["maintenanceWindow"] = map[string]any{"schedule": "0 2 * * *", "duration": "0s"}
		}, []string{"spec.maintenanceWindow.duration", "positive duration of at most 168h"}},
		{"window duration over 168h", func(s map[string]any) {
			s["maintenanceWindow"] = map[string]any{"schedule": "0 2 * * *", "duration": "169h"}
		}, []string{"spec.maintenanceWindow.duration", "positive duration of at most 168h"}},
		{"garbage schedule", func(s map[string]any) {
			s["maintenanceWindow"] = map[string]any{"schedule": "every tuesday", "duration": "2h"}
		}, []string{"spec.maintenanceWindow.schedule", "should match"}},
		{"window without schedule", func(s map[string]any) {
			s["maintenanceWindow"] = map[string]any{"duration": "2h"}
		}, []string{"spec.maintenanceWindow.schedule", "Required value"}},
		{"fencing confirmed without method", func(s map[string]any) {
			s["fencing"] = map[string]any{"confirmed": true}
		}, []string{"spec.fencing", "spec.fencing.method is required"}},
		{"fencing confirmed without node", func(s map[string]any) {
			s["fencing"] = map[string]any{"confirmed": true, "method": "NodeShutdown"}
		}, []string{"spec.fencing", "spec.fencing.node is required"}},
		{"unknown fencing method", func(s map[string]any) {
			s["fencing"] = map[string]any{"confirmed": true, "method": "Hope"}
		}, []string{"spec.fencing.method", "Unsupported value"}},
		{"pvc target without namespace", func(s map[string]any) {
			s["target"] = map[string]any{"persistentVolumeClaim": map[string]any{"name": "data"}}
		}, []string{"spec.target.persistentVolumeClaim.namespace", "Required value"}},
		{"bad trident namespace", func(s map[string]any) { s["tridentNamespace"] = "Trident_NS" }, []string{"spec.tridentNamespace"}},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			spec := validSpec()
			tc.edit(spec)
			err := env.Client.Create(context.Background(), request(fmt.Sprintf("bad-%d", i), spec))
			if err == nil {
				t.Fatalf("the API server accepted %s", tc.name)
			}
			t.Logf("refused: %v", err)
			if !apierrors.IsInvalid(err) {
				t.Fatalf("want an Invalid error, got %v", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err.Error(), w)
				}
			}
		})
	}
}

func TestAdmissionAcceptsValidInput(t *testing.T) {
	ensureNamespace(t, ns)
	ctx := context.Background()
	u := request("valid-defaults", validSpec())
	if err := env.Client.Create(ctx, u); err != nil {
		t.Fatalf("valid request refused: %v", err)
	}
	if mode, _, _ := unstructured.NestedString(u.Object, "spec", "mode"); mode != "Apply" {
		t.Errorf("spec.mode defaulted to %q, want Apply", mode)
	}

	// The target and remediation are immutable: a different target is a new review.
	if err := unstructured.SetNestedField(u.Object, "pvc-other", "spec", "target", "persistentVolume"); err != nil {
		t.Fatal(err)
	}
	err := env.Client.Update(ctx, u)
	if err == nil || !strings.Contains(err.Error(), "spec.target is immutable") {
		t.Fatalf("changing spec.target: want an immutability error, got %v", err)
	}
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
	for _, dir := range []string{"requests", filepath.Join("remediation-repo", "requests")} {
		found, err := filepath.Glob(filepath.Join(testenv.Root(), "examples", dir, "*.yaml"))
		if err != nil || len(found) == 0 {
			t.Fatalf("no examples found in examples/%s (%v)", dir, err)
		}
		files = append(files, found...)
	}
	ctx := context.Background()
	for _, f := range files {
		rel, _ := filepath.Rel(filepath.Join(testenv.Root(), "examples"), f)
		t.Run(rel, func(t *testing.T) {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			u := &unstructured.Unstructured{}
			if err := yaml.Unmarshal(data, &u.Object); err != nil {
				t.Fatalf("parsing: %v", err)
			}
			ensureNamespace(t, u.GetNamespace())
			if err := env.Client.Create(ctx, u); err != nil {
				t.Fatalf("example refused: %v", err)
			}
		})
	}
}
