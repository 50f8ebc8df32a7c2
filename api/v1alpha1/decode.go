package v1alpha1

import (
	"encoding/json"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	kjson "sigs.k8s.io/json"
)

// AnnotationUndecodable marks a request that RemediationRequestList's decode could
// not hold in the Go type; its value is why. The key is not a valid annotation key
// (it has spaces), so the API server never stores it: no object read from it carries
// it but one this decode made, and an update of the whole object is refused. A patch
// computed from such a request leaves its annotations alone, so DecodeError is what
// keeps it from being written: check it before deciding on or writing a request.
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
	if kjson.UnmarshalCaseSensitivePreserveInts(data, &meta) == nil {
		rr.ObjectMeta = meta.Metadata
	} else {
		// The API server validates metadata, so this is a stored object it did not
		// write: keep what identifies it, else the list fails.
		var id struct {
			Metadata struct {
				Name            string    `json:"name"`
				Namespace       string    `json:"namespace"`
				UID             types.UID `json:"uid"`
				ResourceVersion string    `json:"resourceVersion"`
			} `json:"metadata"`
		}
		if err := kjson.UnmarshalCaseSensitivePreserveInts(data, &id); err != nil {
			return err
		}
		m := id.Metadata
		rr.Name, rr.Namespace, rr.UID, rr.ResourceVersion = m.Name, m.Namespace, m.UID, m.ResourceVersion
	}
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
