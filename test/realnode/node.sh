#!/usr/bin/env bash
# Real kubelet nodes for the local cluster (docs/development.md, "Real nodes"): each node
# real-N is a kubelet v1.34.2 ($BIN/kubelet) on its own containerd (Debian's, with runc),
# with its own root dir, sockets, ports, CNI bridge rnbrN (10.88.N.0/24) and cgroup root
# /realnodeN, registered with the running control plane as node real-N, labelled
# node.remediator.io/real=true. Every node uses the host's IP; the ports
# differ. Needs root. The control plane must be up (test/cluster/up.sh calls `up`).
#
# Usage: test/realnode/node.sh COMMAND [ARG]
#   up N             bring up (or back) real-1..real-N and wait until they are Ready
#   on NODE          start NODE's containerd if stopped and its kubelet; wait until Ready
#   partition NODE   stop only NODE's kubelet (SIGTERM): its containers keep running, the node
#                    turns Ready=Unknown after kube-controller-manager's grace period (20s)
#   off NODE         power NODE off: kubelet, every container, shim and containerd killed at once,
#                    the node's mounts gone (as after a power cut)
#   down             remove every real node and restore the host (see down_all)
#   list             the real nodes configured on this host
#   ready NODE       exit 0 if NODE is Ready
#   import NODE TAR  import the image archive TAR (docker or OCI) into NODE's containerd
#
# Environment: ROOT, BIN as for test/cluster/up.sh; REALNODE_DOWN_SKIP=bridges|mounts makes
# `down` skip that cleanup step, only to prove that hoststate.sh notices; REALNODE_ROOT (default
# /var/lib/remediator-nodes; keep it short: unix socket paths must stay < 108 bytes).
# State per node under $REALNODE_ROOT/real-N (containerd root/state and socket, kubelet root
# dir real-N/kubelet, CNI config and IPAM, pid files); logs in $BIN/cluster/realnodes/real-N/
# (kept after down). Host state saved at the first bring-up (sysctls, which fixed paths
# existed) in $REALNODE_ROOT/host/, restored by down.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "${ROOT:-$HERE/../..}" && pwd)"
BIN="${BIN:-$ROOT/bin}"
REALNODE_ROOT="${REALNODE_ROOT:-/var/lib/remediator-nodes}"
KUBECONFIG_IN="$BIN/cluster/kubeconfig"
LOGROOT="$BIN/cluster/realnodes"
HOSTDIR="$REALNODE_ROOT/host"
IMAGES_DIR="$BIN/images"
READY_TIMEOUT="${READY_TIMEOUT:-90}"
CGROUP_FS=/sys/fs/cgroup
# Fixed host paths containerd, CNI, the kubelet and mount(8) use whatever their config says;
# down removes those the first bring-up found missing. /var/lib/kubelet: the kubelet's device
# manager socket (device-plugins/kubelet.sock, one path for every kubelet) and hostPath
# volumes of pods that name it. /run/mount: libmount's utab.
FIXED_PATHS=(/run/containerd /var/lib/cni /run/netns /var/log/containers /var/log/pods /var/lib/kubelet /run/mount)
# Sysctls the kubelet (setupKernelTunables, protectKernelDefaults=false) and the CNI bridge
# (isGateway) change; saved at the first bring-up, restored by down. test/realnode/hoststate.sh
# compares all of them.
SYSCTLS=(vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops
  kernel.keys.root_maxkeys kernel.keys.root_maxbytes net.ipv4.ip_forward
  net.ipv4.conf.all.forwarding net.ipv4.conf.default.forwarding net.ipv6.conf.all.forwarding)

log() { printf '[realnode] %s\n' "$*" >&2; }
die() { printf '[realnode] ERROR: %s\n' "$*" >&2; exit 1; }
kc() { "$BIN/kubectl" --kubeconfig "$KUBECONFIG_IN" --request-timeout=10s "$@"; }

