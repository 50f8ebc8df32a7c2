// Package pause is `remediator pause` and `resume`, the stop button.
package pause

// `kubectl remediator pause` and `resume`: the stop button. Stopping is always safe,
// so it is the one write that needs no pull request. They write the pause ConfigMap
// the controller watches; the chart's admission policy lets only the on-call
// (pause.groups, pause.users, pause.serviceAccounts) write it, and only with their own
// user name as the author, which is why the command asks the API server who it is
// talking as (SelfSubjectReview).
//
// Which ConfigMap: the one the release's settings ConfigMap publishes (key
// pause-configmap), found by the chart's label in any namespace, or only in the
// release namespace -n, so that a release with another name or namespace is paused
// where its controller looks, never at a default no controller watches. -n is
// kubectl's flag, as for plan and scan, and lets whoever may read ConfigMaps only in
// the release namespace find it. --pause-configmap names it outright.

import (
	"cmp"
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
	// namespace is -n, the release namespace where the settings ConfigMap is looked
	// for; empty: every namespace.
	namespace string
	now       func() time.Time
	// pause is true for pause, false for resume.
	pause bool
}

// NewOptions returns the options of pause (pause true) or resume.
func NewOptions(pause bool) *Options {
	return &Options{conn: cmdutil.NewConnectionFlags(true), now: time.Now, pause: pause}
}

// NewCommand returns `remediator pause`.
func NewCommand() *cobra.Command {
	return pauseCommand(true, "pause", "Stop every remediation now: no playbook and no step starts until resume",
		`pause writes the pause ConfigMap the controller watches. While it is paused, no playbook
starts (requests wait with reason Paused) and a running playbook holds before its next step,
keeping what it changed (a cordoned node stays cordoned). It needs no pull request: stopping
is always safe. Only the on-call the chart allows (its values pause.groups, pause.users and
pause.serviceAccounts) may pause, and the ConfigMap records who paused and why; a refusal
says how to get the right.

The pause ConfigMap is the one the release's settings ConfigMap names, found in every
namespace or, with -n, in the release namespace only; --pause-configmap names it outright.`)
}

// NewResumeCommand returns `remediator resume`.
func NewResumeCommand() *cobra.Command {
	return pauseCommand(false, "resume", "Let remediations go on after a pause",
		`resume clears the pause: held playbooks go on where they held, and waiting requests
are decided again on fresh facts. The ConfigMap records who resumed and why. It finds the
pause ConfigMap as pause does (-n, --pause-configmap).`)
}

func pauseCommand(pause bool, use, short, long string) *cobra.Command {
	return newCommand(NewOptions(pause), use, short, long)
}

// newCommand is pause or resume (o.pause) with the options o.
func newCommand(o *Options, use, short, long string) *cobra.Command {
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Long:  long,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.Complete()
			if err := o.Validate(); err != nil {
				return cmdutil.Usage(err)
			}
			return o.Run(cmd.Context(), cmd.OutOrStdout())
		},
	}
	f := cmd.Flags()
	o.conn.AddFlags(f, "")
	f.Lookup("namespace").Usage = "The release namespace (helm install -n): look for its settings ConfigMap, which names the pause ConfigMap, there only. Empty: in every namespace"
	f.StringVar(&o.reason, "reason", "", "Why (required to pause); recorded in the pause ConfigMap, the controller's log and an Event")
	f.StringVar(&o.configMap, "pause-configmap", "",
		"namespace/name of the pause ConfigMap: the controller's --pause-configmap. Empty: the one the release's settings ConfigMap publishes, found by its label "+settingsLabel+" in any namespace")
	return cmd
}

// Complete takes -n as the release namespace.
func (o *Options) Complete() { o.namespace = o.conn.Namespace() }

