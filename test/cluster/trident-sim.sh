# shellcheck shell=bash
# Helpers for the Trident registration simulator (test/sim), sourced by up.sh and down.sh.
# It plays kubelet's plugin watcher for csi.trident.netapp.io, which kwok does not: it keeps
# the nodes' CSINode driver lists in line with the node-plugin pods (and reproduces seed B).
# It runs as a plain background process next to the cluster, not under kwokctl.
#
# Needs BIN, CLUSTER_DIR and log() from the sourcing script.

SIM="$BIN/trident-sim"
SIM_PIDFILE="$CLUSTER_DIR/trident-sim.pid"
SIM_LOG="$CLUSTER_DIR/trident-sim.log"
# sha256 of the binary the running simulator was started from, to notice a rebuilt one.
SIM_SUMFILE="$CLUSTER_DIR/trident-sim.sha256"
TRIDENT_DRIVER=csi.trident.netapp.io

# sim_pid prints the simulator's pid if it is running. The command line is checked because a
# pid from a stale file may have been reused.
sim_pid() {
  local pid
  pid=$(cat "$SIM_PIDFILE" 2>/dev/null) || return 1
  [[ -n "$pid" && "$(tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline")" == "$SIM "* ]] || return 1
  [[ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" != Z ]] || return 1
  echo "$pid"
}

# sim_stop stops the simulator (SIGTERM, then SIGKILL after 5s) and removes its pid file.
sim_stop() {
  local pid
  if pid=$(sim_pid); then
    log "stopping trident-sim (pid $pid)"
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 50); do
      sim_pid >/dev/null || break
      sleep 0.1
    done
    if sim_pid >/dev/null; then
      log "trident-sim did not stop on SIGTERM; killing it"
      kill -KILL "$pid" 2>/dev/null || true
      for _ in $(seq 20); do
        sim_pid >/dev/null || break
        sleep 0.1
      done
    fi
    sim_pid >/dev/null && return 1
  fi
  rm -f "$SIM_PIDFILE" "$SIM_SUMFILE"
}

# sim_start KUBECONFIG starts the simulator in the background, logging to $SIM_LOG.
# </dev/null and 9>&-: like the kwokctl components, it outlives the script and must not keep
# our stdin or the lock (fd 9) open. setsid: a Ctrl-C on `make cluster` must not kill it.
sim_start() {
  printf '\n==> %s starting %s\n' "$(date -u +%FT%TZ)" "$SIM" >>"$SIM_LOG"
  setsid "$SIM" --kubeconfig "$1" >>"$SIM_LOG" 2>&1 </dev/null 9>&- &
  echo $! >"$SIM_PIDFILE"
  sha256sum "$SIM" | cut -d' ' -f1 >"$SIM_SUMFILE"
  log "started trident-sim (pid $!, log $SIM_LOG)"
}
