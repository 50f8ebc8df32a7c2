#!/usr/bin/env bash
# The main job (`make demo`): on the local cluster that `make cluster` started, run the
# controller, stage incident A the way Trident leaves it (one holder healthy, one cut off
# from the control plane) and incident B with the seed's own reproduction, apply the
# example requests and print, for each, the facts, the policy's decision and the
# playbook's journal.
#
#   test/demo.sh        run the demo (the controller keeps running afterwards)
#   test/demo.sh stop   stop the demo controller (make cluster-down calls this)
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "${ROOT:-$HERE/..}" && pwd)"
BIN="${BIN:-$ROOT/bin}"
STATE="$BIN/cluster"
KUBECONFIG="$STATE/kubeconfig"
PIDFILE="$STATE/remediator.pid"
LOG="$STATE/remediator.log"
PROBE="127.0.0.1:${DEMO_PROBE_PORT:-18081}"
METRICS="127.0.0.1:${DEMO_METRICS_PORT:-18080}"
export KUBECONFIG

say() { printf '\n\033[1m==> %s\033[0m\n' "$*"; }
die() { printf 'demo: ERROR: %s\n' "$*" >&2; exit 1; }
kc() { "$BIN/kubectl" "$@"; }

stop_controller() {
  [[ -f "$PIDFILE" ]] || return 0
  local pid; pid="$(cat "$PIDFILE")"
  if kill -0 "$pid" 2>/dev/null; then
    kill -INT "$pid"
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    kill -0 "$pid" 2>/dev/null && kill -KILL "$pid"
  fi
  rm -f "$PIDFILE"
}

if [[ "${1:-}" == stop ]]; then
  stop_controller
  exit 0
fi

[[ -s "$KUBECONFIG" ]] || die "no cluster at $KUBECONFIG; run 'make cluster' (make demo does)"
[[ -x "$BIN/remediator" ]] || die "no $BIN/remediator; run 'make build'"

say "Starting the controller (log: $LOG)"
stop_controller # a re-run picks up a rebuilt binary
"$BIN/remediator" controller --kubeconfig "$KUBECONFIG" \
  --health-probe-bind-address "$PROBE" --metrics-bind-address "$METRICS" \
  --node-lease-grace-period 20s >"$LOG" 2>&1 </dev/null &
echo $! >"$PIDFILE"
for i in $(seq 1 120); do
  curl -fsS "http://$PROBE/readyz" >/dev/null 2>&1 && break
  kill -0 "$(cat "$PIDFILE")" 2>/dev/null || { tail -20 "$LOG" >&2; die "the controller exited"; }
  [[ $i == 120 ]] && { tail -20 "$LOG" >&2; die "the controller did not become ready on $PROBE"; }
  sleep 0.5
done
echo "ready on http://$PROBE/readyz, metrics on http://$METRICS/metrics"

say "Staging incident A: LUKS volumes whose Leases Trident retained 40 minutes ago"
acquired="$(date -u -d '-40 min' +%Y-%m-%dT%H:%M:%S.000000Z)"
sed "s/ACQUIRED_AT/$acquired/" "$HERE/demo/incident-a.yaml" | kc apply -f -
for attempt in 1 2 3; do
  # Trident's own Warning events on the retained Lease, as `kubectl describe lease` shows them.
  kc create -f - <<YAML >/dev/null
apiVersion: v1
kind: Event
metadata: {generateName: pvc-75a6fd7f-7aee-45e8-a5fa-d4500272528e., namespace: trident}
involvedObject: {apiVersion: coordination.k8s.io/v1, kind: Lease, namespace: trident, name: pvc-75a6fd7f-7aee-45e8-a5fa-d4500272528e}
reason: LeaseRetained
type: Warning
count: 1
firstTimestamp: "$(date -u +%Y-%m-%dT%H:%M:%SZ)"
lastTimestamp: "$(date -u +%Y-%m-%dT%H:%M:%SZ)"
source: {component: trident-node, host: kwok-node-1}
message: "Retaining lease after failed LUKS operation on kwok-node-1: cryptsetup luksOpen exited with status 5 (attempt $attempt)"
YAML
done
kc get lease -n trident

say "Staging incident B (seed 000): run a copy of trident-csi, then delete the copy"
# The seed's reproduction: `kubectl get ds -n trident trident-csi -o json | jq
# '.metadata.name|="trident-csi-2"' | kubectl apply -f -`, wait, delete the copy. The
# copy's terminating registrars remove the shared registration socket, so kubelet (here
# test/sim) deregisters the driver although the original pods keep running.
sed '0,/^  name: trident-csi$/s//  name: trident-csi-2/' "$ROOT/test/cluster/manifests/20-trident-csi.yaml" | kc apply -f - >/dev/null
for i in $(seq 1 60); do
  [[ "$(kc get ds -n trident trident-csi-2 -o jsonpath='{.status.numberReady}')" == 3 ]] && break
  [[ $i == 60 ]] && die "trident-csi-2 did not run on every node"
  sleep 1