// Validate refuses a pause without a reason, a malformed --pause-configmap and one
// outside -n, before anything is asked of the cluster.
func (o *Options) Validate() error {
	if o.pause && strings.TrimSpace(o.reason) == "" {
		return fmt.Errorf("--reason is required: say why, for the person who resumes")
	}
	if o.configMap != "" {
		key, err := cmdutil.ParsePauseConfigMap(o.configMap)
		if err != nil {
			return err
		}
		if o.namespace != "" && key.Namespace != o.namespace {
			return fmt.Errorf("--namespace %q and --pause-configmap %q disagree: give one", o.namespace, o.configMap)
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
	key, rel, err := findPauseConfigMap(ctx, out, cs, o.configMap, o.namespace)
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
		return forbidden(who, map[bool]string{true: "pause", false: "resume"}[pause], key, rel, err)
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

// release is the Helm release whose settings ConfigMap published the pause
// ConfigMap, for the commands an error suggests; empty when unknown (the flag named
// the ConfigMap, or several releases share it).
type release struct {
	// name is the Helm release (the label app.kubernetes.io/instance), fullname the
	// chart's prefix of its objects (the settings ConfigMap is <fullname>-settings).
	name, fullname string
}

// forbidden is the error of a pause or resume the API server refused: it says which
// chart values allow whom, and the commands that grant the right. A cluster-admin
// bound by a ClusterRoleBinding (not a member of system:masters) has the RBAC to
// write the ConfigMap, but the chart's admission policy admits only the subjects of
// the pause values and system:masters: being told "forbidden" alone, they would
// look for the missing right in RBAC, where it is not.
func forbidden(who, verb string, key types.NamespacedName, rel release, err error) error {
	helmRelease, roleName := cmp.Or(rel.name, "RELEASE"), cmp.Or(rel.fullname, "RELEASE_FULLNAME")+"-pause"
	by := "RBAC"
	if strings.Contains(err.Error(), "ValidatingAdmissionPolicy") {
		by = "the chart's admission policy"
	}
	var help strings.Builder
	help.WriteString("Only the subjects of the chart's values pause.groups, pause.users and pause.serviceAccounts, and members of system:masters, " +
		"may pause and resume: cluster-admin through a ClusterRoleBinding is not enough while the chart's admission policy is on (admissionPolicy.enabled). " +
		"To be allowed, add yourself to one of them (--set replaces the whole list: repeat its other members), e.g.:\n")
	if sa, ok := strings.CutPrefix(who, "system:serviceaccount:"); ok {
		saNamespace, saName, _ := strings.Cut(sa, ":")
		fmt.Fprintf(&help, "  helm upgrade %s <chart> -n %s --reuse-values --set 'pause.serviceAccounts[0].namespace=%s,pause.serviceAccounts[0].name=%s'\n",
			helmRelease, key.Namespace, saNamespace, saName)
	} else {
		fmt.Fprintf(&help, "  helm upgrade %s <chart> -n %s --reuse-values --set 'pause.users={%s}'\n", helmRelease, key.Namespace, who)
	}
	help.WriteString("  (or a group you are in: --set 'pause.groups={remediator:on-call,GROUP}')\n")
	help.WriteString("With admissionPolicy.enabled=false RBAC alone decides, and a binding to the chart's Role is enough:\n")
	fmt.Fprintf(&help, "  kubectl create rolebinding %s-%s -n %s --role=%s --user=%s", roleName, rbacName(who), key.Namespace, roleName, who)
	return fmt.Errorf("%s may not %s Remediator: %s refused writing the pause ConfigMap %s: %w\n%s", who, verb, by, key, err, help.String())
}

// rbacName makes a user name usable in an object's name: lower case, and only
// letters, digits, '-' and '.'.
func rbacName(user string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(user) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '-', r == '.':
			b.WriteRune(r)
		default:
			b.WriteRune('-')
		}
	}
	return strings.Trim(b.String(), "-.")
}

// findPauseConfigMap returns the pause ConfigMap: the flag's when given, else the one
// the chart's settings ConfigMaps publish, in namespace (the release namespace, -n)
// or, when it is empty, in any. Exactly one must be published; none or several is an
// error that names the candidates and the flag to choose with, never a guess: a pause
// written where no controller looks stops nothing.
func findPauseConfigMap(ctx context.Context, out io.Writer, cs kubernetes.Interface, flag, namespace string) (types.NamespacedName, release, error) {
	if flag != "" {
		key, err := cmdutil.ParsePauseConfigMap(flag)
		return key, release{}, err
	}
	choose := "give -n RELEASE_NAMESPACE, or --pause-configmap NAMESPACE/NAME: the release namespace's remediator-pause"
	where := "in any namespace"
	if namespace != "" {
		where = "in namespace " + namespace
		choose = "check -n (the namespace the chart was installed in), or give --pause-configmap NAMESPACE/NAME"
	}
	list, err := cs.CoreV1().ConfigMaps(namespace).List(ctx, metav1.ListOptions{LabelSelector: settingsLabel + "=true"})
	if apierrors.IsForbidden(err) {
		return types.NamespacedName{}, release{}, fmt.Errorf("finding the release's pause ConfigMap: you may not list ConfigMaps %s, where the chart's settings ConfigMap (label %s) says which it is: %w; %s",
			where, settingsLabel, err, choose)
	}
	if err != nil {
		return types.NamespacedName{}, release{}, fmt.Errorf("finding the release's pause ConfigMap among the ConfigMaps labelled %s: %w", settingsLabel, err)
	}
	// pause ConfigMap -> the settings ConfigMaps that publish it (two releases in one
	// namespace share its pause ConfigMap).
	found := map[types.NamespacedName][]string{}
	releases := map[types.NamespacedName][]release{}
	var unreadable []string
	for _, cm := range list.Items {
		at := cm.Namespace + "/" + cm.Name
		key, err := cmdutil.ParsePauseConfigMap(cm.Data[cmdutil.SettingPauseConfigMap])
		if err != nil {
			unreadable = append(unreadable, fmt.Sprintf("%s (key %s: %q)", at, cmdutil.SettingPauseConfigMap, cm.Data[cmdutil.SettingPauseConfigMap]))
			continue
		}
		found[key] = append(found[key], at)
		releases[key] = append(releases[key], release{name: cm.Labels["app.kubernetes.io/instance"], fullname: strings.TrimSuffix(cm.Name, "-settings")})
	}
	slices.Sort(unreadable)
	switch len(found) {
	case 1:
		for key, from := range found {
			slices.Sort(from)
			fmt.Fprintf(out, "The pause ConfigMap is %s (published by %s).\n", key, strings.Join(from, ", "))
			var rel release
			if len(releases[key]) == 1 { // two releases sharing it: no one command to suggest
				rel = releases[key][0]
			}
			return key, rel, nil
		}
	case 0:
		msg := fmt.Sprintf("no release of the chart found: no ConfigMap labelled %s=true %s names the pause ConfigMap", settingsLabel, where)
		if len(unreadable) > 0 {
			msg += fmt.Sprintf(" (%s do not: a chart older than this command?)", strings.Join(unreadable, ", "))
		}
		return types.NamespacedName{}, release{}, fmt.Errorf("%s; %s", msg, choose)
	}
	candidates := make([]string, 0, len(found))
	for key, from := range found {
		slices.Sort(from)
		candidates = append(candidates, fmt.Sprintf("%s (published by %s)", key, strings.Join(from, ", ")))
	}
	slices.Sort(candidates)
	return types.NamespacedName{}, release{}, fmt.Errorf("%d releases of the chart found, each with its own pause ConfigMap: %s; choose one with -n RELEASE_NAMESPACE or --pause-configmap NAMESPACE/NAME",
		len(found), strings.Join(candidates, "; "))
}
