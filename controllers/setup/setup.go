// Package setup wires the request reconciler and the runnables that share its
// settings to a manager, in one place, for `remediator-controller` and the envtests
// alike: the tests run what production runs.
package setup

import (
	"fmt"

	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/remediator/remediator/controllers/admission"
	"github.com/remediator/remediator/controllers/pausewatcher"
	"github.com/remediator/remediator/controllers/remediationrequest"
	"github.com/remediator/remediator/controllers/sweeper"
	"github.com/remediator/remediator/controllers/verification"
	"github.com/remediator/remediator/controllers/wiring"
)

// Runnables sets up the request reconciler r, admission (with r's cap, namespaces,
// pause, clock and step timeout), the pause watcher, the cordon sweeper and fix
// verification v (nil: none) on mgr, whose window r opens. All but v share r's
// recorder, which r bounds.
func Runnables(mgr ctrl.Manager, r *remediationrequest.Reconciler, v *verification.Reconciler) error {
	if v != nil {
		r.FixWindow = v.Window
	}
	if err := r.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the RemediationRequest controller: %w", err)
	}
	adm := &admission.Reconciler{Reader: r.Reader, Client: r.Client, MaxConcurrent: r.MaxConcurrent, Playbooks: r.Playbooks,
		Namespaces: r.Namespaces, Recorder: r.Recorder, Clock: r.Clock, Pause: r.PauseKey(), StepTimeout: r.Timeouts.Step}
	if err := adm.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up admission: %w", err)
	}
	if err := (&pausewatcher.Watcher{Client: r.Client, Key: r.PauseKey(), Recorder: r.Recorder}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the pause watcher: %w", err)
	}
	// The sweeper lists the nodes of the cache the facts are read from.
	sw := &sweeper.Sweeper{Client: mgr.GetClient(), Reader: wiring.LiveReader(mgr), Recorder: mgr.GetEventRecorderFor("remediator")}
	if err := mgr.Add(sw); err != nil {
		return fmt.Errorf("adding the cordon sweeper: %w", err)
	}
	if v == nil {
		return nil
	}
	if err := v.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the verification of fixes: %w", err)
	}
	return nil
}
