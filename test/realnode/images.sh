#!/usr/bin/env bash
# Build the real nodes' container images as docker-archive tarballs in $BIN/images/, with
# $BIN/ociimage (release/ociimage): no docker, no registry. test/realnode/node.sh imports
# them into each real node's containerd (ctr -n k8s.io images import).
#
#   pause.tar         registry.k8s.io/pause:3.10           the sandbox image (test/tools/pause)
#   busybox.tar       remediator.local/busybox:latest       Debian's busybox-static, every applet linked
#   trident-node.tar  remediator.local/trident-node:latest  test/tools/tridentnode (skipped while absent)
#   remediator.tar    remediator.local/remediator:latest    $BIN/remediator-controller and $BIN/remediator (make build), as `make image`
#
# Usage: test/realnode/images.sh [pause|busybox|trident-node|remediator]...   (default: all)
#   ROOT, BIN as for test/cluster/up.sh. Each image is rebuilt only when an input is newer.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "${ROOT:-$HERE/../..}" && pwd)"
BIN="${BIN:-$ROOT/bin}"
OUT="$BIN/images"
OCIIMAGE="$BIN/ociimage"
GO="${GO:-go}"

log() { printf '[realnode images] %s\n' "$*" >&2; }
die() { printf '[realnode images] ERROR: %s\n' "$*" >&2; exit 1; }

[[ -x "$OCIIMAGE" ]] || die "missing $OCIIMAGE; build it with 'make bins'"
mkdir -p "$OUT/src"

# fresh TAR INPUT...: true when TAR was built from these very inputs (by content: `make build`
# rewrites bin/remediator every time), this script and ociimage. Otherwise it records the new
# inputs' sum in TAR.sum for the build that follows (removed should that build fail).
fresh() {
  local tar="$1" sum; shift
  sum=$(cat "$OCIIMAGE" "${BASH_SOURCE[0]}" "$@" | sha256sum | cut -d' ' -f1)
  [[ -f "$tar" && "$(cat "$tar.sum" 2>/dev/null)" == "$sum" ]] && return 0
  rm -f "$tar.sum"
  trap 'rm -f "'"$tar"'.sum"' ERR
  echo "$sum" >"$tar.sum.new"
  return 1
}
# built TAR: the build after `fresh` succeeded.
built() { mv -f "$1.sum.new" "$1.sum"; trap - ERR; }

# A static Go binary from the tools module (CGO off: the images hold no libc). The file is
# replaced only when its content changed.
tool_binary() {
  local pkg="$1" out="$2"
  (cd "$ROOT/test/tools" && CGO_ENABLED=0 "$GO" build -trimpath -ldflags '-s -w' -o "$out.new" "./$pkg") \
    || die "go build ./$pkg in test/tools failed"
  if cmp -s "$out.new" "$out"; then rm -f "$out.new"; else mv -f "$out.new" "$out"; fi
}

# Busybox applets as -symlink arguments (bin/sh -> /bin/busybox, ...).
busybox_links() {
  local a
  for a in $(/bin/busybox --list-full); do
    [[ "/$a" == /bin/busybox ]] && continue
    printf -- '-symlink\n/%s:/bin/busybox\n' "$a"
  done
}

# Minimal /etc/passwd and /etc/group: root, and distroless' nonroot (65532).
etc_files() {
  printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' >"$OUT/src/passwd"
  printf 'root:x:0:\nnonroot:x:65532:\n' >"$OUT/src/group"
}

build_pause() {
  tool_binary pause "$OUT/src/pause"
  fresh "$OUT/pause.tar" "$OUT/src/pause" && return
  "$OCIIMAGE" -o "$OUT/pause.tar" -t registry.k8s.io/pause:3.10 \
    -file "$OUT/src/pause:/pause:0755" -entrypoint '["/pause"]' -user 65535:65535
  built "$OUT/pause.tar"
  log "built $OUT/pause.tar (registry.k8s.io/pause:3.10)"
}

