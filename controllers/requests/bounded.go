package requests

// Bounds on every string the controller writes about a request. Part of it comes
// from outside (an annotation, an API server's error, a holderIdentity, a policy's
// message), and one value over an API server limit makes the whole status write fail
// with 422, every time: the journal would never advance, and a running playbook
// would hold its slot for good. So each runnable bounds its status write
// (BoundStatus) and its Event recorder (BoundEvents) in one place; no call site has
// to remember to.

import (
	"fmt"
	"reflect"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/record"

	"github.com/remediator/remediator/api/v1alpha1"
	"github.com/remediator/remediator/policies"
)

const (
	// MaxConditionMessage is metav1.Condition's limit on a message (the CRD's maxLength).
	MaxConditionMessage = 32768
	// MaxStatusString bounds every string in a request's status: a policy's longest
	// message with what the controller adds is kept whole, a condition message stays
	// well under MaxConditionMessage, and a status stays far from etcd's limit.
	MaxStatusString = policies.MaxMessageLength + 4096
	// MaxEventMessage bounds an Event's message: events.k8s.io/v1 refuses a note over
	// 1024 bytes, and client-go prefixes eventAggregatedPrefix when it folds Events.
	MaxEventMessage = 1024 - len(eventAggregatedPrefix)
)

// eventAggregatedPrefix is client-go's EventAggregator's (tools/record, events_cache.go).
const eventAggregatedPrefix = "(combined from similar events): "

// Bound returns s cut at a character boundary to at most limit bytes (for a limit
// longer than the marker), with a marker saying how much was cut.
func Bound(s string, limit int) string {
	if len(s) <= limit {
		return s
	}
	// The marker is sized for the most that could be cut, so that the count it
	// finally shows (never more digits) keeps the result within limit.
	keep := max(limit-len(cutMarker(len(s))), 0)
	for keep > 0 && !utf8.RuneStart(s[keep]) {
		keep--
	}
	return s[:keep] + cutMarker(len(s)-keep)
}

func cutMarker(n int) string { return fmt.Sprintf("… (%d bytes cut)", n) }

// BoundStatus bounds every string of st to MaxStatusString. It walks the whole
// status, so that a field added later is bounded too. Bounding again changes
// nothing, so a status read back compares equal to the one computed again.
func BoundStatus(st *v1alpha1.RemediationRequestStatus) {
	boundStrings(reflect.ValueOf(st).Elem(), MaxStatusString)
}

func boundStrings(v reflect.Value, limit int) {
	switch v.Kind() {
	case reflect.Pointer:
		if !v.IsNil() {
			boundStrings(v.Elem(), limit)
		}
	case reflect.Struct:
		for i := range v.NumField() {
			// Unexported fields (time.Time's) are not the API's and cannot be set.
			if f := v.Field(i); f.CanSet() {
				boundStrings(f, limit)
			}
		}
	case reflect.Slice, reflect.Array:
		for i := range v.Len() {
			boundStrings(v.Index(i), limit)
		}
	case reflect.Map:
		// Map values are not addressable: each is bounded in a copy and put back.
		iter := v.MapRange()
		for iter.Next() {
			val := reflect.New(iter.Value().Type()).Elem()
			val.Set(iter.Value())
			boundStrings(val, limit)
			v.SetMapIndex(iter.Key(), val)
		}
	case reflect.String:
		if v.Len() > limit {
			v.SetString(Bound(v.String(), limit))
		}
	}
}

// boundedRecorder bounds the message of every Event it records to MaxEventMessage.
type boundedRecorder struct {
	record.EventRecorder
}

// BoundEvents returns rec recording bounded messages; nil and a bounded rec are kept.
func BoundEvents(rec record.EventRecorder) record.EventRecorder {
	if _, ok := rec.(boundedRecorder); ok || rec == nil {
		return rec
	}
	return boundedRecorder{rec}
}

func (b boundedRecorder) Event(obj runtime.Object, eventtype, reason, message string) {
	b.EventRecorder.Event(obj, eventtype, reason, Bound(message, MaxEventMessage))
}

func (b boundedRecorder) Eventf(obj runtime.Object, eventtype, reason, messageFmt string, args ...any) {
	b.Event(obj, eventtype, reason, fmt.Sprintf(messageFmt, args...))
}

func (b boundedRecorder) AnnotatedEventf(obj runtime.Object, annotations map[string]string, eventtype, reason, messageFmt string, args ...any) {
	b.EventRecorder.AnnotatedEventf(obj, annotations, eventtype, reason, "%s", Bound(fmt.Sprintf(messageFmt, args...), MaxEventMessage))
}
