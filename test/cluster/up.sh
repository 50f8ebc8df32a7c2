#!/usr/bin/env bash
# Bring up the Remediator local cluster: a real kube-apiserver/etcd/controller-manager/scheduler
# run by `kwokctl --runtime binary` from the binaries in $BIN, with kwok simulating the kubelets
# of three nodes, plus a stand-in for Trident's CSI node-plugin DaemonSet and, in place of the
# kubelets' CSI plugin registration, the Trident simulator test/sim (built into $BIN/trident-sim).
#
# Usage: test/cluster/up.sh            (no arguments; configured through the environment)
#   ROOT         repo root                      (default: two directories above this script)
#   BIN          directory holding the binaries (default: $ROOT/bin; build them with `make bins`)
#   CRD_DIR      CRDs to apply, relative to ROOT or absolute (default: charts/remediator/files/crds;
#                skipped if missing or empty)
#   UP_TIMEOUT   seconds to wait for nodes, DaemonSet and CRDs (default: 180)
#   REAL_NODES   number of real kubelet nodes real-1..real-N to run beside the kwok ones
#                (default: 0; needs root; test/realnode/node.sh, docs/realnodes.md). They run
#                the trident-csi DaemonSet's pods for real when bin/images/trident-node.tar
#                exists; without it the bring-up still succeeds and says so. Real nodes a
#                previous run started are left alone when REAL_NODES is smaller.
#
# Result: admin kubeconfig at $BIN/cluster/kubeconfig; cluster state (pki, etcd data, pid files,
# component logs, the kube-apiserver's audit log logs/audit.log, see audit-policy.yaml) under
# $BIN/cluster/clusters/remediator; the simulator's pid file and log at
# $BIN/cluster/trident-sim.{pid,log}. Nothing is written to ~/.kwok, and
# ~/.kube/config is left alone.
#
# Idempotent: if the cluster is already up and reachable it only re-applies the manifests (which
# also restores the baseline, e.g. a node a test took out of kwok's management) and waits.
# If test/cluster/kwokctl.yaml changed since the cluster was created, the cluster is recreated.
# The simulator is rebuilt on every run (Go's build cache makes that quick) and restarted if it is
# not running or its binary changed. The baseline includes every node's CSINode listing
# csi.trident.netapp.io; a node a test left deregistered (seed B) gets its node-plugin pod
# restarted, the fix from the seed.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "${ROOT:-$HERE/../..}" && pwd)"
BIN="${BIN:-$ROOT/bin}"
CRD_DIR="${CRD_DIR:-charts/remediator/files/crds}"
UP_TIMEOUT="${UP_TIMEOUT:-180}"
REAL_NODES="${REAL_NODES:-0}"
[[ "$REAL_NODES" =~ ^[0-9]+$ ]] || { echo "[cluster up] ERROR: REAL_NODES=$REAL_NODES is not a number" >&2; exit 1; }
REALNODE_SH="$ROOT/test/realnode/node.sh"
REALNODE_MANIFESTS="$ROOT/test/realnode/manifests"

CLUSTER_NAME=remediator
CLUSTER_DIR="$BIN/cluster"
KUBECONFIG_OUT="$CLUSTER_DIR/kubeconfig"
MANIFESTS="$HERE/manifests"
KWOKCTL_CONFIG="$HERE/kwokctl.yaml"
# The trident-main log of the Trident node-plugin pods on kwok nodes. kwok-controller serves
# it through the kubelet API a kwok node advertises, so the API server's pods/log reads it
# as it reads a real kubelet's: a decision on a kwok holder finds its log read in full and
# silent about every volume (state None), as a plugin that is not running cryptsetup would
# be. Lines in the CRI log format appended to it are served too. The ClusterLogs rule that
# points kwok at it is added to kwokctl.yaml at creation (kwokctl_config).
KWOK_TRIDENT_LOG="$CLUSTER_DIR/kwok-trident-main.log"
# The kube-apiserver's audit policy: the destructive calls the chaos campaigns count.
AUDIT_POLICY="$HERE/audit-policy.yaml"
# Nodes declared in manifests/10-nodes.yaml; the DaemonSet must have one ready pod on each.
EXPECTED_NODES=3

