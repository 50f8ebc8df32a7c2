// Package examples_test tests the Argo CD files of the remediation repository template
// (examples/remediation-repo/argocd) with Argo CD's own code, v3.2.6 as built for the e2e
// tests: the notifications ConfigMap with its notifications engine and the ApplicationSet
// with its ApplicationSet generator and templating.
package examples_test

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/argoproj/gitops-engine/pkg/health"
	"github.com/argoproj/notifications-engine/pkg/api"
	"github.com/argoproj/notifications-engine/pkg/services"
	"github.com/expr-lang/expr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	"sigs.k8s.io/yaml"

	appv1 "github.com/argoproj/argo-cd/v3/pkg/apis/application/v1alpha1"
	argolua "github.com/argoproj/argo-cd/v3/util/lua"
	notifsettings "github.com/argoproj/argo-cd/v3/util/notification/settings"
	"github.com/argoproj/argo-cd/v3/util/settings"
)

// root is the repository's root, from this package's directory.
const root = "../../.."

var (
	templateArgoCD = filepath.Join(root, "examples", "remediation-repo", "argocd")
	chartArgoCD    = filepath.Join(root, "charts", "remediator", "files", "argocd")
)

const (
	degradedTrigger  = "on-remediation-degraded"
	suspendedTrigger = "on-remediation-suspended"
	runbookURL       = "https://github.com/remediator/remediator/blob/main/docs/oncall.md"
)

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	return data
}

// healthOverrides reads the shipped argocd-cm.yaml the way Argo CD's application
// controller does: its settings manager, on a ConfigMap argocd-cm holding the file.
func healthOverrides(t *testing.T) argolua.ResourceHealthOverrides {
	t.Helper()
	cm := &corev1.ConfigMap{}
	require.NoError(t, yaml.Unmarshal(readFile(t, filepath.Join(chartArgoCD, "argocd-cm.yaml")), cm))
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "argocd-secret", Namespace: cm.Namespace,
		Labels: map[string]string{"app.kubernetes.io/part-of": "argocd"}}}
	mgr := settings.NewSettingsManager(context.Background(), fake.NewClientset(cm, secret), cm.Namespace)
	overrides, err := mgr.GetResourceOverrides()
	require.NoError(t, err)
	require.Contains(t, overrides, "remediator.io/RemediationRequest", "argocd-cm.yaml gives Argo CD no health check for RemediationRequest")
	return argolua.ResourceHealthOverrides(overrides)
}

// request is a RemediationRequest from the health check's fixtures
// (charts/remediator/files/argocd/testdata) under a name of the test's.
func request(t *testing.T, fixture, name string) *unstructured.Unstructured {
	t.Helper()
	obj := &unstructured.Unstructured{}
	require.NoError(t, yaml.Unmarshal(readFile(t, filepath.Join(chartArgoCD, "testdata", fixture+".yaml")), &obj.Object))
	obj.SetName(name)
	obj.SetNamespace("remediator")
	return obj
}

// application is argocd/application.yaml after Argo CD has synced the requests and
// assessed their health as its application controller does (controller/health.go): each
// request's health from the Lua check, the Application's the worst of them. With
// persist, each request's health is kept in status.resources, as with
// controller.resource.health.persist "true"; without, as Argo CD 3's default, only the
// Application's is.
func application(t *testing.T, overrides argolua.ResourceHealthOverrides, persist bool, requests ...*unstructured.Unstructured) (map[string]any, map[string]*health.HealthStatus) {
	t.Helper()
	app := &appv1.Application{}
	require.NoError(t, yaml.UnmarshalStrict(readFile(t, filepath.Join(templateArgoCD, "application.yaml")), app))
	app.Status.Health.Status = health.HealthStatusHealthy
	app.Status.Sync.Status = appv1.SyncStatusCodeSynced
	byName := map[string]*health.HealthStatus{}
	for _, rr := range requests {
		hs, err := health.GetResourceHealth(rr, overrides)
		require.NoError(t, err, "health of %s", rr.GetName())
		require.NotNil(t, hs, "no health for %s: the health check is not used", rr.GetName())
		byName[rr.GetName()] = hs
		gvk := rr.GroupVersionKind()
		res := appv1.ResourceStatus{Group: gvk.Group, Version: gvk.Version, Kind: gvk.Kind, Namespace: rr.GetNamespace(),
			Name: rr.GetName(), Status: appv1.SyncStatusCodeSynced}
		if persist {
			res.Health = &appv1.HealthStatus{Status: hs.Status, Message: hs.Message}
		}
		app.Status.Resources = append(app.Status.Resources, res)
		if health.IsWorse(app.Status.Health.Status, hs.Status) {
			app.Status.Health.Status = hs.Status
		}
	}
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(app)
	require.NoError(t, err)
	return obj, byName
}

