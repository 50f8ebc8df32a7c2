#!/usr/bin/env bash
# The seed runbook for a stuck LUKS Lease (incident A), as an operator would script it
# with kubectl, one incident at a time: pod -> PVC -> PV -> Lease -> holder (and the
# Lease's events) -> node -> pods on the node -> delete. It is the alternative a user
# has to the controller; make bench runs it on the same cluster, in the same run.
#
# Usage: runbook.sh KUBECTL KUBECONFIG NAMESPACE POD [TRIDENT_NAMESPACE]
# Deletes the Lease only when the holder node is shut down (Ready not True and the
# out-of-service or cloud shutdown taint), as the runbook allows; exits 1 otherwise.
set -euo pipefail
KUBECTL=$1 KUBECONFIG=$2 NS=$3 POD=$4 TRIDENT=${5:-trident}
k() { "$KUBECTL" --kubeconfig "$KUBECONFIG" "$@"; }

claim=$(k get pod -n "$NS" "$POD" -o jsonpath='{.spec.volumes[*].persistentVolumeClaim.claimName}')   # 1
pv=$(k get pvc -n "$NS" "$claim" -o jsonpath='{.spec.volumeName}')                                     # 2
ref=$(k get pv "$pv" -o jsonpath='{.spec.claimRef.namespace}/{.spec.claimRef.name}')                  # 3
[[ "$ref" == "$NS/$claim" ]] || { echo "PV $pv is bound to $ref, not $NS/$claim" >&2; exit 1; }
holder=$(k get lease -n "$TRIDENT" "$pv" -o jsonpath='{.spec.holderIdentity}')                         # 4
k get events -n "$TRIDENT" --field-selector "involvedObject.kind=Lease,involvedObject.name=$pv" -o name >/dev/null  # 5
state=$(k get node "$holder" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status} {.spec.taints[*].key}')  # 6
ready=${state%% *}
if [[ "$ready" == "True" || ( "$state" != *node.kubernetes.io/out-of-service* && "$state" != *node.cloudprovider.kubernetes.io/shutdown* ) ]]; then
  echo "holder $holder is not shut down ($state); not deleting" >&2
  exit 1
fi
k get pods -A --field-selector "spec.nodeName=$holder" -o name >/dev/null                               # 7
k delete lease -n "$TRIDENT" "$pv" >/dev/null                                                           # 8