log() { printf '[cluster up] %s\n' "$*" >&2; }
die() { printf '[cluster up] ERROR: %s\n' "$*" >&2; exit 1; }

[[ "$CRD_DIR" = /* ]] || CRD_DIR="$ROOT/$CRD_DIR"

for b in etcd kube-apiserver kube-controller-manager kube-scheduler kubectl kwok kwokctl; do
  [[ -x "$BIN/$b" ]] || die "missing binary $BIN/$b; build the binaries with 'make bins'"
done
command -v go >/dev/null || die "go is needed to build the Trident simulator (test/sim)"
mkdir -p "$CLUSTER_DIR"
# shellcheck source=trident-sim.sh
. "$HERE/trident-sim.sh"

# kwokctl keeps all its state (clusters/, cache/, default kwok.yaml) in KWOK_WORKDIR, which would
# otherwise be ~/.kwok.
export KWOK_WORKDIR="$CLUSTER_DIR"
# kwokctl shells out to `kubectl` (health checks) and looks it up in PATH before trying to
# download one; make sure it finds ours.
export PATH="$BIN:$PATH"
export KWOK_KUBECTL_BINARY="$BIN/kubectl"
# kubectl's discovery cache would otherwise go to ~/.kube/cache.
export KUBECACHEDIR="$CLUSTER_DIR/kubectl-cache"

# Serialise concurrent callers (e.g. several e2e test packages running in parallel).
exec 9>"$CLUSTER_DIR/.lock"
flock -w 600 9 || die "timed out waiting for another up.sh/down.sh holding $CLUSTER_DIR/.lock"

# </dev/null and 9>&-: the components kwokctl forks outlive this script and inherit kwokctl's
# open files; they must not keep our stdin or the lock (fd 9) open.
kwokctl() { "$BIN/kwokctl" --name "$CLUSTER_NAME" "$@" </dev/null 9>&-; }
kc() { "$BIN/kubectl" --kubeconfig "$KUBECONFIG_OUT" "$@"; }

# Where kwokctl puts the logs; named in error messages.
LOGS="$CLUSTER_DIR/clusters/$CLUSTER_NAME/logs"

# A fingerprint of what the cluster was created from. kwokctl only reads --config when it
# creates a cluster, so a changed config (or different binaries) means recreate.
fingerprint() {
  {
    kwokctl_config | sha256sum
    sha256sum "$AUDIT_POLICY"
    for b in etcd kube-apiserver kube-controller-manager kube-scheduler kwok kwokctl; do
      printf '%s %s\n' "$b" "$(stat -c '%s %Y' "$BIN/$b")"
    done
  } | sha256sum | cut -d' ' -f1
}
FINGERPRINT_FILE="$CLUSTER_DIR/fingerprint"

# kwokctl_config prints the configuration kwokctl creates the cluster from: kwokctl.yaml
# and the ClusterLogs rule of KWOK_TRIDENT_LOG, whose path is only known here.
kwokctl_config() {
  cat "$KWOKCTL_CONFIG"
  cat <<YAML
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: ClusterLogs
metadata:
  name: trident-main
spec:
  selector:
    matchNamespaces: [trident]
  logs:
  - containers: [trident-main]
    logsFile: $KWOK_TRIDENT_LOG
YAML
}

# (Re)write the admin kubeconfig from kwokctl's own. Writing it ourselves, instead of letting
# `create cluster` merge a context into a kubeconfig, keeps ~/.kube/config untouched and gives a
# stand-alone file with exactly one context. Its cert paths point into the cluster's pki dir.
write_kubeconfig() {
  kwokctl get kubeconfig >"$KUBECONFIG_OUT.tmp" 2>"$CLUSTER_DIR/get-kubeconfig.err" || return 1
  chmod 600 "$KUBECONFIG_OUT.tmp"
  mv "$KUBECONFIG_OUT.tmp" "$KUBECONFIG_OUT"
}

reachable() {
  write_kubeconfig && kc get --raw /readyz --request-timeout=5s >/dev/null 2>&1
}

# wait_until DESCRIPTION COMMAND...: poll COMMAND every second until it succeeds or UP_TIMEOUT
# (counted from the start of the waiting phase) runs out.
wait_until() {
  local what="$1"; shift
  until "$@"; do
    if (( SECONDS >= WAIT_DEADLINE )); then
      return 1
    fi
    sleep 1
  done
  log "$what ($((SECONDS - WAIT_START))s)"
}

start=$SECONDS
cluster_exists=false
[[ -f "$CLUSTER_DIR/clusters/$CLUSTER_NAME/kwok.yaml" ]] && cluster_exists=true

if $cluster_exists && [[ "$(cat "$FINGERPRINT_FILE" 2>/dev/null)" != "$(fingerprint)" ]]; then
  log "kwokctl.yaml, the audit policy or the binaries changed since the cluster was created; recreating it"
  flock -u 9
  "$HERE/down.sh"
  flock -w 600 9 || die "timed out re-taking $CLUSTER_DIR/.lock"
  cluster_exists=false
fi

# The simulator is restarted whenever the control plane was (re)started below: it should not
# carry a watch from a previous apiserver over.
restart_sim=false
if $cluster_exists && reachable; then
  log "cluster $CLUSTER_NAME already up; re-applying manifests"
else
  restart_sim=true
  if $cluster_exists; then
    # kwokctl restarts the components of an existing cluster whose processes are gone
    # (e.g. after a reboot) instead of recreating it.
    log "cluster $CLUSTER_NAME exists but is not reachable; restarting its components"
  else
    log "creating cluster $CLUSTER_NAME (kwokctl --runtime binary, state in $CLUSTER_DIR)"
    # Real nodes left from an earlier control plane (e.g. a run killed before down.sh) hold
    # its credentials and pods: start them afresh.
    if [[ -n "$(ROOT="$ROOT" BIN="$BIN" "$REALNODE_SH" list 2>/dev/null)" ]]; then
      log "removing real nodes left from an earlier cluster"
      ROOT="$ROOT" BIN="$BIN" "$REALNODE_SH" down 9>&- || die "removing the real nodes left from an earlier cluster failed"
    fi
  fi
  # --kubeconfig= : do not merge a context into ~/.kube/config (see write_kubeconfig).
  # --timeout bounds kwokctl itself; it already waits up to 2m for the apiserver to serve.
  : >>"$KWOK_TRIDENT_LOG"
  kwokctl_config >"$CLUSTER_DIR/kwokctl.yaml"
  if ! kwokctl create cluster \
      --config="$CLUSTER_DIR/kwokctl.yaml" \
      --runtime=binary \
      --kubeconfig= \
      --timeout=5m \
      --kube-audit-policy="$AUDIT_POLICY" \
      --etcd-binary="$BIN/etcd" \
      --kube-apiserver-binary="$BIN/kube-apiserver" \
      --kube-controller-manager-binary="$BIN/kube-controller-manager" \
      --kube-scheduler-binary="$BIN/kube-scheduler" \
      --kwok-controller-binary="$BIN/kwok"; then
    die "kwokctl create cluster failed; component logs are in $LOGS"
  fi
  fingerprint >"$FINGERPRINT_FILE"
  write_kubeconfig || die "kwokctl get kubeconfig failed: $(cat "$CLUSTER_DIR/get-kubeconfig.err")"
  WAIT_START=$SECONDS WAIT_DEADLINE=$((SECONDS + UP_TIMEOUT))
  apiserver_ready() { kc get --raw /readyz --request-timeout=5s >/dev/null 2>&1; }
  wait_until "apiserver ready" apiserver_ready \
    || die "kube-apiserver not ready after ${UP_TIMEOUT}s; see $LOGS/kube-apiserver.log"
fi

# --- CRDs ------------------------------------------------------------------------------------
# Server-side apply: generated CRDs can exceed the 256KiB last-applied annotation client-side
# apply needs.
crds=()
if [[ -d "$CRD_DIR" ]] && compgen -G "$CRD_DIR/*.y*ml" >/dev/null; then
  log "applying CRDs from $CRD_DIR"
  out=$(kc apply --server-side --force-conflicts --field-manager=remediator-test-cluster \
    -f "$CRD_DIR" -o name) || die "applying the CRDs in $CRD_DIR failed"
  mapfile -t crds <<<"$out"
else
  log "no CRDs in $CRD_DIR; skipping"
fi

# --- Nodes, namespace, Trident DaemonSet -----------------------------------------------------
kc apply -f "$MANIFESTS/00-namespace.yaml" >/dev/null || die "applying $MANIFESTS/00-namespace.yaml failed"
out=$(kc apply -f "$MANIFESTS/10-nodes.yaml" -o name) || die "applying $MANIFESTS/10-nodes.yaml failed"
mapfile -t nodes <<<"$out"
(( ${#nodes[@]} == EXPECTED_NODES )) \
  || die "expected $EXPECTED_NODES nodes in $MANIFESTS/10-nodes.yaml, got ${#nodes[@]}"
for n in "${nodes[@]}"; do
  kc patch "$n" --subresource=status --type=merge \
    --patch-file="$MANIFESTS/patches/node-status.yaml" >/dev/null \
    || die "patching the status of $n failed"
done
# Reconnect nodes a test disconnected (cluster.Disconnect takes over the node's Lease with this
# holder): deleting the Lease lets kwok recreate and renew it.
disconnected=$(kc -n kube-node-lease get leases \
  -o jsonpath='{range .items[?(@.spec.holderIdentity=="remediator-test/disconnected")]}{.metadata.name}{" "}{end}') \
  || die "listing node Leases failed"
if [[ -n "$disconnected" ]]; then
  log "reconnecting disconnected nodes: $disconnected"
  # shellcheck disable=SC2086 # one Lease name per word
  kc -n kube-node-lease delete lease $disconnected >/dev/null || die "deleting Leases $disconnected failed"
fi
# With real nodes, the DaemonSet that runs the project's node plugin for real
# (test/realnode/manifests, docs/realnodes-csi.md): on kwok nodes kwok fakes its pods as it
# does the stand-in's. Its pods reach the API server on the host network, at the port of this
# control plane.
if (( REAL_NODES > 0 )); then
  apiserver_port=$(kc config view -o jsonpath='{.clusters[0].cluster.server}' | sed -n 's#^https\?://[^:/]*:\([0-9]*\).*#\1#p')
  [[ -n "$apiserver_port" ]] || die "no API server port in $KUBECONFIG_OUT"
  sed "s/__APISERVER_PORT__/$apiserver_port/" "$REALNODE_MANIFESTS/trident-csi.yaml" | kc apply -f - >/dev/null \
    || die "applying $REALNODE_MANIFESTS/trident-csi.yaml failed"
  kc apply -f "$REALNODE_MANIFESTS/csidriver.yaml" >/dev/null || die "applying $REALNODE_MANIFESTS/csidriver.yaml failed"
else
  kc apply -f "$MANIFESTS/20-trident-csi.yaml" >/dev/null || die "applying $MANIFESTS/20-trident-csi.yaml failed"
fi

# --- Trident registration simulator ----------------------------------------------------------
# Started before waiting for the DaemonSet, so that it sees the node-plugin pods turn Ready.
(cd "$ROOT" && go build -o "$SIM" ./test/sim) || die "building the Trident simulator (go build ./test/sim) failed"
if ! pid=$(sim_pid); then
  sim_start "$KUBECONFIG_OUT"
elif $restart_sim || [[ "$(sha256sum "$SIM" | cut -d' ' -f1)" != "$(cat "$SIM_SUMFILE" 2>/dev/null)" ]]; then
  log "restarting trident-sim (control plane restarted or binary changed)"
  sim_stop || die "trident-sim (pid $pid) would not stop"
  sim_start "$KUBECONFIG_OUT"
else
  log "trident-sim already running (pid $pid)"
fi
# DaemonSets a test copied from trident-csi (seed B's trident-csi-2) are not part of the
# baseline. Foreground deletion returns once their pods are gone, so that none of them
# terminates (and deregisters the driver) after the baseline is restored below.
strays=$(kc -n trident get ds -l app=node.csi.trident.netapp.io \
  -o jsonpath='{range .items[?(@.metadata.name!="trident-csi")]}{.metadata.name}{" "}{end}') \
  || die "listing DaemonSets in namespace trident failed"
if [[ -n "$strays" ]]; then
  log "deleting DaemonSets left over by tests: $strays"
  # shellcheck disable=SC2086 # one DaemonSet name per word
  kc -n trident delete ds $strays --cascade=foreground --timeout=60s >/dev/null \
    || die "deleting DaemonSets $strays failed"
fi

# --- Real nodes ------------------------------------------------------------------------------
# real-1..real-N: kubelets on containerd (test/realnode/node.sh). Each is Ready when this
# returns; the waits below count them too. Their trident-csi pods need the trident-node image.
real_ds=0
if (( REAL_NODES > 0 )); then
  log "bringing up $REAL_NODES real node(s)"
  ROOT="$ROOT" BIN="$BIN" "$REALNODE_SH" up "$REAL_NODES" 9>&- || die "bringing up the real nodes failed; logs in $CLUSTER_DIR/realnodes/"
  for ((i = 1; i <= REAL_NODES; i++)); do nodes+=("node/real-$i"); done
  ds_image=$(kc -n trident get ds trident-csi -o jsonpath='{.spec.template.spec.containers[0].image}') \
    || die "reading DaemonSet trident/trident-csi failed"
  if [[ ! -f "$BIN/images/trident-node.tar" ]]; then
    log "WARNING: no $BIN/images/trident-node.tar (test/tools/tridentnode): the trident-csi pods on the real nodes cannot start; not waiting for them"
  elif [[ "$ds_image" != remediator.local/trident-node:* ]]; then
    log "WARNING: DaemonSet trident/trident-csi runs $ds_image, not remediator.local/trident-node: its pods on the real nodes cannot start; not waiting for them"
  else
    real_ds=$REAL_NODES
  fi
fi
EXPECTED_NODES=$(( EXPECTED_NODES + REAL_NODES ))
EXPECTED_DS=$(( EXPECTED_NODES - REAL_NODES + real_ds ))

# --- Wait for the baseline -------------------------------------------------------------------
WAIT_START=$SECONDS WAIT_DEADLINE=$((SECONDS + UP_TIMEOUT))

if (( ${#crds[@]} > 0 )); then
  crds_established() { kc wait --for=condition=Established --timeout=5s "${crds[@]}" >/dev/null 2>&1; }
  wait_until "${#crds[@]} CRD(s) established" crds_established \
    || die "CRDs not Established after ${UP_TIMEOUT}s: $(kc get "${crds[@]}" -o wide 2>&1)"
fi

nodes_ready() {
  local ready
  ready=$(kc get "${nodes[@]}" \
    -o jsonpath='{range .items[*]}{.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}' 2>/dev/null \
    | grep -cx True) || true
  (( ready == EXPECTED_NODES ))
}
wait_until "$EXPECTED_NODES nodes Ready" nodes_ready \
  || die "nodes not Ready after ${UP_TIMEOUT}s (kwok-controller heartbeats them; see $LOGS/kwok-controller.log):
$(kc get nodes -o wide 2>&1)"

# Ready pods >= expected rather than == desired: a test may leave extra (unmanaged) nodes behind, whose
# DaemonSet pods never start. observedGeneration guards against reading a stale status right
# after a template change.
ds_ready() {
  local s gen obs ready updated
  s=$(kc -n trident get ds trident-csi \
    -o jsonpath='{.metadata.generation} {.status.observedGeneration} {.status.numberReady} {.status.updatedNumberScheduled}' 2>/dev/null) || return 1
  read -r gen obs ready updated <<<"$s"
  [[ "$gen" == "$obs" ]] && (( ${ready:-0} >= EXPECTED_DS && ${updated:-0} >= EXPECTED_DS ))
}
wait_until "DaemonSet trident/trident-csi has $EXPECTED_DS ready pods" ds_ready \
  || die "DaemonSet trident/trident-csi not ready after ${UP_TIMEOUT}s:
$(kc -n trident get ds,pods -o wide 2>&1)
(scheduling: $LOGS/kube-scheduler.log, pod creation: $LOGS/kube-controller-manager.log, Running/Ready: $LOGS/kwok-controller.log)"

# Every baseline node's CSINode lists the driver. The simulator registers it when a node-plugin
# pod turns Ready, so give it a few seconds after the DaemonSet is ready; a node still without
# it was deregistered earlier (seed B, e.g. by an interrupted test), and the fix is the one from
# the seed: restart its node-plugin pod, whose registrar then registers again.
node_names=("${nodes[@]#node/}")
# Real nodes' CSINodes only when their plugin pods can run (the real kubelet registers it).
if (( real_ds == 0 && REAL_NODES > 0 )); then
  node_names=("${node_names[@]:0:${#node_names[@]}-REAL_NODES}")
fi
unregistered() {
  local out n
  out=$(kc get csinodes -o jsonpath='{range .items[*]}{.metadata.name}{":"}{.spec.drivers[*].name}{" \n"}{end}' 2>/dev/null) \
    || { printf '%s\n' "${node_names[@]}"; return; }
  for n in "${node_names[@]}"; do
    grep -qE "^$n:(.* )?$TRIDENT_DRIVER " <<<"$out" || echo "$n"
  done
}
drivers_registered() {
  sim_pid >/dev/null || die "trident-sim exited; see $SIM_LOG:
$(tail -20 "$SIM_LOG")"
  [[ -z "$(unregistered)" ]]
}
REG_START=$SECONDS
until drivers_registered || (( SECONDS - REG_START >= 10 )); do sleep 1; done
if missing=$(unregistered) && [[ -n "$missing" ]]; then
  for n in $missing; do
    log "CSINode $n lacks $TRIDENT_DRIVER; restarting its node-plugin pod"
    kc -n trident delete pod -l app=node.csi.trident.netapp.io --field-selector "spec.nodeName=$n" \
      --wait=false >/dev/null || die "deleting the node-plugin pod on $n failed"
  done
  wait_until "DaemonSet trident/trident-csi ready again" ds_ready \
    || die "DaemonSet trident/trident-csi not ready again after restarting pods on: $missing"
fi
wait_until "every node's CSINode lists $TRIDENT_DRIVER" drivers_registered \
  || die "CSINodes of $(unregistered | tr '\n' ' ')lack $TRIDENT_DRIVER after ${UP_TIMEOUT}s; see $SIM_LOG:
$(kc get csinodes -o wide 2>&1)
$(tail -20 "$SIM_LOG")"

log "cluster $CLUSTER_NAME ready in $((SECONDS - start))s; KUBECONFIG=$KUBECONFIG_OUT"