// recorder is a notification service that keeps what it was sent.
type recorder struct{ sent []services.Notification }

func (r *recorder) Send(n services.Notification, _ services.Destination) error {
	r.sent = append(r.sent, n)
	return nil
}

// notifications loads notifications-cm.yaml as argocd-notifications-controller does: the
// engine's ParseConfig and Argo CD's variables (app, context, and the time, strings and
// repo helpers).
type notifications struct {
	cfg     *api.Config
	api     api.API
	getVars api.GetVars
	sink    *recorder
}

func loadNotifications(t *testing.T) notifications {
	t.Helper()
	cm := &corev1.ConfigMap{}
	require.NoError(t, yaml.UnmarshalStrict(readFile(t, filepath.Join(templateArgoCD, "notifications-cm.yaml")), cm))
	require.Equal(t, "argocd-notifications-cm", cm.Name, "the ConfigMap argocd-notifications-controller reads")
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "argocd-notifications-secret", Namespace: cm.Namespace},
		Data: map[string][]byte{"slack-token": []byte("xoxb-test")}}
	cfg, err := api.ParseConfig(cm, secret)
	require.NoError(t, err)
	getVars, err := notifsettings.GetFactorySettings(nil, secret.Name, cm.Name, false).InitGetVars(cfg, cm, secret)
	require.NoError(t, err)
	n, err := api.NewAPI(*cfg, getVars)
	require.NoError(t, err)
	sink := &recorder{}
	n.AddNotificationService("recorder", sink)
	return notifications{cfg: cfg, api: n, getVars: getVars, sink: sink}
}

// fires runs trigger on app as the notifications controller does, and returns whether it
// fired and its oncePer value. The engine only logs an expression that fails (and
// counts it as not fired), so each expression is also run here, and must not fail.
func (n notifications) fires(t *testing.T, trigger string, app map[string]any) (bool, string) {
	t.Helper()
	conditions := n.cfg.Triggers[trigger]
	require.Len(t, conditions, 1, "trigger %s", trigger)
	vars := n.getVars(app, services.Destination{})
	for _, e := range []string{conditions[0].When, conditions[0].OncePer} {
		prog, err := expr.Compile(e)
		require.NoError(t, err, "trigger %s: %s", trigger, e)
		_, err = expr.Run(prog, vars)
		require.NoError(t, err, "trigger %s: %s", trigger, e)
	}
	res, err := n.api.RunTrigger(trigger, app)
	require.NoError(t, err)
	require.Len(t, res, 1)
	return res[0].Triggered, res[0].OncePer
}

// message sends trigger's templates for app and returns the message.
func (n notifications) message(t *testing.T, trigger string, app map[string]any) string {
	t.Helper()
	n.sink.sent = nil
	require.NoError(t, n.api.Send(app, n.cfg.Triggers[trigger][0].Send, services.Destination{Service: "recorder", Recipient: "on-call"}))
	require.Len(t, n.sink.sent, 1)
	msg := n.sink.sent[0].Message
	assert.NotContains(t, msg, "<no value>", "a template reads a missing field:\n%s", msg)
	assert.Contains(t, msg, "Argo CD: https://argocd.example.com/applications/argocd/remediation-requests", msg)
	return msg
}

