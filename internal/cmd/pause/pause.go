// Package pause is `remediator pause` and `resume`, the stop button.
package pause

// `kubectl remediator pause` and `resume`: the stop button. Stopping is always safe,
// so it is the one write that needs no pull request. They write the pause ConfigMap
// the controller watches; the chart's admission policy lets only the on-call groups
// (pause.groups) write it, and only with their own user name as the author, which is
// why the command asks the API server who it is talking as (SelfSubjectReview).
//
// Which ConfigMap: the one the release's settings ConfigMap publishes (key
// pause-configmap), found by the chart's label in any namespace, so that a release
// with another name or namespace is paused where its controller looks, never at a
// default no controller watches. --pause-configmap names it outright.

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/remediator/remediator/api/v1alpha1"
	"github.com/remediator/remediator/internal/cmd/cmdutil"
)

// settingsLabel marks the chart's settings ConfigMap (<fullname>-settings; the
// chart's remediator.settingsLabel), whose key cmdutil.SettingPauseConfigMap names the pause
// ConfigMap the release's controller watches.
const settingsLabel = "remediator.io/settings"

// Options are the flags of pause and resume.
type Options struct {
	conn      cmdutil.ConnectionFlags
	reason    string
	configMap string
	now       func() time.Time
	// pause is true for pause, false for resume.
	pause bool
}

// NewOptions returns the options of pause (pause true) or resume.
func NewOptions(pause bool) *Options {
	return &Options{conn: cmdutil.NewConnectionFlags(false), now: time.Now, pause: pause}
}

// NewCommand returns `remediator pause`.
func NewCommand() *cobra.Command {
	return pauseCommand(true, "pause", "Stop every remediation now: no playbook and no step starts until resume",
		`pause writes the pause ConfigMap the controller watches. While it is paused, no playbook
starts (requests wait with reason Paused) and a running playbook holds before its next step,
keeping what it changed (a cordoned node stays cordoned). It needs no pull request: stopping
is always safe. Only the on-call groups the chart allows (pause.groups) may pause, and the
ConfigMap records who paused and why.`)
}

// NewResumeCommand returns `remediator resume`.
func NewResumeCommand() *cobra.Command {
	return pauseCommand(false, "resume", "Let remediations go on after a pause",
		`resume clears the pause: held playbooks go on where they held, and waiting requests
are decided again on fresh facts. The ConfigMap records who resumed and why.`)
}

func pauseCommand(pause bool, use, short, long string) *cobra.Command {
	o := NewOptions(pause)
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Long:  long,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.Validate(); err != nil {
				return err
			}
			return o.Run(cmd.Context(), cmd.OutOrStdout())
		},
	}
	f := cmd.Flags()
	o.conn.AddFlags(f, "")
	f.StringVar(&o.reason, "reason", "", "Why (required to pause); recorded in the pause ConfigMap, the controller's log and an Event")
	f.StringVar(&o.configMap, "pause-configmap", "",
		"namespace/name of the pause ConfigMap: the controller's --pause-configmap. Empty: the one the release's settings ConfigMap publishes, found by its label "+settingsLabel+" in any namespace")
	return cmd
}

// Validate refuses a pause without a reason and a malformed --pause-configmap,
// before anything is asked of the cluster.
func (o *Options) Validate() error {
	if o.pause && strings.TrimSpace(o.reason) == "" {
		return fmt.Errorf("--reason is required: say why, for the person who resumes")
	}
	if o.configMap != "" {
		if _, err := cmdutil.ParsePauseConfigMap(o.configMap); err != nil {
			return err
		}
	}
	return nil
}

// Run writes the pause ConfigMap, and says so on out.
func (o *Options) Run(ctx context.Context, out io.Writer) error {
	cfg, err := o.conn.RESTConfig()
	if err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	return writePause(ctx, out, cs, *o, o.pause)
}

