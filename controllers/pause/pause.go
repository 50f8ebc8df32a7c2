// Package pause is the stop button as the controller reads it: the pause ConfigMap
// and what it says (State); package pausewatcher reports it. Stopping is always
// safe, so it is the one write that needs no pull request: `kubectl remediator pause
// --reason ...` writes the ConfigMap (the chart's admission policy lets only the
// on-call groups write it, and only with their own user name in it). While it says
// paused, no playbook starts (a decision that would start one waits with reason
// Paused, and admission grants no slot) and a running playbook holds where it is
// (remediations.Gate, ActionHold): no step starts, and a running one neither checks,
// acts nor times out, its paused time journaled so that on the resume it goes on
// with the time it had left. It keeps what it changed: a cordoned node stays
// cordoned until the resume. Resuming wakes every held request.
package pause

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	"github.com/remediator/remediator/api/v1alpha1"
)

// DefaultConfigMap is where the pause ConfigMap is looked for unless
// --pause-configmap says otherwise (the chart sets it to its release's namespace).
var DefaultConfigMap = types.NamespacedName{Namespace: "remediator-system", Name: v1alpha1.PauseConfigMap}

// State is what the pause ConfigMap says.
type State struct {
	Paused     bool
	Reason, By string
	At         time.Time
}

// Message is what a held request says, or "" when not paused.
func (p State) Message() string {
	if !p.Paused {
		return ""
	}
	return fmt.Sprintf("Remediator is paused by %s since %s: %q. No playbook and no step starts, and a running step neither acts nor times out, until `kubectl remediator resume`; what a running playbook changed stays as it is.",
		OrUnknown(p.By), p.At.UTC().Format(time.RFC3339), p.Reason)
}

// OrUnknown names who paused or resumed: s, or "an unknown user" when empty.
func OrUnknown(s string) string {
	if s == "" {
		return "an unknown user"
	}
	return s
}

// Read reads the pause ConfigMap. A ConfigMap that cannot be read holds every
// request (fail closed: the one thing a read error must not do is let a paused
// controller act); one that does not exist means not paused.
func Read(ctx context.Context, c client.Reader, key types.NamespacedName) State {
	if key.Name == "" {
		return State{}
	}
	cm := &corev1.ConfigMap{}
	switch err := c.Get(ctx, key, cm); {
	case apierrors.IsNotFound(err):
		return State{}
	case err != nil:
		return State{Paused: true, By: "the controller", Reason: fmt.Sprintf("the pause ConfigMap %s cannot be read (%v)", key, err), At: time.Now()}
	}
	p := State{Paused: cm.Data[v1alpha1.PauseKeyPaused] == "true", Reason: cm.Data[v1alpha1.PauseKeyReason], By: cm.Data[v1alpha1.PauseKeyBy],
		At: cm.CreationTimestamp.Time}
	if t, err := time.Parse(time.RFC3339, cm.Data[v1alpha1.PauseKeyAt]); err == nil {
		p.At = t
	}
	return p
}

// IsObject passes the pause ConfigMap's events only.
func IsObject(key types.NamespacedName) predicate.Funcs {
	return predicate.NewPredicateFuncs(func(o client.Object) bool {
		return o.GetNamespace() == key.Namespace && o.GetName() == key.Name
	})
}