done
kc get pods -n trident -o wide
kc delete ds -n trident trident-csi-2 --wait=true >/dev/null
for i in $(seq 1 30); do
  [[ "$(kc get csinode kwok-node-0 -o jsonpath='{.spec.drivers[*].name}')" != *csi.trident.netapp.io* ]] && break
  [[ $i == 30 ]] && die "the driver did not disappear from CSINode kwok-node-0"
  sleep 1
done
kc get csinode -o custom-columns='NODE:.metadata.name,DRIVERS:.spec.drivers[*].name'
kc get pods -n trident -o wide

say "Cutting kwok-node-2 off the control plane (its heartbeats stop)"
# Take over the node's Lease in kube-node-lease, as test/cluster's Disconnect does;
# kwok then stops heartbeating for it and the real kube-controller-manager marks it
# unreachable (~21s). A warm `make cluster` reconnects it.
kc patch lease -n kube-node-lease kwok-node-2 --type merge -p \
  "{\"spec\":{\"holderIdentity\":\"remediator-test/disconnected\",\"leaseDurationSeconds\":86400,\"renewTime\":\"$(date -u +%Y-%m-%dT%H:%M:%S.000000Z)\"}}" >/dev/null
for i in $(seq 1 90); do
  taints="$(kc get node kwok-node-2 -o jsonpath='{.spec.taints[*].key}')"
  [[ "$taints" == *node.kubernetes.io/unreachable* ]] && break
  [[ $i == 90 ]] && die "kwok-node-2 did not become unreachable"
  sleep 1
done
kc get nodes

say "What remediator scan finds (exit code 3: there are findings)"
"$BIN/remediator" scan --kubeconfig "$KUBECONFIG" --node-lease-grace-period 20s || [[ $? == 3 ]]

say "Applying the example requests from examples/requests"
kc create namespace remediator --dry-run=client -o yaml | kc apply -f -
# Re-running the demo starts the requests afresh.
kc delete rr -n remediator --all --ignore-not-found --wait=true >/dev/null
kc apply -f "$ROOT/examples/requests/"

say "Waiting for decisions and playbooks to settle"
for i in $(seq 1 90); do
  unsettled="$(kc get rr -n remediator -o jsonpath='{range .items[*]}{.status.phase}{"\n"}{end}' | grep -cvE '^(Succeeded|Failed|Rejected|Pending|Waiting)$' || true)"
  [[ "$unsettled" == 0 ]] && break
  [[ $i == 90 ]] && die "$unsettled requests still running; see $LOG"
  sleep 1
done
kc get rr -n remediator

say "Outcome per request (facts -> decision -> steps)"
for rr in $(kc get rr -n remediator -o name); do
  echo "--- $rr"
  kc get "$rr" -n remediator -o go-template='target:   {{.status.facts.target.ref}} (found={{.status.facts.target.found}}){{with .status.facts.target.message}} - {{.}}{{end}}
{{with .status.facts.lease}}lease:    {{.namespace}}/{{.name}} exists={{.exists}}{{if .exists}} holder={{.holderIdentity}} age={{.ageSeconds}}s LeaseRetained={{or .retainedEvents 0}}{{end}}
{{end}}{{with .status.facts.node}}node:     {{.name}} {{.state}} ({{.stateReason}})
{{end}}{{range .status.facts.affectedPods}}pod:      {{.namespace}}/{{.name}} {{.phase}} on {{.node}}
{{end}}{{with .status.facts.csi}}csi:      csinode={{.csiNodeExists}} driverRegistered={{.driverRegistered}} pluginPods={{len .pluginPods}}
{{end}}phase:    {{.status.phase}}
{{with .status.decision}}decision: allowed={{.allowed}} rule={{.rule}}{{with .playbook}} playbook={{.}}{{end}}
          {{.message}}
{{end}}{{range .status.steps}}step:     {{.name}} {{.state}}{{with .message}} - {{.}}{{end}}
{{end}}'
done
echo
kc get lease -n trident
kc get csinode -o custom-columns='NODE:.metadata.name,DRIVERS:.spec.drivers[*].name'
kc get nodes

say "Done"
cat <<MSG
The controller keeps running (pid $(cat "$PIDFILE")). Explore with:
  export KUBECONFIG=$KUBECONFIG
  $BIN/kubectl get rr -A
  $BIN/kubectl describe rr -n remediator release-lease-pvc-75a6fd7f
Stop everything with: make cluster-down
MSG
