package badinput

import (
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/remediator/remediator/test/testenv"
)

// Case is one malformed request: a valid one, edited.
type Case struct {
	Name string
	// Edit turns the valid object (its "metadata" and "spec" maps) into the malformed one.
	Edit func(obj map[string]any)
	// Field is the field path the refusal must name, as the API server spells it.
	Field string
	// Want are further substrings of the refusal.
	Want []string
	// Strict marks an unknown field: a create or update drops unknown fields unless
	// the client asks for strict field validation, as kubectl apply does by default;
	// server-side apply, which remediator sync uses, refuses them ("field not declared
	// in schema"). Strictly validated, it is refused as a bad request rather than as an
	// invalid object.
	Strict bool
}

// ValidSpec is a request admission accepts.
func ValidSpec() map[string]any {
	return map[string]any{
		"remediation": "release-luks-lease",
		"target":      map[string]any{"persistentVolume": "pvc-75a6fd7f-7aee-45e8-a5fa-d4500272528e"},
		"reason":      "Lease held by a dead node for 40 minutes",
	}
}

// Object is the request namespace/name with spec, as an unstructured object so that
// a case can send what the Go type cannot express (a wrong type, an unknown field).
func Object(namespace, name string, spec map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
	u.SetGroupVersionKind(testenv.GVK)
	u.SetNamespace(namespace)
	u.SetName(name)
	return u
}

// Malformed is the valid request in namespace/name with c applied.
func (c Case) Malformed(namespace, name string) *unstructured.Unstructured {
	u := Object(namespace, name, ValidSpec())
	c.Edit(u.Object)
	return u
}

func spec(obj map[string]any) map[string]any { return obj["spec"].(map[string]any) }

// set sets spec.field.
func set(field string, value any) func(map[string]any) {
	return func(obj map[string]any) { spec(obj)[field] = value }
}

func drop(field string) func(map[string]any) {
	return func(obj map[string]any) { delete(spec(obj), field) }
}

func window(schedule, duration any) func(map[string]any) {
	w := map[string]any{}
	if schedule != nil {
		w["schedule"] = schedule
	}
	if duration != nil {
		w["duration"] = duration
	}
	return set("maintenanceWindow", w)
}

func name(n string) func(map[string]any) {
	return func(obj map[string]any) { obj["metadata"].(map[string]any)["name"] = n }
}

// Admission returns the cases, fresh on every call. Each is a different problem.
func Admission() []Case {
	return slices.Concat(
		missingCases(),
		wrongTypeCases(),
		unknownValueCases(),
		targetCases(),
		targetNameCases(),
		windowCases(),
		fencingCases(),
		overrideCases(),
	)
}

// missingCases are the missing and empty fields.
func missingCases() []Case {
	return []Case{
		{Name: "no spec", Edit: func(obj map[string]any) { delete(obj, "spec") }, Field: "spec", Want: []string{"Required value"}},
		{Name: "missing reason", Edit: drop("reason"), Field: "spec.reason", Want: []string{"Required value"}},
		{Name: "too-short reason", Edit: set("reason", "fix it"), Field: "spec.reason", Want: []string{"at least 10"}},
		{Name: "reason just over the limit", Edit: set("reason", strings.Repeat("r", 4097)), Field: "spec.reason", Want: []string{"Too long", "4096"}},
		{Name: "huge reason (1 MiB)", Edit: set("reason", strings.Repeat("incident ", 1<<17)), Field: "spec.reason", Want: []string{"Too long"}},
		{Name: "missing remediation", Edit: drop("remediation"), Field: "spec.remediation", Want: []string{"Required value"}},
		{Name: "empty remediation", Edit: set("remediation", ""), Field: "spec.remediation", Want: []string{"Unsupported value"}},
		{Name: "no target", Edit: drop("target"), Field: "spec.target", Want: []string{"Required value"}},
		{Name: "empty target", Edit: set("target", map[string]any{}), Field: "spec.target", Want: []string{"exactly one of"}},
		{Name: "empty-string target", Edit: set("target", map[string]any{"persistentVolume": ""}), Field: "spec.target.persistentVolume"},
	}
}

// wrongTypeCases are the wrong types.
func wrongTypeCases() []Case {
	return []Case{
		{Name: "spec of the wrong type", Edit: func(obj map[string]any) { obj["spec"] = "release the lease" }, Field: "spec", Want: []string{"must be of type object"}},
		{Name: "reason of the wrong type", Edit: set("reason", 42), Field: "spec.reason", Want: []string{"must be of type string"}},
		{Name: "remediation of the wrong type", Edit: set("remediation", []any{"release-luks-lease"}), Field: "spec.remediation", Want: []string{"must be of type string"}},
		{Name: "target of the wrong type", Edit: set("target", "pvc-1"), Field: "spec.target", Want: []string{"must be of type object"}},
		{Name: "fencing.confirmed of the wrong type", Edit: set("fencing", map[string]any{"confirmed": "yes", "method": "NodeShutdown", "node": "n"}),
			Field: "spec.fencing.confirmed", Want: []string{"must be of type boolean"}},
	}
}

