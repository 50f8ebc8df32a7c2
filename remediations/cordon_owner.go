package remediations

// Whose cordon it is: the rule uncordon and the sweeper share.

import (
	"encoding/json"
	"slices"

	corev1 "k8s.io/api/core/v1"
)

// CordonAssertedBy names the field managers other than this controller's that own
// spec.unschedulable on n, sorted; none means the cordon is this controller's alone.
//
// The rule: the cordoned-by mark says this controller made the cordon, and the
// node's managedFields say who set spec.unschedulable since. The API server gives a
// manager ownership of a field when its write changes it, or when it applies it
// (server-side apply, even to the value it already has), and takes the ownership of
// everyone away when the field is removed (an uncordon: false is omitted). So
// another owner means someone asserted the cordon during the run: an administrator
// who uncordoned and cordoned again (kubectl uncordon, kubectl cordon), or who
// applied spec.unschedulable: true with a field manager of their own. Such a cordon
// is theirs, and uncordon leaves it. Not seen: `kubectl cordon` of a node that is
// already cordoned, which writes nothing; an administrator who wants the node to
// stay cordoned after the run removes or changes the cordoned-by annotation, which
// uncordon honours as well (leftAlone).
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

// ownsUnschedulable reports whether a managedFields entry's field set holds
// spec.unschedulable. A set that does not parse owns nothing this rule can tell.
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

// CordonOwnedByUs reports whether n carries a cordon that the request named by
// owner ("namespace/name") made and that nobody else asserted since: the only
// cordon that request's uncordon, or the sweeper, may undo.
func CordonOwnedByUs(n *corev1.Node, owner string) bool {
	return n.Spec.Unschedulable && n.Annotations[CordonedByAnnotation] == owner && len(CordonAssertedBy(n)) == 0
}