// TestNotificationsOnRequestHealth: notifications-cm.yaml's triggers, run by Argo CD's
// notifications engine on the template's Application whose requests have the health
// Argo CD's Lua runtime gives them with the shipped check: a Degraded request fires
// on-remediation-degraded, a Suspended one on-remediation-suspended, Healthy and
// Progressing ones neither; the message names the request, gives the health check's
// message as the reason and links the runbook.
func TestNotificationsOnRequestHealth(t *testing.T) {
	overrides := healthOverrides(t)
	n := loadNotifications(t)
	type want struct {
		degraded, suspended bool
		oncePer             string   // the firing trigger's
		says, not           []string // in its message, and not in it
	}
	rejected := request(t, "rejected", "release-lease-rejected")
	failed := request(t, "failed", "release-lease-failed")
	window := request(t, "waiting-window", "release-lease-window")
	paused := request(t, "running-paused", "release-lease-paused")
	running := request(t, "running", "release-lease-running")
	done := request(t, "succeeded", "release-lease-done")
	dryRun := request(t, "dryrun", "release-lease-dryrun")
	for _, tc := range []struct {
		name     string
		persist  bool
		requests []*unstructured.Unstructured
		want     want
	}{
		{"rejected and succeeded", true, []*unstructured.Unstructured{rejected, done},
			want{degraded: true, oncePer: "remediator/release-lease-rejected",
				says: []string{"Request remediator/release-lease-rejected: ", runbookURL + "#reading-the-outcome"},
				not:  []string{"release-lease-done", "kubectl get rr"}}},
		{"rejected and failed", true, []*unstructured.Unstructured{rejected, failed},
			want{degraded: true, oncePer: "remediator/release-lease-rejected, remediator/release-lease-failed",
				says: []string{"Request remediator/release-lease-rejected: ", "Request remediator/release-lease-failed: "}}},
		{"waiting for its window", true, []*unstructured.Unstructured{window, done},
			want{suspended: true, oncePer: "remediator/release-lease-window",
				says: []string{"Request remediator/release-lease-window: ", runbookURL + "#stop-button-pause-resume-and-keeping-a-node-out",
					runbookURL + "#why-a-request-waits"},
				not: []string{"release-lease-done"}}},
		// The Application is Progressing: only the request's own health shows the pause.
		{"paused beside a running one", true, []*unstructured.Unstructured{paused, running},
			want{suspended: true, oncePer: "remediator/release-lease-paused",
				says: []string{"Request remediator/release-lease-paused: "}, not: []string{"release-lease-running"}}},
		{"healthy", true, []*unstructured.Unstructured{done, dryRun}, want{}},
		{"running", true, []*unstructured.Unstructured{running, done}, want{}},
		{"no requests", true, nil, want{}},
		// Argo CD 3's default: no resource health in the Application. The Application's
		// health fires the triggers; the message says where the reasons are.
		{"rejected, health not persisted", false, []*unstructured.Unstructured{rejected, done},
			want{degraded: true, says: []string{"kubectl get rr -n remediator -o wide", runbookURL + "#reading-the-outcome"},
				not: []string{"Request remediator/"}}},
		{"waiting for its window, health not persisted", false, []*unstructured.Unstructured{window},
			want{suspended: true, says: []string{"kubectl get rr -n remediator -o wide"}}},
		// What the template says: without persisted resource health a Suspended request
		// behind a Progressing one does not notify.
		{"paused beside a running one, health not persisted", false, []*unstructured.Unstructured{paused, running}, want{}},
		{"healthy, health not persisted", false, []*unstructured.Unstructured{done}, want{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			app, hs := application(t, overrides, tc.persist, tc.requests...)
			degraded, degradedOnce := n.fires(t, degradedTrigger, app)
			suspended, suspendedOnce := n.fires(t, suspendedTrigger, app)
			assert.Equal(t, tc.want.degraded, degraded, "%s fired", degradedTrigger)
			assert.Equal(t, tc.want.suspended, suspended, "%s fired", suspendedTrigger)
			var trigger, oncePer string
			switch {
			case degraded:
				trigger, oncePer = degradedTrigger, degradedOnce
			case suspended:
				trigger, oncePer = suspendedTrigger, suspendedOnce
			default:
				return
			}
			assert.Equal(t, tc.want.oncePer, oncePer, "%s oncePer", trigger)
			msg := n.message(t, trigger, app)
			t.Logf("%s:\n%s", trigger, msg)
			for _, s := range tc.want.says {
				assert.Contains(t, msg, s)
			}
			for _, s := range tc.want.not {
				assert.NotContains(t, msg, s)
			}
			// The reason is the health check's message, word for word.
			for _, rr := range tc.requests {
				if tc.persist && strings.Contains(msg, "Request remediator/"+rr.GetName()+": ") {
					require.NotEmpty(t, hs[rr.GetName()].Message)
					assert.Contains(t, msg, "Request remediator/"+rr.GetName()+": "+hs[rr.GetName()].Message)
				}
			}
		})
	}
}

