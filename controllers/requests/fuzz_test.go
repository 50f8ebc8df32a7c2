package requests

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"sigs.k8s.io/yaml"

	"github.com/remediator/remediator/api/v1alpha1"
	"github.com/remediator/remediator/remediations"
)

// fuzzTimes are the clocks a decoded request's maintenance window is evaluated at:
// an ordinary night, a leap day, the ends of the range a metav1.Time can carry.
var fuzzTimes = []time.Time{
	time.Date(2026, 11, 19, 2, 30, 0, 0, time.UTC),
	time.Date(2028, 2, 29, 23, 59, 59, 0, time.UTC),
	time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC),
	time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC),
}

// FuzzDecodeRequest decodes objects as the controller reads them from the API server
// (an unstructured RemediationRequest, numbers as int64 or float64) and checks that
// nothing a stored object can hold stops the controller: Decode, GuardView and
// ViewOf never panic; ViewOf gives GuardView's view, decoded or remembered; an error
// names the request; a decoded request keeps the object's
// identity, decodes again from its own encoding to the same encoding, and its
// maintenance window evaluates (MaintenanceWindow, as the decision and the stop check
// call it) without panicking, to an error or to an answer consistent with its
// bounds; and the guards' view of a request whose spec cannot be decoded keeps its
// name and its status.phase, so that a Running request still holds its node.
func FuzzDecodeRequest(f *testing.F) {
	var seeds []string
	for _, glob := range []string{"../../examples/requests/*.yaml", "../../examples/remediation-repo/examples/requests/*.yaml", "../../internal/cmd/plan/testdata/plan/*.yaml"} {
		files, err := filepath.Glob(glob)
		require.NoError(f, err)
		require.NotEmpty(f, files, glob)
		for _, file := range files {
			data, err := os.ReadFile(file)
			require.NoError(f, err)
			// The first document of each file, as JSON (the API server stores JSON).
			doc := strings.SplitN(string(data), "\n---", 2)[0]
			j, err := yaml.YAMLToJSON([]byte(doc))
			if err == nil {
				seeds = append(seeds, string(j))
			}
		}
	}
	const base = `{"apiVersion":"remediator.io/v1alpha1","kind":"RemediationRequest","metadata":{"name":"r","namespace":"remediator","uid":"u-1","resourceVersion":"7","generation":2,"creationTimestamp":"2026-11-19T06:30:00Z"},`
	seeds = append(seeds,
		base+`"spec":{"remediation":"release-luks-lease","target":{"persistentVolume":"pvc-1"},"reason":"Lease held by a dead node","maintenanceWindow":{"schedule":"CRON_TZ=Europe/Berlin 0 2 * * *","duration":"2h"}},"status":{"phase":"Running","steps":[{"name":"cordon","state":"Succeeded","startedAt":"2026-11-19T06:31:00Z"}]}}`,
		base+`"spec":{"remediation":"release-luks-lease","target":{"persistentVolume":"pvc-1"},"reason":"Lease held by a dead node","maintenanceWindow":{"schedule":"0 2 * * *","duration":"9999999999h"}},"status":{"phase":"Running"}}`,
		base+`"spec":{"remediation":"release-luks-lease","target":{"persistentVolume":"pvc-1"},"reason":"Lease held by a dead node","maintenanceWindow":{"schedule":"@every 1h","duration":"30m"}},"status":{"phase":"Waiting"}}`,
		base+`"spec":{"remediation":"release-luks-lease","target":{"persistentVolume":"pvc-1"},"reason":"Lease held by a dead node","maintenanceWindow":{"schedule":"0 2 30 2 *","duration":"2h"}}}`,
		base+`"spec":{"remediation":"release-luks-lease","target":"pvc-1"},"status":{"phase":"Running","steps":"cordon"}}`,
		base+`"spec":{"remediation":7,"fencing":{"confirmed":"yes"}},"status":{"phase":"Running","decision":{"decidedAt":"yesterday"}}}`,
		`{"apiVersion":"remediator.io/v1alpha1","kind":"RemediationRequest","metadata":{"name":["r"]},"status":{"phase":"Running"}}`,
		`{"apiVersion":"remediator.io/v1alpha1","kind":"RemediationRequest","metadata":{"name":"r","creationTimestamp":"not a time"},"spec":{},"status":{"phase":"Running"}}`,
		`{"metadata":{"name":"r"},"status":{"phase":5,"facts":{"gatheredAt":null,"lease":{"ageSeconds":1e300}}}}`,
	)
	for _, s := range seeds {
		f.Add([]byte(s))
	}

	f.Fuzz(func(t *testing.T, data []byte) {
		var obj map[string]any
		if err := utiljson.Unmarshal(data, &obj); err != nil || obj == nil {
			return // the API server stores only JSON objects
		}
		u := &unstructured.Unstructured{Object: obj}
		u.SetGroupVersionKind(GVK)

		view := GuardView(u)
		// ViewOf gives the same view, decoded or remembered. The seeds and the
		// fuzzer give different objects the same UID and resourceVersion, which
		// the API server never does, so each input starts and ends unremembered.
		key := viewKey{uid: u.GetUID(), rv: u.GetResourceVersion()}
		views.Remove(key)
		require.Equal(t, view, ViewOf(u), "ViewOf decoding")
		require.Equal(t, view, ViewOf(u), "ViewOf remembering")
		views.Remove(key)
		rr, err := Decode(u)
		if err != nil {
			require.Nil(t, rr)
			require.True(t, strings.HasPrefix(err.Error(), "decoding RemediationRequest "+u.GetNamespace()+"/"+u.GetName()+": "), "the error does not name the request: %v", err)
			if phase, ok, _ := unstructured.NestedString(u.Object, "status", "phase"); ok {
				require.Equal(t, v1alpha1.Phase(phase), view.Status.Phase, "the guards lost the phase of an undecodable request")
			}
			if md, ok := u.Object["metadata"].(map[string]any); ok {
				if name, ok := md["name"].(string); ok && metadataDecodes(md) {
					require.Equal(t, name, view.Name, "the guards lost the name of an undecodable request")
				}
			}
			return
		}
		require.Equal(t, *rr, view, "the guards' view of a decodable request is not the request")
		require.Equal(t, u.GetName(), rr.Name)
		require.Equal(t, u.GetNamespace(), rr.Namespace)
		require.Equal(t, u.GetUID(), rr.UID)
		require.Equal(t, u.GetResourceVersion(), rr.ResourceVersion)

		// The decoded request survives its own encoding: the controller patches status
		// from it, and reads back what it wrote.
		enc, err := runtime.DefaultUnstructuredConverter.ToUnstructured(rr)
		require.NoError(t, err)
		again, err := Decode(&unstructured.Unstructured{Object: enc})
		require.NoError(t, err, "a decoded request does not decode from its own encoding")
		enc2, err := runtime.DefaultUnstructuredConverter.ToUnstructured(again)
		require.NoError(t, err)
		e1, _ := json.Marshal(enc)
		e2, _ := json.Marshal(enc2)
		require.JSONEq(t, string(e1), string(e2), "encoding a decoded request is not stable")

		w := rr.Spec.MaintenanceWindow
		for _, now := range fuzzTimes {
			inside, next, err := remediations.MaintenanceWindow(w, now)
			switch {
			case err != nil:
				require.False(t, inside, "an invalid window reads as open")
				require.NotNil(t, w)
			case w == nil:
				require.True(t, inside, "a request without a window is always inside")
			default:
				require.Positive(t, w.Duration.Duration)
				require.LessOrEqual(t, w.Duration.Duration, remediations.MaxWindowDuration)
				if !inside {
					require.True(t, next.After(now), "a closed window opens at %s, not after %s", next, now)
				}
			}
		}
	})
}

// metadataDecodes reports whether the object's metadata alone decodes, which is what
// GuardView needs to keep the name.
func metadataDecodes(md map[string]any) bool {
	rr := v1alpha1.RemediationRequest{}
	return runtime.DefaultUnstructuredConverter.FromUnstructured(map[string]any{"metadata": md}, &rr) == nil
}
