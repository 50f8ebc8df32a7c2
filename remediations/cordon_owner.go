package remediations

import (
	"encoding/json"
	"slices"

	corev1 "k8s.io/api/core/v1"
)

// CordonAssertedBy names the field managers other than this controller's that own
// spec.unschedulable on n, sorted; none means the cordon is this controller's alone.
// The API server gives a manager the field when its write changes it or it applies
// it, and takes it from everyone when it is removed (an uncordon), so another owner
// asserted the cordon during the run (kubectl uncordon and cordon, or an apply):
// the cordon is theirs, and uncordon and the sweeper leave it. A `kubectl cordon` of
// a cordoned node writes nothing; to keep the cordon, remove the cordoned-by mark.
func CordonAssertedBy(n *corev1.Node) []string {
	var others []string
	for _, mf := range n.ManagedFields {
		if mf.Manager == FieldManager || mf.Subresource != "" || mf.FieldsV1 == nil {
			continue
		}
		if ownsUnschedulable(mf.FieldsV1.Raw) && !slices.Contains(others, mf.Manager) {
			others = append(others, mf.Manager)
		}
	}
	slices.Sort(others)
	return others
}

// ownsUnschedulable reports whether a managedFields entry's field set, when it
// parses, holds spec.unschedulable.
func ownsUnschedulable(raw []byte) bool {
	var fields struct {
		Spec map[string]json.RawMessage `json:"f:spec"`
	}
	if err := json.Unmarshal(raw, &fields); err != nil {
		return false
	}
	_, ok := fields.Spec["f:unschedulable"]
	return ok
}

// CordonOwnedByUs reports whether n carries a cordon that the request owner
// ("namespace/name") made and nobody else asserted since: the only one its uncordon,
// or the sweeper, may undo.
func CordonOwnedByUs(n *corev1.Node, owner string) bool {
	return n.Spec.Unschedulable && n.Annotations[CordonedByAnnotation] == owner && len(CordonAssertedBy(n)) == 0
}
