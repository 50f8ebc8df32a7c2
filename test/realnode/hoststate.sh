#!/usr/bin/env bash
# Record, or compare with a record, the host state real nodes change (test/realnode/node.sh):
# processes (kubelet, containerd, shims, pause), mounts, network links and namespaces, cgroups,
# sysctls, and the fixed paths containerd, CNI and the kubelet use. `make cluster-down` must
# leave the host as `snapshot` found it; host_test.go runs both around a bring-up.
#
# Usage: test/realnode/hoststate.sh snapshot FILE   record the state in FILE
#        test/realnode/hoststate.sh compare FILE    exit 1, listing every difference, if the
#                                                   host differs from FILE
#        test/realnode/hoststate.sh show            print the state
set -euo pipefail

REALNODE_ROOT="${REALNODE_ROOT:-/var/lib/remediator-nodes}"

# Sysctls that change on their own (counters, random state, clocks): not compared.
VOLATILE='^(fs\.(dentry-state|file-nr|inode-nr|inode-state|quota\.)|kernel\.(ns_last_pid|random\.|pty\.nr|tainted|sched_domain)|net\.netfilter\.nf_conntrack_count|net\.ipv[46]\.(conf|neigh)\.|net\.ipv4\.tcp_.*mem|vm\.(nr_|stat_refresh)|dev\.cdrom|fs\.binfmt_misc\.|kernel\.perf_event_max)'

state() {
  echo "## processes (kubelet, containerd, shims, pause, node busybox)"
  ps -eo args= | grep -E '(^|/)(kubelet|containerd|containerd-shim[^ ]*|pause)( |$)' | grep -v -E '^grep ' | sort || true
  echo "## mounts (mount point, type)"
  awk '{for (i = 7; $i != "-"; i++); print $5, $(i + 1)}' /proc/self/mountinfo \
    | grep -E "$REALNODE_ROOT|/run/containerd|/run/netns|/var/run/netns|/var/lib/kubelet|/var/lib/cni| overlay$| nsfs$|/realnode" | sort || true
  echo "## links (name, kind)"
  ip -o -d link show 2>/dev/null | awk -F': ' '{split($2, n, "@"); kind = ""; if ($0 ~ / bridge /) kind = "bridge"; else if ($0 ~ / veth /) kind = "veth"; print n[1], kind}' | sort
  echo "## addresses"
  ip -o addr show 2>/dev/null | awk '{print $2, $3, $4}' | sort
  echo "## netns"
  ls -1 /run/netns 2>/dev/null | sort || true
  echo "## cgroups"
  ls -1d /sys/fs/cgroup/*/realnode* /sys/fs/cgroup/*/kubepods* 2>/dev/null | sort || true
  echo "## sysctls"
  sysctl -a 2>/dev/null | grep -v -E "$VOLATILE" | sort || true
  echo "## paths"
  for p in "$REALNODE_ROOT" /run/containerd /var/lib/cni /run/netns /var/log/containers /var/log/pods \
    /var/lib/kubelet /var/lib/containerd /run/runc /etc/cni /opt/cni /etc/kubernetes /opt/containerd /run/containerd-shim; do
    [[ -e "$p" ]] && echo "$p"
  done
  # New entries in the directories a daemon would write to by default.
  for d in /run /var/lib /var/log /var/run /etc /opt; do
    ls -1A "$d" 2>/dev/null | sed "s|^|$d/|"
  done | grep -v -E '^/var/lib/(apt|dpkg)|^/var/log/(apt|dpkg|journal|alternatives)|^/run/(user|lock|utmp)|^/etc/(ld\.so\.cache|mtab)$' | sort
  echo "## iptables"
  { iptables-save 2>/dev/null || true; } | grep -v -E '^#|^:|^COMMIT|^\*' | sort || true
}

case "${1:-}" in
  snapshot) state >"${2:?snapshot FILE}" ;;
  show) state ;;
  compare)
    f="${2:?compare FILE}"
    [[ -f "$f" ]] || { echo "no snapshot $f" >&2; exit 2; }
    if d=$(diff <(cat "$f") <(state)); then
      echo "host state unchanged since $f"
    else
      echo "host state differs from $f (< before, > now):"
      echo "$d"
      exit 1
    fi
    ;;
  *) echo "usage: $0 snapshot FILE | compare FILE | show" >&2; exit 2 ;;
esac
