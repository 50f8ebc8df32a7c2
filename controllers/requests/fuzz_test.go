package requests

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	kjson "sigs.k8s.io/json"
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
// (JSON items of a RemediationRequestList, which its informer and its live lists
// decode) and checks that nothing a stored object can hold stops the controller:
// the list decodes whenever the item's metadata does (the API server validates
// metadata); a request the Go type cannot hold is marked, its DecodeError names it,
// and the guards' view of it keeps its name and its status.phase, so that a Running
// request still holds its node; a decoded request is what a strict decode gives,
// decodes again from its own encoding to the same encoding, and its maintenance
// window evaluates (MaintenanceWindow, as the decision and the stop check call it)
// without panicking, to an error or to an answer consistent with its bounds.
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
		rr, err := decodeItem(data)
		if err != nil {
			md, _ := obj["metadata"].(map[string]any)
			require.False(t, metadataDecodes(md), "a list failed on an item whose metadata decodes: %v", err)
			return
		}
		if derr := rr.DecodeError(); derr != nil {
			require.True(t, strings.HasPrefix(derr.Error(), "decoding RemediationRequest "+rr.Namespace+"/"+rr.Name+": "), "the error does not name the request: %v", derr)
			require.Error(t, kjson.UnmarshalCaseSensitivePreserveInts(data, &v1alpha1.RemediationRequest{}), "a decodable request was marked")
			if phase, ok, _ := unstructured.NestedString(obj, "status", "phase"); ok {
				require.Equal(t, v1alpha1.Phase(phase), rr.Status.Phase, "the guards lost the phase of an undecodable request")
			}
			if md, ok := obj["metadata"].(map[string]any); ok {
				if name, ok := md["name"].(string); ok {
					require.Equal(t, name, rr.Name, "the guards lost the name of an undecodable request")
				}
			}
			require.Empty(t, rr.Spec, "an undecodable request kept part of a spec")
			return
		}
		strict := &v1alpha1.RemediationRequest{}
		require.NoError(t, kjson.UnmarshalCaseSensitivePreserveInts(data, strict))
		require.Equal(t, strict, rr, "a decodable item is not the request")
		require.NotContains(t, rr.Annotations, v1alpha1.AnnotationUndecodable)

		// The decoded request survives its own encoding: the controller patches status
		// from it, and reads back what it wrote.
		e1, err := json.Marshal(rr)
		require.NoError(t, err)
		again, err := decodeItem(e1)
		require.NoError(t, err)
		require.NoError(t, again.DecodeError(), "a decoded request does not decode from its own encoding")
		e2, err := json.Marshal(again)
		require.NoError(t, err)
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

// decodeItem decodes data as the one item of a RemediationRequestList.
func decodeItem(data []byte) (*v1alpha1.RemediationRequest, error) {
	list := &v1alpha1.RemediationRequestList{}
	if err := json.Unmarshal([]byte(`{"items":[`+string(data)+`]}`), list); err != nil {
		return nil, err
	}
	if len(list.Items) != 1 {
		return nil, fmt.Errorf("%d items decoded from one", len(list.Items))
	}
	return &list.Items[0], nil
}

// metadataDecodes reports whether the object's metadata alone decodes, which is all
// a list needs to keep an item.
func metadataDecodes(md map[string]any) bool {
	data, err := json.Marshal(md)
	if err != nil {
		return false
	}
	return kjson.UnmarshalCaseSensitivePreserveInts(data, &metav1.ObjectMeta{}) == nil
}
