// Package failpoint owns the crash points of the chaos campaign (make chaos, R1):
// the boundaries of a step where a test build can kill the process, so that a
// restart is tested where a real crash can fall.
//
// Only a binary built with -tags failpoints honours them; in every other build
// Inject is empty and REMEDIATOR_FAILPOINTS is ignored, so a release image cannot be
// made to crash itself by an environment variable. The variable holds
// comma-separated name=kill pairs (SIGKILL: no deferred function, no status write,
// no leader-election release); a name applies to every request, on its first hit:
//
//	REMEDIATOR_FAILPOINTS=deleteLease/after-call=kill
package failpoint

// Env is the environment variable a failpoints build reads.
const Env = "REMEDIATOR_FAILPOINTS"

// The boundaries of a step at which a crash is injected. A point's name is
// "<step>/<boundary>", for example "cordon/before-call".
const (
	// AfterJournal: the status write that journaled the step's start returned.
	AfterJournal = "after-journal"
	// BeforeCall: the step's preconditions were checked; its API call is next.
	BeforeCall = "before-call"
	// AfterCall: the step's API call returned; its outcome is not journaled yet.
	AfterCall = "after-call"
)

// Restore names the points of the restore (Restore's uncordon): "restore/before-call",
// "restore/after-call", and "restore/before-finalizer-release", after its journal
// write and before the finalizer goes.
const (
	Restore                = "restore"
	BeforeFinalizerRelease = "before-finalizer-release"
)

// Boundaries lists the boundaries in the order a step passes them.
var Boundaries = []string{AfterJournal, BeforeCall, AfterCall}

// Name is the failpoint name of a step's boundary.
func Name(step, boundary string) string { return step + "/" + boundary }
