#!/usr/bin/env bash
# Install the Debian packages the local cluster's real nodes need, when missing: containerd
# (with ctr and runc), the CNI plugins (bridge, host-local, loopback in /usr/lib/cni) and
# busybox-static (the busybox image's /bin/busybox). Idempotent: does nothing when all are
# there. They stay installed after `make cluster-down`. Needs root and apt.
set -euo pipefail

PKGS=(containerd containernetworking-plugins busybox-static)

log() { printf '[realnode deps] %s\n' "$*" >&2; }

missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
have_tools() {
  command -v containerd >/dev/null && command -v ctr >/dev/null && command -v runc >/dev/null \
    && [[ -x /usr/lib/cni/bridge && -x /usr/lib/cni/host-local && -x /usr/lib/cni/loopback && -x /bin/busybox ]]
}
if (( ${#missing[@]} == 0 )) && have_tools; then
  exit 0
fi
(( ${#missing[@]} > 0 )) || missing=("${PKGS[@]}")
[[ "$(id -u)" == 0 ]] || { log "ERROR: installing ${missing[*]} needs root"; exit 1; }
command -v apt-get >/dev/null || { log "ERROR: ${missing[*]} missing and no apt-get (Debian/Ubuntu only)"; exit 1; }
log "installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -q >&2
apt-get install -y -q --no-install-recommends "${missing[@]}" >&2
have_tools || { log "ERROR: containerd, ctr, runc, /usr/lib/cni/{bridge,host-local,loopback} or /bin/busybox still missing"; exit 1; }
log "installed ${missing[*]}"