// TestNotificationsSubscription: the default subscription reaches the template's
// Applications (application.yaml, and those applicationset.yaml generates, by their
// label) and no other Application.
func TestNotificationsSubscription(t *testing.T) {
	n := loadNotifications(t)
	app := &appv1.Application{}
	require.NoError(t, yaml.UnmarshalStrict(readFile(t, filepath.Join(templateArgoCD, "application.yaml")), app))
	for _, labels := range []map[string]string{app.Labels, generatedApplications(t, "east")[0].Labels} {
		dests := n.cfg.GetGlobalDestinations(labels)
		for _, trigger := range []string{degradedTrigger, suspendedTrigger} {
			assert.Equal(t, services.Destinations{trigger: {{Service: "slack", Recipient: "remediator-on-call"}}}[trigger], dests[trigger],
				"%s for an Application labelled %v", trigger, labels)
		}
	}
	assert.Empty(t, n.cfg.GetGlobalDestinations(map[string]string{"app.kubernetes.io/name": "shop"}), "another Application")
	// Each template exists and the slack service is built (NewAPI built every service).
	for name := range n.cfg.Triggers {
		assert.True(t, strings.HasPrefix(name, "on-remediation-"), "trigger %s", name)
		for _, tmpl := range n.cfg.Triggers[name][0].Send {
			assert.Contains(t, n.cfg.Templates, tmpl, "trigger %s sends %s", name, tmpl)
		}
	}
	assert.Contains(t, n.api.GetNotificationServices(), "slack")
}

// TestNotificationsRunbookLinksExist: every runbook anchor the templates link is a
// heading of the on-call page, docs/oncall.md.
func TestNotificationsRunbookLinksExist(t *testing.T) {
	cm := readFile(t, filepath.Join(templateArgoCD, "notifications-cm.yaml"))
	links := regexp.MustCompile(`\{\{\.context\.runbookURL\}\}#([a-z0-9-]+)`).FindAllStringSubmatch(string(cm), -1)
	require.NotEmpty(t, links, "no runbook link in notifications-cm.yaml")
	var anchors []string
	for _, line := range strings.Split(string(readFile(t, filepath.Join(root, "docs", "oncall.md"))), "\n") {
		if heading, ok := strings.CutPrefix(strings.TrimLeft(line, "#"), " "); ok && strings.HasPrefix(line, "#") {
			// GitHub's anchors: lower case, punctuation dropped, spaces as hyphens.
			a := regexp.MustCompile(`[^a-z0-9 _-]`).ReplaceAllString(strings.ToLower(heading), "")
			anchors = append(anchors, strings.ReplaceAll(a, " ", "-"))
		}
	}
	for _, l := range links {
		assert.True(t, slices.Contains(anchors, l[1]), "docs/oncall.md has no heading for #%s", l[1])
	}
}
