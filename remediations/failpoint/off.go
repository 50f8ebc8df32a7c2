//go:build !failpoints

package failpoint

// Enabled is false: this build ignores REMEDIATOR_FAILPOINTS.
const Enabled = false

// Inject does nothing in a build without -tags failpoints.
func Inject(string) {}
