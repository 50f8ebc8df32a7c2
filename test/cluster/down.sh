#!/usr/bin/env bash
# Tear down the Remediator local cluster created by test/cluster/up.sh, the Trident simulator
# it started and its real nodes (test/realnode/node.sh down, which restores the host), and make
# sure none of their processes survive. Idempotent: succeeds (and does nothing) when no cluster
# exists. Real nodes are removed whether or not REAL_NODES is set.
#
# Usage: test/cluster/down.sh   (no arguments)
#   ROOT   repo root                      (default: two directories above this script)
#   BIN    directory holding the binaries (default: $ROOT/bin); the cluster lives in $BIN/cluster
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "${ROOT:-$HERE/../..}" && pwd)"
BIN="${BIN:-$ROOT/bin}"

CLUSTER_NAME=remediator
CLUSTER_DIR="$BIN/cluster"
WORKDIR="$CLUSTER_DIR/clusters/$CLUSTER_NAME"

log() { printf '[cluster down] %s\n' "$*" >&2; }
die() { printf '[cluster down] ERROR: %s\n' "$*" >&2; exit 1; }

REALNODE_SH="$ROOT/test/realnode/node.sh"
# Real nodes (REAL_NODES=N) first, while the API server is there to delete their pods through
# (so their kubelets tear the pods' networks down); then the host is restored. Nothing to do
# when none was ever started (no /var/lib/remediator-nodes).
realnodes_down() {
  ROOT="$ROOT" BIN="$BIN" "$REALNODE_SH" down 9>&- || die "removing the real nodes failed"
}

# An envtest control plane (bin/etcd and bin/kube-apiserver with a k8s_test_framework
# directory) outlives a test binary that died before its teardown (a panic): the host must
# not keep it. Only orphans (parent 1): a running test's own are its children.
for pid in $(pgrep -f -- "^$BIN/(etcd|kube-apiserver) .*k8s_test_framework_" || true); do
  [[ "$(awk '{print $4}' "/proc/$pid/stat" 2>/dev/null)" == 1 ]] || continue
  log "killing envtest process $pid left by a test that did not stop it"
  kill -KILL "$pid" 2>/dev/null || true
done

if [[ ! -d "$CLUSTER_DIR" ]]; then
  realnodes_down
  log "no cluster under $CLUSTER_DIR; nothing to do"
  exit 0
fi

exec 9>"$CLUSTER_DIR/.lock"
flock -w 600 9 || die "timed out waiting for another up.sh/down.sh holding $CLUSTER_DIR/.lock"

realnodes_down

# The Trident simulator first, while the apiserver it watches is still there.
# shellcheck source=trident-sim.sh
. "$HERE/trident-sim.sh"
sim_stop || die "trident-sim (pid $(sim_pid)) would not stop"
# A simulator whose pid file is gone would still be running from $SIM; none may be left.
for pid in $(pgrep -f -- "^$SIM " || true); do
  log "killing leftover trident-sim $pid"
  kill -KILL "$pid" 2>/dev/null || true
done

# kwokctl starts every component through a symlink under $WORKDIR/bin, so a command line that
# starts with that absolute path identifies this cluster's processes and nothing else (not even
# e.g. a `tail -f` on its logs).
cluster_pids() {
  local pid
  for pid in $(pgrep -f -- "^$WORKDIR/bin/" || true); do
    # Skip ourselves and processes that are already exiting (zombies keep no cmdline anyway).
    [[ "$pid" == "$$" ]] && continue
    [[ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" == Z ]] && continue
    echo "$pid"
  done
}

# Remember the pids before kwokctl deletes the pid files with the workdir.
pids=()
if [[ -d "$WORKDIR/pids" ]]; then
  for f in "$WORKDIR"/pids/*.pid; do
    [[ -f "$f" ]] && pids+=("$(cat "$f")")
  done
fi

if [[ -f "$WORKDIR/kwok.yaml" ]]; then
  log "deleting cluster $CLUSTER_NAME"
  # --kubeconfig: kwokctl removes the cluster's context from this file (its default is
  # ~/.kube/config, which up.sh never writes to). KWOK_WORKDIR: where up.sh created it.
  KWOK_WORKDIR="$CLUSTER_DIR" "$BIN/kwokctl" --name "$CLUSTER_NAME" delete cluster \
    --kubeconfig="$CLUSTER_DIR/kubeconfig" </dev/null 9>&- \
    || log "kwokctl delete cluster failed; killing the processes directly"
fi

# kwokctl sends SIGKILL but does not wait for processes it did not start itself, and a crashed
# kwokctl can leave processes without pid files: sweep both sources until nothing is left.
mapfile -t leftover < <( { printf '%s\n' "${pids[@]}"; cluster_pids; } | sort -un | grep -v '^$' || true)
for pid in "${leftover[@]}"; do
  # Only kill pids that still belong to this cluster (a pid from a stale file may be reused).
  if [[ "$(tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline")" == "$WORKDIR/bin/"* ]]; then
    log "killing leftover process $pid: $(tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline" | cut -c1-120)"
    kill -KILL "$pid" 2>/dev/null || true
  fi
done
for _ in $(seq 50); do
  [[ -z "$(cluster_pids)" ]] && break
  sleep 0.2
done
if [[ -n "$(cluster_pids)" ]]; then
  die "processes of cluster $CLUSTER_NAME still running: $(cluster_pids | tr '\n' ' ')"
fi
if pgrep -f -- "^$SIM " >/dev/null; then
  die "trident-sim still running: $(pgrep -f -- "^$SIM " | tr '\n' ' ')"
fi

# Remove the rest of the state up.sh created (kubeconfig, fingerprint, kwokctl's cache dir).
rm -rf "$WORKDIR" "$CLUSTER_DIR/kubeconfig" "$CLUSTER_DIR/kubeconfig.tmp" \
  "$CLUSTER_DIR/fingerprint" "$CLUSTER_DIR/get-kubeconfig.err" "$CLUSTER_DIR/kubectl-cache"
rmdir "$CLUSTER_DIR/clusters" 2>/dev/null || true
log "cluster $CLUSTER_NAME is down; no process left"