build_busybox() {
  [[ -x /bin/busybox ]] || die "/bin/busybox missing: install busybox-static (test/realnode/deps.sh)"
  fresh "$OUT/busybox.tar" /bin/busybox && return
  local links
  mapfile -t links < <(busybox_links)
  "$OCIIMAGE" -o "$OUT/busybox.tar" -t remediator.local/busybox:latest \
    -file /bin/busybox:/bin/busybox:0755 "${links[@]}" \
    -env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin -cmd '["sh"]'
  built "$OUT/busybox.tar"
  log "built $OUT/busybox.tar (remediator.local/busybox:latest, $(( ${#links[@]} / 2 )) applets)"
}

# The Trident-like CSI node plugin at /tridentnode (also /trident-node), entrypoint
# ["/tridentnode"] (the DaemonSet's args pick the mode: plugin, registrar, probe), with busybox
# beside it (a shell to debug with, and mount/umount should the plugin call them).
build_trident_node() {
  if [[ ! -d "$ROOT/test/tools/tridentnode" ]]; then
    log "SKIPPED trident-node: test/tools/tridentnode does not exist yet; real nodes will not run the trident-csi DaemonSet's pods"
    return 0
  fi
  if ! (tool_binary tridentnode "$OUT/src/trident-node"); then
    log "SKIPPED trident-node: test/tools/tridentnode does not build (above)$([[ -f "$OUT/trident-node.tar" ]] && echo "; keeping the older $OUT/trident-node.tar")"
    return 0
  fi
  fresh "$OUT/trident-node.tar" "$OUT/src/trident-node" /bin/busybox && return
  local links
  mapfile -t links < <(busybox_links)
  "$OCIIMAGE" -o "$OUT/trident-node.tar" -t remediator.local/trident-node:latest \
    -file "$OUT/src/trident-node:/tridentnode:0755" -symlink /trident-node:/tridentnode \
    -file /bin/busybox:/bin/busybox:0755 "${links[@]}" \
    -env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin -entrypoint '["/tridentnode"]'
  built "$OUT/trident-node.tar"
  log "built $OUT/trident-node.tar (remediator.local/trident-node:latest)"
}

# The controller's image, as the Dockerfile's (static binaries, user 65532, entrypoint
# /remediator-controller, the CLI as /remediator) but from $BIN and without the
# distroless base.
build_remediator() {
  local b
  for b in remediator remediator-controller; do
    [[ -x "$BIN/$b" ]] || die "missing $BIN/$b; build it with 'make build'"
  done
  etc_files
  local certs=()
  [[ -f /etc/ssl/certs/ca-certificates.crt ]] && certs=(-file /etc/ssl/certs/ca-certificates.crt:/etc/ssl/certs/ca-certificates.crt:0644)
  fresh "$OUT/remediator.tar" "$BIN/remediator" "$BIN/remediator-controller" && return
  "$OCIIMAGE" -o "$OUT/remediator.tar" -t "${REMEDIATOR_IMAGE:-remediator.local/remediator:latest}" \
    -file "$BIN/remediator-controller:/remediator-controller:0755" -file "$BIN/remediator:/remediator:0755" \
    -file "$OUT/src/passwd:/etc/passwd:0644" -file "$OUT/src/group:/etc/group:0644" "${certs[@]}" \
    -user 65532:65532 -entrypoint '["/remediator-controller"]'
  built "$OUT/remediator.tar"
  log "built $OUT/remediator.tar (${REMEDIATOR_IMAGE:-remediator.local/remediator:latest})"
}

targets=("$@")
(( ${#targets[@]} > 0 )) || targets=(pause busybox trident-node remediator)
for t in "${targets[@]}"; do
  case "$t" in
    pause) build_pause ;;
    busybox) build_busybox ;;
    trident-node) build_trident_node ;;
    remediator) build_remediator ;;
    *) die "unknown image $t (pause, busybox, trident-node, remediator)" ;;
  esac
done