// unknownValueCases are the unknown values and typos.
func unknownValueCases() []Case {
	return []Case{
		{Name: "unknown remediation", Edit: set("remediation", "delete-everything"), Field: "spec.remediation", Want: []string{"Unsupported value"}},
		{Name: "unknown mode", Edit: set("mode", "Force"), Field: "spec.mode", Want: []string{"Unsupported value"}},
		{Name: "dry-run typo", Edit: set("mode", "dryrun"), Field: "spec.mode", Want: []string{"Unsupported value", `"DryRun"`}},
		{Name: "unknown fencing method", Edit: set("fencing", map[string]any{"confirmed": true, "method": "Hope"}), Field: "spec.fencing.method", Want: []string{"Unsupported value"}},
		{Name: "unknown field (a typo of maintenanceWindow)", Edit: set("maintenanceWindows", map[string]any{"schedule": "@daily", "duration": "2h"}),
			Field: `unknown field "spec.maintenanceWindows"`, Strict: true},
		{Name: "unknown field in the target", Edit: func(obj map[string]any) { spec(obj)["target"].(map[string]any)["volume"] = "pvc-2" },
			Field: `unknown field "spec.target.volume"`, Strict: true},
		{Name: "unknown field in the fencing", Edit: set("fencing", map[string]any{"confirmed": false, "approvedBy": "oncall"}),
			Field: `unknown field "spec.fencing.approvedBy"`, Strict: true},
	}
}

// targetCases are the bad target combinations.
func targetCases() []Case {
	return []Case{
		{Name: "two targets", Edit: set("target", map[string]any{"persistentVolume": "pv-1", "pod": map[string]any{"namespace": "app", "name": "web-0"}}),
			Field: "spec.target", Want: []string{"exactly one of"}},
		{Name: "three targets", Edit: set("target", map[string]any{"persistentVolume": "pv-1", "node": "kwok-node-0",
			"persistentVolumeClaim": map[string]any{"namespace": "app", "name": "data"}}), Field: "spec.target", Want: []string{"exactly one of"}},
		{Name: "csi remediation on a PV", Edit: set("remediation", "reregister-csi-driver"), Field: "spec.target", Want: []string{"reregister-csi-driver needs spec.target.node"}},
		{Name: "lease remediation on a node", Edit: set("target", map[string]any{"node": "kwok-node-0"}), Field: "spec.target", Want: []string{"release-luks-lease needs"}},
		{Name: "pvc target without namespace", Edit: set("target", map[string]any{"persistentVolumeClaim": map[string]any{"name": "data"}}),
			Field: "spec.target.persistentVolumeClaim.namespace", Want: []string{"Required value"}},
		{Name: "pod target without namespace", Edit: set("target", map[string]any{"pod": map[string]any{"name": "web-0"}}),
			Field: "spec.target.pod.namespace", Want: []string{"Required value"}},
		{Name: "pod target with an empty name", Edit: set("target", map[string]any{"pod": map[string]any{"namespace": "app", "name": ""}}),
			Field: "spec.target.pod.name", Want: []string{"at least 1 chars long"}},
		{Name: "node name too long", Edit: func(obj map[string]any) {
			spec(obj)["remediation"] = "reregister-csi-driver"
			spec(obj)["target"] = map[string]any{"node": strings.Repeat("n", 254)}
		}, Field: "spec.target.node", Want: []string{"Too long"}},
	}
}

// targetNameCases are target names the API server would refuse for the object
// they name: the controller's reads of them fail, so admission refuses them first.
func targetNameCases() []Case {
	return []Case{
		{Name: "persistentVolume with a slash", Edit: set("target", map[string]any{"persistentVolume": "a/b"}),
			Field: "spec.target.persistentVolume", Want: []string{"should match"}},
		{Name: "persistentVolume in capitals", Edit: set("target", map[string]any{"persistentVolume": "PVC-75A6FD7F"}),
			Field: "spec.target.persistentVolume", Want: []string{"should match"}},
		{Name: "claim name with a slash", Edit: set("target", map[string]any{"persistentVolumeClaim": map[string]any{"namespace": "app", "name": "data/0"}}),
			Field: "spec.target.persistentVolumeClaim.name", Want: []string{"should match"}},
		{Name: "claim namespace with a dot", Edit: set("target", map[string]any{"persistentVolumeClaim": map[string]any{"namespace": "app.prod", "name": "data"}}),
			Field: "spec.target.persistentVolumeClaim.namespace", Want: []string{"should match"}},
		{Name: "claim namespace too long", Edit: set("target", map[string]any{"persistentVolumeClaim": map[string]any{"namespace": strings.Repeat("a", 64), "name": "data"}}),
			Field: "spec.target.persistentVolumeClaim.namespace", Want: []string{"Too long"}},
		{Name: "pod name with a colon", Edit: set("target", map[string]any{"pod": map[string]any{"namespace": "app", "name": "web:0"}}),
			Field: "spec.target.pod.name", Want: []string{"should match"}},
		{Name: "pod namespace in capitals", Edit: set("target", map[string]any{"pod": map[string]any{"namespace": "App", "name": "web-0"}}),
			Field: "spec.target.pod.namespace", Want: []string{"should match"}},
		{Name: "node name with an underscore", Edit: func(obj map[string]any) {
			spec(obj)["remediation"] = "reregister-csi-driver"
			spec(obj)["target"] = map[string]any{"node": "kwok_node_0"}
		}, Field: "spec.target.node", Want: []string{"should match"}},
	}
}

