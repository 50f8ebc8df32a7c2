package remediations

// Bounds on a playbook: which API server answers end a step at once, and when a
// restore is given up.

import (
	"errors"
	"fmt"
	"net/http"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// Condition reasons of the bounds.
const (
	// ReasonWriteRefused: the API server refused a step's write for good (admission,
	// RBAC, validation), so the step failed without retrying.
	ReasonWriteRefused = "WriteRefused"
	// ReasonRestoreFailed: the restore (the uncordon) kept failing past its bound, or
	// was refused; the node it names stays cordoned.
	ReasonRestoreFailed = "RestoreFailed"
)

// FieldManager is the field manager of every write through the controller's
// client (Events and the leader-election Lease use clients of their own), fixed because uncordon tells its own cordon from another's by
// the managers of spec.unschedulable (CordonAssertedBy), and so that a request's
// status entries keep their manager whatever the binary is called.
const FieldManager = "remediator"

// RefusedForGood reports whether err is an API server answer that retrying cannot
// change: a 4xx other than 408, 409 (an optimistic lock or a precondition, judged by
// the caller), 429 (a PodDisruptionBudget, or load shedding) and 401 (a rotated
// token, which client-go re-reads). What is left is a refusal by admission or RBAC,
// or a 404 for an object the write needed; a delete handles NotFound before asking.
func RefusedForGood(err error) bool {
	var st apierrors.APIStatus
	if err == nil || !errors.As(err, &st) {
		return false
	}
	code := int(st.Status().Code)
	switch code {
	case http.StatusRequestTimeout, http.StatusConflict, http.StatusTooManyRequests, http.StatusUnauthorized:
		return false
	}
	return code >= 400 && code < 500
}

// writeFailed wraps a write's error: a refusal for good ends the playbook at once (a
// Failure), anything else is retried within the step's timeout.
func writeFailed(err error, format string, args ...any) error {
	what := fmt.Sprintf(format, args...)
	if RefusedForGood(err) {
		return &Failure{Reason: ReasonWriteRefused, cause: err,
			Message: fmt.Sprintf("%s: the API server refused the write, so it is not retried: %v", what, err)}
	}
	return fmt.Errorf("%s: %w", what, err)
}

// RestoreFailure is the restore given up (restoreFailed): the request ends Failed
// naming the node, which stays cordoned with its mark until the sweeper can
// uncordon it.
type RestoreFailure struct {
	Node    string
	Message string
}

func (f *RestoreFailure) Error() string { return f.Message }

// IsRestoreFailure reports whether err is a restore given up.
func IsRestoreFailure(err error) (*RestoreFailure, bool) {
	return errors.AsType[*RestoreFailure](err)
}
