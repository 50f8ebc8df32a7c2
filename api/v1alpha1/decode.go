package v1alpha1

import (
	"encoding/json"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kjson "sigs.k8s.io/json"
)

// AnnotationUndecodable marks a request that RemediationRequestList's decode could
// not hold in the Go type; its value is why. The key is not a valid annotation key
// (it has spaces), so the API server never stores it: no object can carry it but one
// this decode made, and a write of such an object is refused.
const AnnotationUndecodable = "remediator.io/undecodable (never stored)"

// UnmarshalJSON decodes each item apart. An item the Go type cannot hold (an
// overflowing duration, a field of another type under a CRD without its schema)
// keeps its metadata, what of its status can be decoded (else its phase), and
// AnnotationUndecodable. A list decoded in one go fails on one such item, and an
// informer whose list fails never syncs: one request nobody can fix from the
// controller's side would stop every other from being decided.
func (l *RemediationRequestList) UnmarshalJSON(data []byte) error {
	var raw struct {
		metav1.TypeMeta
		metav1.ListMeta `json:"metadata,omitempty"`
		Items           []json.RawMessage `json:"items"`
	}
	if err := kjson.UnmarshalCaseSensitivePreserveInts(data, &raw); err != nil {
		return err
	}
	l.TypeMeta, l.ListMeta, l.Items = raw.TypeMeta, raw.ListMeta, nil
	if raw.Items != nil {
		l.Items = make([]RemediationRequest, len(raw.Items))
	}
	for i, item := range raw.Items {
		if err := decodeItem(item, &l.Items[i]); err != nil {
			return fmt.Errorf("decoding item %d of a RemediationRequestList: %w", i, err)
		}
	}
	return nil
}

// decodeItem decodes one request into rr, or what of it can be decoded, marked.
func decodeItem(data []byte, rr *RemediationRequest) error {
	err := kjson.UnmarshalCaseSensitivePreserveInts(data, rr)
	if err == nil {
		return nil
	}
	why := err.Error()
	*rr = RemediationRequest{}
	var meta struct {
		Metadata metav1.ObjectMeta `json:"metadata"`
	}
	if err := kjson.UnmarshalCaseSensitivePreserveInts(data, &meta); err != nil {
		return err
	}
	rr.ObjectMeta = meta.Metadata
	_ = kjson.UnmarshalCaseSensitivePreserveInts(data, &rr.TypeMeta)
	var status struct {
		Status RemediationRequestStatus `json:"status"`
	}
	var phase struct {
		Status struct {
			Phase Phase `json:"phase"`
		} `json:"status"`
	}
	switch {
	case kjson.UnmarshalCaseSensitivePreserveInts(data, &status) == nil:
		rr.Status = status.Status
	case kjson.UnmarshalCaseSensitivePreserveInts(data, &phase) == nil:
		rr.Status.Phase = phase.Status.Phase
	}
	metav1.SetMetaDataAnnotation(&rr.ObjectMeta, AnnotationUndecodable, why)
	return nil
}

// DecodeError is why a request could not be decoded (AnnotationUndecodable), nil for
// any other. Such a request is only what of it could be decoded: nothing may be
// decided on it, and it must never be written.
func (r *RemediationRequest) DecodeError() error {
	why, ok := r.Annotations[AnnotationUndecodable]
	if !ok {
		return nil
	}
	return fmt.Errorf("decoding RemediationRequest %s/%s: %s", r.Namespace, r.Name, why)
}
