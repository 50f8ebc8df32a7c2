{{/*
The chart name, overridable with nameOverride.
*/}}
{{- define "remediator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The fully qualified name of the release's objects, truncated to 63 characters
(the DNS label limit). A release name that already contains the chart name is
used as it is.
*/}}
{{- define "remediator.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/*
Chart name and version, for the helm.sh/chart label.
*/}}
{{- define "remediator.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Labels on every object.
*/}}
{{- define "remediator.labels" -}}
helm.sh/chart: {{ include "remediator.chart" . }}
{{ include "remediator.selectorLabels" . }}
{{- if .Chart.AppVersion }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/*
Selector labels: the controller's pods, matched by the Deployment and the Service.
*/}}
{{- define "remediator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "remediator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/*
The ServiceAccount the controller runs as.
*/}}
{{- define "remediator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "remediator.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
The image reference; the tag defaults to the chart's appVersion.
*/}}
{{- define "remediator.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) }}
{{- end }}

{{/*
Where the policies ConfigMap is mounted; passed as --policies-dir.
*/}}
{{- define "remediator.policiesDir" -}}
/etc/remediator/policies
{{- end }}

{{/*
The leader-election Lease name. It is the controller's LeaderElectionID
(internal/cmd/controller/controller.go); the chart's tests check that the two agree.
*/}}
{{- define "remediator.leaderElectionID" -}}
remediator.remediator.io
{{- end }}

{{/*
The value of --request-namespaces: the comma-separated requestNamespaces, or empty
when watchAllNamespaces reconciles every namespace. An empty list fails instead of
meaning "every namespace": reconciling more namespaces than intended gives whoever
may create a RemediationRequest there the controller's cluster-wide reach, so
widening must be asked for explicitly. A name that is not a namespace name (or holds
a comma, which would split it) fails too, rather than watching nothing.
*/}}
{{- define "remediator.requestNamespaces" -}}
{{- if not .Values.watchAllNamespaces }}
{{- /* index, not .Values.requestNamespaces: `--set requestNamespaces=null` removes the key */}}
{{- $namespaces := index .Values "requestNamespaces" }}
{{- if not $namespaces }}
{{- fail "requestNamespaces is empty: name the namespaces whose RemediationRequests the controller reconciles, or set watchAllNamespaces: true to reconcile every namespace (see the chart README's Tenancy note)" }}
{{- end }}
{{- range $namespaces }}
{{- if or (gt (len (toString .)) 63) (not (regexMatch "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$" (toString .))) }}
{{- fail (printf "requestNamespaces: %q is not a namespace name" (toString .)) }}
{{- end }}
{{- end }}
{{- join "," $namespaces }}
{{- end }}
{{- end }}

{{/*
The value of --allowed-trident-namespaces: trident.allowedNamespaces, comma-separated
(empty for none), the Trident namespaces besides trident.namespace that a request
may name. A name that is not a namespace name (or holds a comma, which would split
it) fails, as the settings-floor admission policy refuses it in the ConfigMap.
*/}}
{{- define "remediator.allowedTridentNamespaces" -}}
{{- $namespaces := .Values.trident.allowedNamespaces | default list }}
{{- range $namespaces }}
{{- if or (gt (len (toString .)) 63) (not (regexMatch "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$" (toString .))) }}
{{- fail (printf "trident.allowedNamespaces: %q is not a namespace name" (toString .)) }}
{{- end }}
{{- end }}
{{- join "," $namespaces }}
{{- end }}

{{/*
The label that marks the settings ConfigMap, by which `kubectl remediator pause` and
`resume` find the release (its pause-configmap key) in any namespace
(internal/cmd/pause's settingsLabel; the chart's tests check that they agree).
*/}}
{{- define "remediator.settingsLabel" -}}
remediator.io/settings
{{- end }}

{{/*
The sync agent's pod labels and selector: a name of its own, so that the
controller's Deployment, Service and PodDisruptionBudget (selectorLabels) never
select the sync pod.
*/}}
{{- define "remediator.syncSelectorLabels" -}}
app.kubernetes.io/name: {{ include "remediator.name" . }}-sync
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: sync
{{- end }}

{{- define "remediator.syncLabels" -}}
helm.sh/chart: {{ include "remediator.chart" . }}
{{ include "remediator.syncSelectorLabels" . }}
{{- if .Chart.AppVersion }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/*
The name of the ConfigMap the controller loads its policies from, or "" for the
policies embedded in the image. The chart's own <fullname>-policies holds them when
they are given in .Values.policies or synced from Git by the sync agent
(sync.policies); .Values.policiesConfigMap names one written outside the chart (Argo
CD, from the remediation repository's policies/ kustomization). One source only.
*/}}
{{- define "remediator.policiesConfigMap" -}}
{{- $sources := list }}
{{- if .Values.policies }}{{ $sources = append $sources "policies" }}{{ end }}
{{- if and .Values.sync.enabled .Values.sync.policies.enabled }}{{ $sources = append $sources "sync.policies.enabled" }}{{ end }}
{{- if .Values.policiesConfigMap }}{{ $sources = append $sources "policiesConfigMap" }}{{ end }}
{{- if gt (len $sources) 1 }}
{{- fail (printf "the controller's policies come from %s: keep one source (values, Git through the sync agent, or Git through Argo CD)" (join " and " $sources)) }}
{{- end }}
{{- if .Values.policiesConfigMap }}{{ .Values.policiesConfigMap }}
{{- else if $sources }}{{ include "remediator.fullname" . }}-policies
{{- end }}
{{- end }}

{{/*
The controller's restore finalizer (api/v1alpha1.Finalizer) and its node annotation
(remediations.CordonedByAnnotation), the only parts of a request and of a Node its
ServiceAccount may change, and the break-glass annotation
(api/v1alpha1.AnnotationBreakGlass), for templates/admissionpolicy.yaml; the chart's
tests check that they agree with the code.
*/}}
{{- define "remediator.admission.finalizer" -}}
remediator.io/restore
{{- end }}

{{- define "remediator.admission.cordonedBy" -}}
remediator.io/cordoned-by
{{- end }}

{{- define "remediator.admission.breakGlass" -}}
remediator.io/break-glass
{{- end }}

{{/*
remediator.serviceAccountUsers: the user names (system:serviceaccount:NAMESPACE:NAME)
of a list of ServiceAccounts given as {namespace, name}, as a JSON array, for
(list "the value's path" the list). One without a namespace or a name fails, naming
the value, rather than admitting or binding nobody in silence.
*/}}
{{- define "remediator.serviceAccountUsers" -}}
{{- $path := index . 0 }}
{{- $users := list }}
{{- range (index . 1 | default list) }}
{{- $ns := get . "namespace" | default "" | toString }}
{{- $name := get . "name" | default "" | toString }}
{{- if or (not (regexMatch "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$" $ns)) (gt (len $ns) 63) (not (regexMatch "^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$" $name)) (gt (len $name) 253) }}
{{- fail (printf "%s: %v is not a ServiceAccount: give its namespace and name, e.g. {namespace: flux-system, name: kustomize-controller}" $path .) }}
{{- end }}
{{- $users = append $users (printf "system:serviceaccount:%s:%s" $ns $name) }}
{{- end }}
{{- $users | toJson }}
{{- end }}

{{/*
remediator.identities: who a value names, for (list "the value's path" the value) where
the value holds users, groups and serviceAccounts ([{namespace, name}]), as JSON
{"users": [...], "groups": [...]}: the users and the ServiceAccounts' user names, and
the groups. RBAC subjects and the admission policies' CEL are both rendered from it.
*/}}
{{- define "remediator.identities" -}}
{{- $path := index . 0 }}
{{- $v := index . 1 | default dict }}
{{- $sa := include "remediator.serviceAccountUsers" (list (printf "%s.serviceAccounts" $path) (get $v "serviceAccounts")) | fromJsonArray }}
{{- $users := concat (get $v "users" | default list) $sa | uniq }}
{{- $groups := get $v "groups" | default list | uniq }}
{{- dict "users" $users "groups" $groups | toJson }}
{{- end }}

{{/*
remediator.identities.describe: the identities of a remediator.identities result in
words, for a refusal's message: "groups a, b and users c" ("nobody" for none).
*/}}
{{- define "remediator.identities.describe" -}}
{{- $parts := list }}
{{- if .groups }}{{ $parts = append $parts (printf "%s %s" (ternary "group" "groups" (eq (len .groups) 1)) (join ", " .groups)) }}{{ end }}
{{- if .users }}{{ $parts = append $parts (printf "%s %s" (ternary "user" "users" (eq (len .users) 1)) (join ", " .users)) }}{{ end }}
{{- if $parts }}{{ join " and " $parts }}{{ else }}nobody{{ end }}
{{- end }}

{{/*
The break-glass identities, as remediator.identities renders them: the users, groups
and serviceAccounts of admissionPolicy.breakGlass, and its single group of chart 0.3
and before (breakGlass.group, still honoured).
*/}}
{{- define "remediator.breakGlass" -}}
{{- $bg := .Values.admissionPolicy.breakGlass | default dict }}
{{- $ids := include "remediator.identities" (list "admissionPolicy.breakGlass" $bg) | fromJson }}
{{- $groups := $ids.groups }}
{{- if get $bg "group" }}{{ $groups = append $groups (get $bg "group") | uniq }}{{ end }}
{{- dict "users" $ids.users "groups" $groups | toJson }}
{{- end }}

{{/*
The variables a Git-writers policy decides on, for a dict of users and groups (the
Git writers) and breakGlass (a dict of the break-glass users and groups, both empty
for none):
- gitWriter: the request comes from one of the users or groups;
- breakGlass: one of the break-glass users, or a member of one of their groups, writes
  an object that carries the annotation remediator.io/break-glass with a non-empty
  reason (for a delete, the object as it is must carry it);
- namespaceTerminating: a delete in a namespace that is being deleted.
The names are JSON strings, which CEL reads as its own string literals.
*/}}
{{- define "remediator.admission.writerVariables" -}}
- name: gitWriter
  expression: >-
    request.userInfo.username in {{ .users | toRawJson }} ||
    request.userInfo.?groups.orValue([]).exists(g, g in {{ .groups | toRawJson }})
- name: breakGlass
  {{- if or .breakGlass.users .breakGlass.groups }}
  expression: >-
    (request.userInfo.username in {{ .breakGlass.users | toRawJson }} ||
    request.userInfo.?groups.orValue([]).exists(g, g in {{ .breakGlass.groups | toRawJson }})) &&
    (request.operation == "DELETE" ? oldObject : object).metadata.?annotations[?{{ include "remediator.admission.breakGlass" . | toRawJson }}].orValue("").trim() != ""
  {{- else }}
  expression: "false"
  {{- end }}
- name: namespaceTerminating
  expression: >-
    request.operation == "DELETE" && namespaceObject != null &&
    has(namespaceObject.metadata.deletionTimestamp)
{{- end }}

{{/*
The controller's settings that `remediator plan` must decide with too, as flag name ->
value: the data of the settings ConfigMap (<fullname>-settings). The controller takes
each of them from that ConfigMap (deployment.yaml: env valueFrom configMapKeyRef and a
$(VAR) argument), so what plan reads there is what the controller runs with.
*/}}
{{- define "remediator.settings" -}}
allowed-trident-namespaces: {{ include "remediator.allowedTridentNamespaces" . | quote }}
driver-name: {{ .Values.trident.driverName | toString | quote }}
floor-healthy-lease-age: {{ .Values.safetyFloor.healthyLeaseAge | toString | quote }}
floor-unreachable-lease-age: {{ .Values.safetyFloor.unreachableLeaseAge | toString | quote }}
max-concurrent-remediations: {{ .Values.maxConcurrentRemediations | toString | quote }}
node-lease-grace-period: {{ .Values.nodeLeaseGracePeriod | toString | quote }}
node-plugin-selector: {{ .Values.trident.nodePluginSelector | toString | quote }}
pause-configmap: {{ printf "%s/%s" .Release.Namespace (include "remediator.pauseConfigMap" .) | quote }}
trident-namespace: {{ .Values.trident.namespace | toString | quote }}
{{- end }}

{{/*
The value that sets each of the settings: what extraArgs' refusal points at.
pause-configmap has none: the pause ConfigMap is the release namespace's
remediator-pause, which pause.yaml's Role and admission policy guard.
*/}}
{{- define "remediator.settingsValues" -}}
allowed-trident-namespaces: trident.allowedNamespaces
driver-name: trident.driverName
floor-healthy-lease-age: safetyFloor.healthyLeaseAge
floor-unreachable-lease-age: safetyFloor.unreachableLeaseAge
max-concurrent-remediations: maxConcurrentRemediations
node-lease-grace-period: nodeLeaseGracePeriod
node-plugin-selector: trident.nodePluginSelector
trident-namespace: trident.namespace
{{- end }}

{{/*
The controller flags, other than the settings, that the chart's bindings, Roles and
admission policies are rendered from, as flag name -> what the chart derives from
it and the value to set instead: extraArgs refuses each (deployment.yaml), since a
flag given there would win over the chart's (the last one wins) and leave those
guards guarding something else. Every flag named leader-elect* is refused too.
*/}}
{{- define "remediator.reservedFlags" -}}
{{- $fullname := include "remediator.fullname" . }}
{{- $namespaces := "the admission binding <fullname>-git-writers, the sync agent's Roles and the request namespaces are rendered from it: set requestNamespaces (or watchAllNamespaces) instead" | replace "<fullname>" $fullname }}
{{- $identity := printf "the chart's RBAC and admission policies are written for the controller's ServiceAccount %s, which must be who the controller talks to this cluster's API server as: set serviceAccount.name (and extraEnv's KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT for another address of the API server) instead" (include "remediator.serviceAccountName" .) }}
{{- $metrics := printf "the metrics Service, ServiceMonitor and ClusterRole %s-metrics-reader are rendered from it: set metrics.enabled, metrics.port and metrics.secure instead" $fullname }}
leader-elect: {{ printf "the chart always elects a leader, whose Lease %s the Role %s-leader-election lets the controller hold in the release namespace %s: set replicaCount instead" (include "remediator.leaderElectionID" .) $fullname .Release.Namespace | quote }}
pause-configmap: {{ printf "the pause ConfigMap is %s/%s, which the Role and admission policy %s-pause guard and the settings ConfigMap %s-settings publishes to kubectl remediator pause: set pause.users, pause.groups or pause.serviceAccounts for who may write it" .Release.Namespace (include "remediator.pauseConfigMap" .) $fullname $fullname | quote }}
policies-dir: {{ printf "the policies are mounted from the ConfigMap the chart guards (admission policy %s-policies-writers): set policies, policiesConfigMap or sync.policies.enabled instead" $fullname | quote }}
request-namespaces: {{ $namespaces | quote }}
watch-all-namespaces: {{ $namespaces | quote }}
metrics-bind-address: {{ $metrics | quote }}
metrics-secure: {{ $metrics | quote }}
{{- range list "kubeconfig" "context" "cluster" "user" "server" "s" "token" "as" "as-group" "as-uid" "client-certificate" "client-key" }}
{{ . }}: {{ $identity | quote }}
{{- end }}
{{- end }}

{{/*
The environment variable that carries a setting (its flag name) into the controller.
*/}}
{{- define "remediator.settingEnv" -}}
{{- printf "SETTING_%s" (. | upper | replace "-" "_") }}
{{- end }}

{{/*
The pause ConfigMap's name, in the controller's namespace: the controller's
--pause-configmap (deployment.yaml) and the Role and admission policy that guard it
(pause.yaml) name the same object.
*/}}
{{- define "remediator.pauseConfigMap" -}}remediator-pause{{- end }}

{{/*
remediator.alerts.seconds: a Go duration (the chart's timeouts and floor minimums, "5m", "1h30m") in
seconds, for a PromQL comparison (prometheusrule.yaml) and the floor's check (configmap-settings.yaml).
*/}}
{{- define "remediator.alerts.seconds" -}}
{{- $total := 0.0 }}
{{- range regexFindAll "[0-9]+(\\.[0-9]+)?(ns|us|µs|ms|s|m|h)" (toString .) -1 }}
{{- $n := regexFind "^[0-9]+(\\.[0-9]+)?" . | float64 }}
{{- $unit := regexReplaceAll "^[0-9]+(\\.[0-9]+)?" . "" }}
{{- $total = addf $total (mulf $n (get (dict "h" 3600 "m" 60 "s" 1 "ms" 0.001 "us" 0.000001 "µs" 0.000001 "ns" 0.000000001) $unit)) }}
{{- end }}
{{- if eq $total (floor $total) }}{{ int64 $total }}{{ else }}{{ $total }}{{ end }}
{{- end }}

{{/*
remediator.alerts.severity: the severity label of an alert, (list $ "AlertName"):
metrics.prometheusRule.severities' entry for it, which values.yaml defaults and
values.schema.json limits to critical, warning and info.
*/}}
{{- define "remediator.alerts.severity" -}}
{{- $alert := index . 1 }}
{{- $severity := dig $alert "" ((index . 0).Values.metrics.prometheusRule.severities | default dict) }}
{{- if not (has $severity (list "critical" "warning" "info")) }}
{{- fail (printf "metrics.prometheusRule.severities.%s: %q, want critical, warning or info" $alert $severity) }}
{{- end }}
{{- $severity }}
{{- end }}
