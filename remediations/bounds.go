package remediations

// Bounds on a playbook: which answers of the API server end a step at once, and
// how long a restore may keep failing before the request gives up on it.

import (
	"errors"
	"fmt"
	"net/http"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// Condition reasons of the bounds. They live here, not in api/v1alpha1, because
// only the runner and the controller's restore give them.
const (
	// ReasonWriteRefused: the API server refused a step's write for good (admission,
	// RBAC, validation), so the step failed without retrying.
	ReasonWriteRefused = "WriteRefused"
	// ReasonRestoreFailed: the restore (the uncordon) kept failing past its bound, or
	// was refused; the node it names stays cordoned.
	ReasonRestoreFailed = "RestoreFailed"
)

// FieldManager is the field manager of every write the steps make to a node. It is
// set explicitly, not derived from the binary's name, because uncordon tells its
// own cordon from one someone else asserted by the managers of spec.unschedulable
// (see CordonAssertedBy).
const FieldManager = "remediator"

// refusedForGood reports whether err is an API server answer that retrying cannot
// change: a 4xx other than 408 Request Timeout, 409 Conflict (an optimistic lock or
// a precondition, judged by the caller), 429 Too Many Requests (a
// PodDisruptionBudget, or load shedding) and 401 Unauthorized (the controller's own
// token, which client-go re-reads when it is rotated). What is left is a refusal by
// admission (a ValidatingAdmissionPolicy, a webhook: 400, 403, 422), by RBAC (403),
// or a 404 for an object the write needed. A caller that counts NotFound as success
// (a delete) handles it before asking.
func refusedForGood(err error) bool {
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

// RefusedForGood reports whether err is an API server refusal that retrying cannot
// change (see refusedForGood), for the controller's own writes around a playbook.
func RefusedForGood(err error) bool { return refusedForGood(err) }

// writeFailed wraps a write's error: a refusal for good ends the playbook at once
// (a Failure with the API server's message), anything else is retried within the
// step's timeout.
func writeFailed(err error, format string, args ...any) error {
	what := fmt.Sprintf(format, args...)
	if refusedForGood(err) {
		return &Failure{Reason: ReasonWriteRefused, cause: err,
			Message: fmt.Sprintf("%s: the API server refused the write, so it is not retried: %v", what, err)}
	}
	return fmt.Errorf("%s: %w", what, err)
}

// RestoreFailure is the restore given up: the uncordon was refused for good, or
// kept failing for longer than the step timeout since the first attempt. The
// request ends Failed naming the node, which stays cordoned with this request's
// mark; the sweeper uncordons it once the request is finished and the API server
// lets it.
type RestoreFailure struct {
	Node    string
	Message string
}

func (f *RestoreFailure) Error() string { return f.Message }

// IsRestoreFailure reports whether err is a restore given up.
func IsRestoreFailure(err error) (*RestoreFailure, bool) {
	var f *RestoreFailure
	ok := errors.As(err, &f)
	return f, ok
}