node_index() {
  [[ "$1" =~ ^real-([1-9][0-9]?)$ ]] || die "not a real node name: $1 (want real-N)"
  echo "${BASH_REMATCH[1]}"
}
node_dir() { echo "$REALNODE_ROOT/$1"; }
sock() { echo "$(node_dir "$1")/containerd.sock"; }
kubelet_port() { echo $((10350 + 10 * $(node_index "$1"))); }
ctr_() { local n="$1"; shift; ctr --address "$(sock "$n")" -n k8s.io "$@"; }

# The host's own address (the one the default route leaves from): every real node's InternalIP.
host_ip() {
  local ip
  ip=$(ip -4 route get 1.1.1.1 2>/dev/null | awk '{for (i = 1; i < NF; i++) if ($i == "src") {print $(i + 1); exit}}') || true
  [[ -n "$ip" ]] || ip=$(hostname -I 2>/dev/null | awk '{print $1}') || true
  echo "${ip:-127.0.0.1}"
}

# alive PIDFILE PATTERN: print the pid from PIDFILE if that process runs and its command line
# contains PATTERN (a pid from a stale file may have been reused).
alive() {
  local pid
  pid=$(cat "$1" 2>/dev/null) || return 1
  [[ -n "$pid" && -r "/proc/$pid/cmdline" ]] || return 1
  [[ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" != Z ]] || return 1
  [[ "$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null)" == *"$2"* ]] || return 1
  echo "$pid"
}
containerd_pid() { alive "$(node_dir "$1")/containerd.pid" "--config $(node_dir "$1")/containerd.toml"; }
kubelet_pid() { alive "$(node_dir "$1")/kubelet.pid" "--hostname-override=$1 "; }

# Processes by command line, for nodes whose pid files are gone.
pids_matching() { pgrep -f -- "$1" 2>/dev/null | grep -vx "$$" || true; }
shim_pids() { pids_matching "containerd-shim-runc-v2 .*-address $(sock "$1")( |$)"; }
# Every process in the node's cgroups (its pods' containers and sandboxes).
cgroup_pids() {
  local d
  d="$CGROUP_FS/pids/realnode$(node_index "$1")"
  [[ -d "$d" ]] || return 0
  find "$d" -name cgroup.procs -exec cat {} + 2>/dev/null | sort -un || true
}

# detach LOG PIDFILE CMD...: start CMD in its own session, detached from this script (it
# survives it), appending to LOG.
detach() {
  local logf="$1" pidf="$2"; shift 2
  printf '=== %s started %s\n' "$(date -Is)" "$*" >>"$logf"
  # No job control here, so the background child is not a group leader and setsid execs
  # directly: $! is the command's own pid. 9>&-: not up.sh's lock.
  setsid nohup "$@" >>"$logf" 2>&1 </dev/null 9>&- &
  echo $! >"$pidf"
}

# stop_pid PID SECONDS: SIGTERM, then SIGKILL after SECONDS.
stop_pid() {
  local pid="$1" t="$2" i
  kill -TERM "$pid" 2>/dev/null || return 0
  for ((i = 0; i < t * 10; i++)); do
    kill -0 "$pid" 2>/dev/null || return 0
    [[ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" == Z ]] && return 0
    sleep 0.1
  done
  kill -KILL "$pid" 2>/dev/null || true
}

# ---------------------------------------------------------------------------------------------
# Host state saved once, at the first bring-up (kept until down).
save_host_state() {
  [[ -f "$HOSTDIR/saved" ]] && return 0
  mkdir -p "$HOSTDIR"
  local k p
  for k in "${SYSCTLS[@]}"; do
    [[ -e "/proc/sys/${k//.//}" ]] && printf '%s=%s\n' "$k" "$(sysctl -n "$k")"
  done >"$HOSTDIR/sysctl.orig"
  for p in "${FIXED_PATHS[@]}"; do
    [[ -e "$p" ]] || echo "$p"
  done >"$HOSTDIR/created-paths"
  { ls -1 /run/netns 2>/dev/null || true; } >"$HOSTDIR/netns.orig"
  touch "$HOSTDIR/saved"
}

# REALNODE_ROOT is a shared bind mount of itself: the trident-csi DaemonSet mounts it into its
# pods with mountPropagation Bidirectional, which containerd allows only from a shared mount
# (the host's / is private here). The kubelets' root dirs below it are shared mounts too (the
# kubelet makes them so itself).
ensure_shared_root() {
  if ! awk -v d="$REALNODE_ROOT" '$5 == d' /proc/self/mountinfo | grep -q .; then
    mount --bind "$REALNODE_ROOT" "$REALNODE_ROOT"
  fi
  mount --make-rshared "$REALNODE_ROOT"
}

# ---------------------------------------------------------------------------------------------
# Per-node configuration (rewritten on every bring-up; the same inputs give the same files).
write_configs() {
  local n="$1" i dir port
  i=$(node_index "$n")
  dir=$(node_dir "$n")
  port=$(kubelet_port "$n")
  mkdir -p "$dir"/{containerd/root,containerd/state,net.d,cni-ipam,kubelet,pod-logs,volume-plugins} "$LOGROOT/$n"
  cat >"$dir/containerd.toml" <<EOF
version = 2
root = "$dir/containerd/root"
state = "$dir/containerd/state"
# Only what the CRI needs; avoid plugins that use fixed host paths.
disabled_plugins = ["io.containerd.internal.v1.opt", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs", "io.containerd.tracing.processor.v1.otlp"]
[grpc]
  address = "$dir/containerd.sock"
[ttrpc]
  address = "$dir/containerd.sock.ttrpc"
[debug]
  address = ""
[metrics]
  address = ""
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "registry.k8s.io/pause:3.10"
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_selinux = false
  disable_apparmor = true
  # This VM withholds CAP_SYS_RESOURCE even from root: lowering oom_score_adj (sandbox -998)
  # fails in runc ("can't get final child's PID from pipe: EOF"). Clamp to containerd's own.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$dir/net.d"
    max_conf_num = 1
EOF
  cat >"$dir/net.d/10-realnode.conflist" <<EOF
{
  "cniVersion": "0.4.0",
  "name": "realnode$i",
  "plugins": [
    {"type": "bridge", "bridge": "rnbr$i", "isGateway": true, "ipMasq": false, "hairpinMode": true,
     "ipam": {"type": "host-local", "dataDir": "$dir/cni-ipam",
              "ranges": [[{"subnet": "10.88.$i.0/24"}]], "routes": [{"dst": "0.0.0.0/0"}]}},
    {"type": "loopback"}
  ]
}
EOF
  cat >"$dir/kubelet-config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: 0.0.0.0
port: $port
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $((port + 1))
# The API server has no kubelet client certificate: logs/exec are allowed to anyone who
# reaches the port (this host only runs test clusters).
authentication:
  anonymous: {enabled: true}
  webhook: {enabled: false}
authorization:
  mode: AlwaysAllow
cgroupDriver: cgroupfs
cgroupRoot: /realnode$i
cgroupsPerQOS: true
failSwapOn: false
containerRuntimeEndpoint: unix://$dir/containerd.sock
imageServiceEndpoint: unix://$dir/containerd.sock
podLogsDir: $dir/pod-logs
volumePluginDir: $dir/volume-plugins
resolvConf: /etc/resolv.conf
makeIPTablesUtilChains: false
# Renew the node Lease every 5s; kube-controller-manager's 20s grace then marks a stopped
# kubelet's node Ready=Unknown in ~20-25s.
nodeLeaseDurationSeconds: 20
nodeStatusUpdateFrequency: 5s
evictionHard: {"memory.available": "100Mi", "nodefs.available": "1%", "imagefs.available": "1%", "nodefs.inodesFree": "1%"}
# The images come from tarballs, not a registry: never garbage-collect them (100 disables it).
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
registerNode: true
EOF
}

ensure_cgroups() {
  local i="$1" c d
  for c in "$CGROUP_FS"/*/; do
    c=${c%/}
    [[ "$(basename "$c")" == unified ]] && continue
    [[ -f "$c/cgroup.procs" ]] || continue
    d="$c/realnode$i"
    [[ -d "$d" ]] && continue
    mkdir "$d"
    # A new cpuset cgroup starts with no CPUs and no memory nodes.
    if [[ -f "$c/cpuset.cpus" ]]; then
      cat "$c/cpuset.cpus" >"$d/cpuset.cpus"
      cat "$c/cpuset.mems" >"$d/cpuset.mems"
    fi
  done
}

start_containerd() {
  local n="$1" dir pid i
  dir=$(node_dir "$n")
  if pid=$(containerd_pid "$n"); then
    return 0
  fi
  # A containerd from a lost pid file would hold the socket.
  for pid in $(pids_matching "^containerd --config $dir/containerd.toml"); do kill -KILL "$pid" 2>/dev/null || true; done
  rm -f "$dir/containerd.sock" "$dir/containerd.sock.ttrpc"
  detach "$LOGROOT/$n/containerd.log" "$dir/containerd.pid" containerd --config "$dir/containerd.toml"
  for ((i = 0; i < 150; i++)); do
    ctr --address "$dir/containerd.sock" version >/dev/null 2>&1 && return 0
    containerd_pid "$n" >/dev/null || die "containerd of $n exited; see $LOGROOT/$n/containerd.log:
$(tail -20 "$LOGROOT/$n/containerd.log")"
    sleep 0.1
  done
  die "containerd of $n not serving after 15s; see $LOGROOT/$n/containerd.log"
}

# Import every image tarball not yet in the node's containerd (by the archive's config digest).
import_images() {
  local n="$1" t have cfg
  have=$(ctr_ "$n" images ls 2>/dev/null | awk 'NR > 1 {print $1}') || have=""
  for t in "$IMAGES_DIR"/*.tar; do
    [[ -f "$t" ]] || continue
    # The tag and config digest recorded in the archive; re-import when either is new.
    cfg=$(tar -xOf "$t" manifest.json 2>/dev/null | tr -d '\n') || cfg=""
    if [[ -f "$(node_dir "$n")/imported/$(basename "$t")" && "$(cat "$(node_dir "$n")/imported/$(basename "$t")")" == "$cfg" ]] \
      && grep -qxF "$(sed -E 's/.*"RepoTags":\["([^"]+)".*/\1/' <<<"$cfg")" <<<"$have"; then
      continue
    fi
    ctr_ "$n" images import "$t" >/dev/null || die "importing $t into $n's containerd failed"
    mkdir -p "$(node_dir "$n")/imported"
    echo "$cfg" >"$(node_dir "$n")/imported/$(basename "$t")"
  done
}

start_kubelet() {
  local n="$1" dir pid
  dir=$(node_dir "$n")
  kubelet_pid "$n" >/dev/null && return 0
  for pid in $(pids_matching "^$BIN/kubelet .*--hostname-override=$n "); do kill -KILL "$pid" 2>/dev/null || true; done
  [[ -f "$KUBECONFIG_IN" ]] || die "no kubeconfig $KUBECONFIG_IN: is the cluster up (make cluster)?"
  # --node-ip: the host's; both nodes share it and differ by port (kubelet_port).
  detach "$LOGROOT/$n/kubelet.log" "$dir/kubelet.pid" "$BIN/kubelet" --config="$dir/kubelet-config.yaml" \
    --kubeconfig="$KUBECONFIG_IN" --root-dir="$dir/kubelet" --cert-dir="$dir/pki" --hostname-override="$n" \
    --node-ip="$(host_ip)" --node-labels=node.remediator.io/real=true --v=2
}

ready() {
  [[ "$(kc get node "$1" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" == True ]]
}

# ready_since NODE EPOCH: Ready, with a heartbeat from the kubelet at or after EPOCH (a node
# powered off a moment ago still shows the Ready=True of its last heartbeat).
ready_since() {
  local s hb
  s=$(kc get node "$1" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status} {.status.conditions[?(@.type=="Ready")].lastHeartbeatTime}' 2>/dev/null) || return 1
  read -r s hb <<<"$s"
  [[ "$s" == True && -n "$hb" ]] && (( $(date -d "$hb" +%s) >= $2 ))
}

wait_ready() {
  local n="$1" start=$SECONDS since
  since=$(( $(date +%s) - 1 ))
  until ready_since "$n" "$since"; do
    kubelet_pid "$n" >/dev/null || die "kubelet of $n exited; see $LOGROOT/$n/kubelet.log:
$(tail -20 "$LOGROOT/$n/kubelet.log")"
    (( SECONDS - start < READY_TIMEOUT )) || die "$n not Ready after ${READY_TIMEOUT}s; see $LOGROOT/$n/kubelet.log"
    sleep 0.5
  done
}

node_on() {
  local n="$1" i t0=$SECONDS
  i=$(node_index "$n")
  [[ "$(id -u)" == 0 ]] || die "real nodes need root"
  save_host_state
  ensure_shared_root
  write_configs "$n"
  ensure_cgroups "$i"
  start_containerd "$n"
  import_images "$n"
  if kubelet_pid "$n" >/dev/null && ready "$n"; then
    log "$n Ready (kubelet already running)"
    return 0
  fi
  start_kubelet "$n"
  wait_ready "$n"
  log "$n Ready ($((SECONDS - t0))s; kubelet :$(kubelet_port "$n"), containerd $(sock "$n"))"
}

node_partition() {
  local n="$1" pid
  node_index "$n" >/dev/null
  if pid=$(kubelet_pid "$n"); then
    stop_pid "$pid" 10
    log "$n partitioned: kubelet (pid $pid) stopped, containers left running"
  else
    log "$n: kubelet not running"
  fi
  rm -f "$(node_dir "$n")/kubelet.pid"
}

# Stop every process of node N at once, as a power cut would: freeze them all (SIGSTOP, so
# that no shim reports a container's exit and no kubelet reacts), then SIGKILL.
kill_node() {
  local n="$1" pids=() p round
  for round in 1 2 3 4 5; do
    pids=()
    p=$(kubelet_pid "$n") && pids+=("$p")
    p=$(containerd_pid "$n") && pids+=("$p")
    mapfile -t -O "${#pids[@]}" pids < <(pids_matching "^$BIN/kubelet .*--hostname-override=$n ")
    mapfile -t -O "${#pids[@]}" pids < <(pids_matching "^containerd --config $(node_dir "$n")/containerd.toml")
    mapfile -t -O "${#pids[@]}" pids < <(shim_pids "$n")
    mapfile -t -O "${#pids[@]}" pids < <(cgroup_pids "$n")
    (( ${#pids[@]} == 0 )) && break
    kill -STOP "${pids[@]}" 2>/dev/null || true
    kill -KILL "${pids[@]}" 2>/dev/null || true
    sleep 0.2
  done
  rm -f "$(node_dir "$n")/kubelet.pid" "$(node_dir "$n")/containerd.pid"
  # Wait until none is left (zombies of ours excepted).
  for ((round = 0; round < 50; round++)); do
    [[ -z "$(kubelet_pid "$n"; shim_pids "$n"; cgroup_pids "$n"; pids_matching "^containerd --config $(node_dir "$n")/containerd.toml")" ]] && return 0
    sleep 0.1
  done
  die "processes of $n still running after SIGKILL: $(shim_pids "$n") $(cgroup_pids "$n")"
}

# unmount_under DIR...: unmount every mount at or below DIR, deepest first.
unmount_under() {
  local d m
  for d in "$@"; do
    [[ -e "$d" ]] || continue
    for _ in 1 2 3; do
      mapfile -t mounts < <(awk -v d="$d" '$5 == d || index($5, d "/") == 1 {print $5}' /proc/self/mountinfo | awk '{print length, $0}' | sort -rn | cut -d' ' -f2- | uniq)
      (( ${#mounts[@]} == 0 )) && break
      for m in "${mounts[@]}"; do
        umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true
      done
    done
  done
}

node_off() {
  local n="$1"
  node_index "$n" >/dev/null
  kill_node "$n"
  # After a power cut nothing stays mounted: the kubelet's volumes, the containers' root
  # filesystems and shm. (The network namespaces of its sandboxes stay until the kubelet tears
  # them down after node-on, or down removes them.)
  unmount_under "$(node_dir "$n")"
  log "$n powered off (kubelet, containers, shims, containerd killed; mounts gone)"
}

# ---------------------------------------------------------------------------------------------
nodes_on_host() {
  local d
  for d in "$REALNODE_ROOT"/real-*/; do
    [[ -d "$d" ]] && basename "$d"
  done | sort -t- -k2 -n
}

node_up_all() {
  local want="$1" i
  [[ "$want" =~ ^[0-9]+$ ]] || die "up: want a number of nodes, got '$want'"
  (( want > 0 )) || return 0
  "$HERE/deps.sh"
  "$HERE/images.sh"
  [[ -f "$IMAGES_DIR/trident-node.tar" ]] \
    || log "WARNING: no $IMAGES_DIR/trident-node.tar: the trident-csi DaemonSet's pods on real nodes cannot start"
  for ((i = 1; i <= want; i++)); do
    node_on "real-$i"
    # The baseline: schedulable, without an out-of-service taint a test left.
    kc patch node "real-$i" --type=merge -p '{"spec":{"unschedulable":null}}' >/dev/null || true
    kc taint node "real-$i" node.kubernetes.io/out-of-service- >/dev/null 2>&1 || true
  done
}

# Remove every real node and restore the host, in this order: their pods deleted through the
# API (so the kubelet tears their networks down through CNI) and their Node objects, the
# kubelets, every container, shim and containerd killed, mounts under REALNODE_ROOT and
# /run/containerd unmounted (deepest first), the sandboxes' network namespaces, the bridges
# rnbr* and their veths deleted, the cgroups realnode* removed, the sysctls and fixed paths
# restored as the first bring-up found them, REALNODE_ROOT removed.
down_all() {
  local nodes n p skip
  mapfile -t nodes < <(nodes_on_host)
  if (( ${#nodes[@]} > 0 )) && [[ -f "$KUBECONFIG_IN" ]] && kc get --raw /readyz >/dev/null 2>&1; then
    for n in "${nodes[@]}"; do
      kubelet_pid "$n" >/dev/null || continue
      # Cordon + delete the pods; the DaemonSet controller still creates pods for an existing
      # node, so the Node object goes first (the kubelet keeps tearing its pods down).
      kc delete node "$n" --wait=false >/dev/null 2>&1 || true
      kc delete pods -A --field-selector "spec.nodeName=$n" --wait=false >/dev/null 2>&1 || true
    done
    local start=$SECONDS left
    for n in "${nodes[@]}"; do
      kubelet_pid "$n" >/dev/null || continue
      while left=$(kc get pods -A --field-selector "spec.nodeName=$n" -o name 2>/dev/null) && [[ -n "$left" ]]; do
        (( SECONDS - start < 45 )) || { log "pods on $n not gone after 45s; killing them with the node"; break; }
        sleep 0.5
      done
    done
    for n in "${nodes[@]}"; do
      kc delete node "$n" --wait=false >/dev/null 2>&1 || true
      kc delete pods -A --field-selector "spec.nodeName=$n" --grace-period=0 --force >/dev/null 2>&1 || true
    done
  fi
  for n in "${nodes[@]}"; do
    p=$(kubelet_pid "$n") && stop_pid "$p" 10
    kill_node "$n"
  done
  # Processes no pid file or node dir accounts for (e.g. REALNODE_ROOT removed by hand).
  for p in $(pids_matching "^$BIN/kubelet .*--hostname-override=real-") \
    $(pids_matching "^containerd --config $REALNODE_ROOT/") \
    $(pids_matching "containerd-shim-runc-v2 .*-address $REALNODE_ROOT/"); do
    kill -KILL "$p" 2>/dev/null || true
  done
  skip=${REALNODE_DOWN_SKIP:-}
  [[ "$skip" == mounts ]] || unmount_under "$REALNODE_ROOT" /run/containerd
  # Network namespaces containerd created for sandboxes (not those there before).
  local ns
  for ns in /run/netns/cni-*; do
    [[ -e "$ns" ]] || continue
    grep -qxF "$(basename "$ns")" "$HOSTDIR/netns.orig" 2>/dev/null && continue
    umount "$ns" 2>/dev/null || umount -l "$ns" 2>/dev/null || true
    rm -f "$ns"
  done
  # Bridges rnbr* and whatever veths are still attached to them.
  local br l
  [[ "$skip" == bridges ]] || for br in $(ip -o link show type bridge 2>/dev/null | awk -F': ' '{print $2}' | cut -d@ -f1 | grep '^rnbr' || true); do
    for l in $(ip -o link show master "$br" 2>/dev/null | awk -F': ' '{print $2}' | cut -d@ -f1); do
      ip link delete "$l" 2>/dev/null || true
    done
    ip link delete "$br" 2>/dev/null || true
  done
  # cgroups, deepest first (a cgroup with tasks cannot be removed: kill_node emptied them).
  local c
  for c in "$CGROUP_FS"/*/realnode*; do
    [[ -d "$c" ]] || continue
    find "$c" -depth -type d -exec rmdir {} + 2>/dev/null || true
    [[ -d "$c" ]] && log "WARNING: cgroup $c still there: $(cat "$c"/cgroup.procs 2>/dev/null | tr '\n' ' ')"
  done
  # sysctls as the first bring-up found them.
  if [[ -f "$HOSTDIR/sysctl.orig" ]]; then
    local kv k v
    while IFS= read -r kv; do
      k=${kv%%=*} v=${kv#*=}
      [[ "$(sysctl -n "$k" 2>/dev/null)" == "$v" ]] || sysctl -q -w "$k=$v" >/dev/null || log "WARNING: could not restore $k=$v"
    done <"$HOSTDIR/sysctl.orig"
  fi
  if [[ -f "$HOSTDIR/created-paths" ]]; then
    while IFS= read -r p; do
      [[ -n "$p" && -e "$p" ]] || continue
      unmount_under "$p"
      rm -rf --one-file-system "$p"
    done <"$HOSTDIR/created-paths"
  fi
  if [[ "$skip" == mounts ]]; then
    log "REALNODE_DOWN_SKIP=mounts: leaving the mounts under $REALNODE_ROOT"
  else
    unmount_under "$REALNODE_ROOT"
    rm -rf --one-file-system "$REALNODE_ROOT"
  fi
  (( ${#nodes[@]} == 0 )) || log "real nodes ${nodes[*]} removed; host restored"
}

cmd="${1:-}"
case "$cmd" in
  up) node_up_all "${2:?up N}" ;;
  on) node_on "${2:?on NODE}" ;;
  partition) node_partition "${2:?partition NODE}" ;;
  off) node_off "${2:?off NODE}" ;;
  down) down_all ;;
  list) nodes_on_host ;;
  ready) ready "${2:?ready NODE}" ;;
  import) ctr_ "${2:?import NODE TAR}" images import "${3:?import NODE TAR}" >/dev/null ;;
  *) die "usage: $0 up N | on NODE | partition NODE | off NODE | down | list | ready NODE" ;;
esac
