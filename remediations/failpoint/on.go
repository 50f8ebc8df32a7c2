//go:build failpoints

package failpoint

import (
	"fmt"
	"os"
	"strings"
	"syscall"
)

// Enabled is true: this build honours REMEDIATOR_FAILPOINTS.
const Enabled = true

// armed is read once at start-up, like a flag.
var armed = parse(os.Getenv(Env))

func parse(v string) map[string]string {
	out := map[string]string{}
	for _, kv := range strings.Split(v, ",") {
		name, action, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok || name == "" {
			continue
		}
		out[name] = action
	}
	return out
}

// Inject kills the process if name is armed with kill, saying so on stderr first.
func Inject(name string) {
	if armed[name] != "kill" {
		return
	}
	fmt.Fprintf(os.Stderr, "failpoint %s: SIGKILL\n", name)
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {} // the signal is delivered asynchronously; never run past the point
}