// writePause finds the pause ConfigMap and writes it, in the caller's name.
func writePause(ctx context.Context, out io.Writer, cs kubernetes.Interface, o Options, pause bool) error {
	key, err := findPauseConfigMap(ctx, out, cs, o.configMap)
	if err != nil {
		return err
	}
	ns, name := key.Namespace, key.Name
	review, err := cs.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("asking the API server who you are (SelfSubjectReview): %w", err)
	}
	who := review.Status.UserInfo.Username
	data := map[string]string{
		v1alpha1.PauseKeyPaused: fmt.Sprint(pause),
		v1alpha1.PauseKeyReason: o.reason,
		v1alpha1.PauseKeyBy:     who,
		v1alpha1.PauseKeyAt:     o.now().UTC().Format(time.RFC3339),
	}
	cms := cs.CoreV1().ConfigMaps(ns)
	cm, err := cms.Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err) && !pause:
		fmt.Fprintf(out, "Remediator is not paused (no ConfigMap %s/%s); nothing to resume.\n", ns, name)
		return nil
	case apierrors.IsNotFound(err):
		_, err = cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: data}, metav1.CreateOptions{})
	case err == nil:
		cm.Data = data
		_, err = cms.Update(ctx, cm, metav1.UpdateOptions{})
	}
	if apierrors.IsForbidden(err) {
		return fmt.Errorf("%s may not %s Remediator: only the on-call groups the chart allows (value pause.groups) may write %s/%s. The API server said: %w",
			who, map[bool]string{true: "pause", false: "resume"}[pause], ns, name, err)
	}
	if err != nil {
		return fmt.Errorf("writing the pause ConfigMap %s/%s: %w", ns, name, err)
	}
	if pause {
		fmt.Fprintf(out, "Paused by %s: %s\nNo playbook and no step starts until `kubectl remediator resume`; running playbooks hold where they are, their step timeouts stopped.\n", who, o.reason)
	} else {
		fmt.Fprintf(out, "Resumed by %s. Held playbooks go on; waiting requests are decided again.\n", who)
	}
	return nil
}

// findPauseConfigMap returns the pause ConfigMap: the flag's when given, else the one
// the chart's settings ConfigMaps publish. Exactly one must be published; none or
// several is an error that names the candidates and the flag to choose with, never
// a guess: a pause written where no controller looks stops nothing.
func findPauseConfigMap(ctx context.Context, out io.Writer, cs kubernetes.Interface, flag string) (types.NamespacedName, error) {
	if flag != "" {
		return cmdutil.ParsePauseConfigMap(flag)
	}
	choose := "give --pause-configmap NAMESPACE/NAME: the release namespace's remediator-pause"
	list, err := cs.CoreV1().ConfigMaps(metav1.NamespaceAll).List(ctx, metav1.ListOptions{LabelSelector: settingsLabel + "=true"})
	if apierrors.IsForbidden(err) {
		return types.NamespacedName{}, fmt.Errorf("finding the release's pause ConfigMap: you may not list ConfigMaps in all namespaces, where the chart's settings ConfigMap (label %s) says which it is: %w; %s",
			settingsLabel, err, choose)
	}
	if err != nil {
		return types.NamespacedName{}, fmt.Errorf("finding the release's pause ConfigMap among the ConfigMaps labelled %s: %w", settingsLabel, err)
	}
	// pause ConfigMap -> the settings ConfigMaps that publish it (two releases in one
	// namespace share its pause ConfigMap).
	found := map[types.NamespacedName][]string{}
	var unreadable []string
	for _, cm := range list.Items {
		at := cm.Namespace + "/" + cm.Name
		key, err := cmdutil.ParsePauseConfigMap(cm.Data[cmdutil.SettingPauseConfigMap])
		if err != nil {
			unreadable = append(unreadable, fmt.Sprintf("%s (key %s: %q)", at, cmdutil.SettingPauseConfigMap, cm.Data[cmdutil.SettingPauseConfigMap]))
			continue
		}
		found[key] = append(found[key], at)
	}
	slices.Sort(unreadable)
	switch len(found) {
	case 1:
		for key, from := range found {
			slices.Sort(from)
			fmt.Fprintf(out, "The pause ConfigMap is %s (published by %s).\n", key, strings.Join(from, ", "))
			return key, nil
		}
	case 0:
		msg := fmt.Sprintf("no release of the chart found: no ConfigMap labelled %s=true in any namespace names the pause ConfigMap", settingsLabel)
		if len(unreadable) > 0 {
			msg += fmt.Sprintf(" (%s do not: a chart older than this command?)", strings.Join(unreadable, ", "))
		}
		return types.NamespacedName{}, fmt.Errorf("%s; %s", msg, choose)
	}
	candidates := make([]string, 0, len(found))
	for key, from := range found {
		slices.Sort(from)
		candidates = append(candidates, fmt.Sprintf("%s (published by %s)", key, strings.Join(from, ", ")))
	}
	slices.Sort(candidates)
	return types.NamespacedName{}, fmt.Errorf("%d releases of the chart found, each with its own pause ConfigMap: %s; choose one with --pause-configmap NAMESPACE/NAME",
		len(found), strings.Join(candidates, "; "))
}