// windowCases are the bad maintenance windows.
func windowCases() []Case {
	return []Case{
		{Name: "malformed window duration", Edit: window("0 2 * * *", "two hours"), Field: "spec.maintenanceWindow.duration"},
		{Name: "negative window duration", Edit: window("0 2 * * *", "-1h"), Field: "spec.maintenanceWindow.duration", Want: []string{"should match"}},
		{Name: "window duration without a unit", Edit: window("0 2 * * *", "120"), Field: "spec.maintenanceWindow.duration", Want: []string{"should match"}},
		// 9999999999h overflows a Go duration: it passed the pattern, then the
		// controller could not decode the request and stalled on it.
		{Name: "overflowing window duration", Edit: window("0 2 * * *", "9999999999h"), Field: "spec.maintenanceWindow.duration", Want: []string{"positive duration of at most 168h"}},
		{Name: "zero window duration", Edit: window("0 2 * * *", "0s"), Field: "spec.maintenanceWindow.duration", Want: []string{"positive duration of at most 168h"}},
		{Name: "window duration over 168h", Edit: window("0 2 * * *", "169h"), Field: "spec.maintenanceWindow.duration", Want: []string{"positive duration of at most 168h"}},
		{Name: "window without duration", Edit: window("0 2 * * *", nil), Field: "spec.maintenanceWindow.duration", Want: []string{"Required value"}},
		{Name: "window without schedule", Edit: window(nil, "2h"), Field: "spec.maintenanceWindow.schedule", Want: []string{"Required value"}},
		{Name: "garbage schedule", Edit: window("every tuesday", "2h"), Field: "spec.maintenanceWindow.schedule", Want: []string{"should match"}},
		{Name: "empty schedule", Edit: window("", "2h"), Field: "spec.maintenanceWindow.schedule"},
		{Name: "six-field cron (seconds)", Edit: window("0 0 2 * * *", "2h"), Field: "spec.maintenanceWindow.schedule", Want: []string{"should match"}},
		{Name: "schedule too long", Edit: window("0 2 * * "+strings.Repeat("1,", 130)+"2", "2h"), Field: "spec.maintenanceWindow.schedule", Want: []string{"Too long"}},
	}
}

// fencingCases are the bad fencing statements.
func fencingCases() []Case {
	return []Case{
		{Name: "fencing confirmed without method", Edit: set("fencing", map[string]any{"confirmed": true}), Field: "spec.fencing", Want: []string{"spec.fencing.method is required"}},
		{Name: "fencing confirmed without node", Edit: set("fencing", map[string]any{"confirmed": true, "method": "NodeShutdown"}),
			Field: "spec.fencing", Want: []string{"spec.fencing.node is required"}},
		{Name: "fencing names an empty node", Edit: set("fencing", map[string]any{"confirmed": true, "method": "NodeShutdown", "node": ""}),
			Field: "spec.fencing.node", Want: []string{"at least 1 chars long"}},
		{Name: "fencing without confirmed", Edit: set("fencing", map[string]any{"method": "NodeShutdown", "node": "kwok-node-2"}),
			Field: "spec.fencing.confirmed", Want: []string{"Required value"}},
	}
}

// overrideCases are the overrides and names.
func overrideCases() []Case {
	return []Case{
		{Name: "bad trident namespace", Edit: set("tridentNamespace", "Trident_NS"), Field: "spec.tridentNamespace", Want: []string{"should match"}},
		{Name: "trident namespace too long", Edit: set("tridentNamespace", strings.Repeat("t", 64)), Field: "spec.tridentNamespace", Want: []string{"Too long"}},
		{Name: "bad driver name", Edit: set("driverName", "csi trident"), Field: "spec.driverName", Want: []string{"should match"}},
		{Name: "name with bad characters", Edit: name("Release_Lease!"), Field: "metadata.name", Want: []string{"RFC 1123"}},
		{Name: "name too long", Edit: name(strings.Repeat("r", 254)), Field: "metadata.name", Want: []string{"must be no more than 253 characters"}},
	}
}
