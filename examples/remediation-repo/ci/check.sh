#!/usr/bin/env bash
# The pull-request check of a remediation repository: tests override policies (if any)
# with cue vet, then runs `remediator plan` on every request the pull request adds,
# changes or renames, lists the requests it deletes as prunes, and fails when a request
# is invalid or would be rejected. A request that would wait (another remediation on the
# same node or Lease, or a closed maintenance window) only warns: it runs later by
# itself. A deleted request only shows as a prune: deleting it runs its finalizer, which
# restores first.
#
#   ci/check.sh [BASE]      BASE defaults to $BASE_REF, else origin/main
#
# Which facts the requests are planned on:
#   - KUBECONFIG set: every request is planned on live facts, gathered read-only from
#     that cluster (remediator plan --kubeconfig "$KUBECONFIG"). facts/ is not read, so
#     a pull request cannot choose the facts it is judged on.
#   - KUBECONFIG unset or empty: each request is planned on its saved facts,
#     facts/<name>.yaml (or .json). That is an offline review only, and the output says
#     so; it warns prominently when the pull request itself changes the facts a request
#     is planned against.
#
# Environment:
#   REMEDIATOR      the remediator binary (default: remediator on PATH)
#   REMEDIATOR_CUE  the cue command for override policies (default: cue on PATH), e.g.
#                   "go -C /src/remediator tool cue" to use the one pinned by remediator
#   KUBECONFIG      one kubeconfig file with read-only credentials (the remediator-plan
#                   ClusterRole): plan on live facts, as above
#   REMEDIATOR_PLAN_FLAGS
#                   the controller's settings where they differ from plan's defaults,
#                   so that CI decides as the controller will, e.g.
#                   "--node-lease-grace-period=40s --max-concurrent-remediations=2"
#                   (the safety floor's --floor-* minimums too, on a test cluster)
#
# Exit code: 0 when every checked request would be allowed or would wait (prunes and
# facts warnings do not fail the job), 1 otherwise: a request is invalid, would be
# rejected or has no facts to be planned on, a policy case fails, or the check cannot
# run (no remediator binary, an unusable KUBECONFIG, git failing).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BASE="${1:-${BASE_REF:-origin/main}}"
REMEDIATOR="${REMEDIATOR:-remediator}"
read -r -a CUE <<<"${REMEDIATOR_CUE:-cue}"
cd "$ROOT"

say() { printf '\n==> %s\n' "$*"; }
die() { printf 'check: ERROR: %s\n' "$*" >&2; exit 1; }
is_manifest() { case "$1" in *.yaml | *.yml | *.json) return 0 ;; esac; return 1; }
# contains WORD LIST...: whether WORD is one of LIST.
contains() {
  local w="$1" x
  shift
  for x in "$@"; do
    if [[ "$x" == "$w" ]]; then return 0; fi
  done
  return 1
}

command -v "$REMEDIATOR" >/dev/null 2>&1 || die "no remediator binary: install it or set REMEDIATOR=/path/to/remediator"

# 0. Which facts: live ones whenever the job has a kubeconfig (see the header).
live=false
if [[ -n "${KUBECONFIG:-}" ]]; then
  [[ "$KUBECONFIG" != *:* ]] || die "KUBECONFIG=$KUBECONFIG names several files: give the job one kubeconfig file (remediator plan --kubeconfig takes one)"
  [[ -f "$KUBECONFIG" && -r "$KUBECONFIG" ]] || die "KUBECONFIG=$KUBECONFIG is not a readable file: fix the job's credentials, or unset KUBECONFIG to review on saved facts offline"
  live=true
  say "Facts: live, gathered read-only from the cluster in KUBECONFIG=$KUBECONFIG; facts/ is not read"
else
  say "Facts: saved, from facts/ (KUBECONFIG is not set). This is an OFFLINE REVIEW ONLY: the facts are a snapshot a pull request can change; the controller decides on live facts when the merged request is applied"
fi

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

# 1. Which requests: those added, modified or renamed since the merge base with BASE.
# --no-renames makes a renamed file an addition of its new path (planned like any new
# request) and a deletion of its old one; deletions are listed as prunes. Without a
# usable base (a shallow clone, the first commit) every request is checked, and neither
# prunes nor facts changes can be told.
requests=()
prunes=()
facts_changed=()
have_base=false
if git rev-parse --verify --quiet "$BASE^{commit}" >/dev/null 2>&1 &&
  git merge-base "$BASE" HEAD >/dev/null 2>&1; then
  have_base=true
  diff_pr() { git diff -z --no-renames --name-only --relative "$@"; }
  diff_pr --diff-filter=d "$BASE...HEAD" -- requests/ >"$tmp/changed" || die "git diff against $BASE failed"
  diff_pr --diff-filter=D "$BASE...HEAD" -- requests/ >"$tmp/deleted" || die "git diff against $BASE failed"
  diff_pr "$BASE...HEAD" -- facts/ >"$tmp/facts" || die "git diff against $BASE failed"
  while IFS= read -r -d '' f; do
    if is_manifest "$f"; then requests+=("$f"); fi
  done <"$tmp/changed"
  while IFS= read -r -d '' f; do
    if is_manifest "$f"; then prunes+=("$f"); fi
  done <"$tmp/deleted"
  while IFS= read -r -d '' f; do facts_changed+=("$f"); done <"$tmp/facts"
  say "${#requests[@]} request file(s) added, changed or renamed since $BASE"
  ((${#prunes[@]} == 0)) || echo "${#prunes[@]} request file(s) deleted since $BASE: listed as prunes below"
  ((${#facts_changed[@]} == 0)) || echo "this pull request changes facts/: ${facts_changed[*]}"
else
  printf 'check: warning: base %s not found; checking every request (prunes and changes to facts/ cannot be told)\n' "$BASE" >&2
  for f in requests/*.yaml requests/*.yml requests/*.json; do
    if [[ -e "$f" ]]; then requests+=("$f"); fi
  done
  say "${#requests[@]} request file(s) in requests/"
fi

# 2. Which policies: an override directory replaces the embedded policies whole, so its
# own cases must pass before any request is planned with it. Each case file goes in on
# stdin, unified with the policy files, because cue ignores *_test.cue files named as
# paths (the same as remediator's `make policy-test`).
plan_flags=()
read -r -a extra_flags <<<"${REMEDIATOR_PLAN_FLAGS:-}"
plan_flags+=(${extra_flags[@]+"${extra_flags[@]}"})
policy_files=()
case_files=()
for f in policies/*.cue; do
  [[ -e "$f" ]] || continue
  case "$f" in
    *_test.cue) case_files+=("$ROOT/$f") ;;
    *) policy_files+=("$ROOT/$f") ;;
  esac
done
if ((${#policy_files[@]} > 0)); then
  say "Testing the override policies in policies/ (${CUE[*]} vet)"
  ((${#case_files[@]} > 0)) || printf 'check: warning: policies/ has no *_test.cue cases; the overrides are untested\n' >&2
  for t in ${case_files[@]+"${case_files[@]}"}; do
    echo "${CUE[*]} vet -c policies/*.cue - < ${t#"$ROOT"/}"
    "${CUE[@]}" vet -c "${policy_files[@]}" - <"$t" || die "policy cases in ${t#"$ROOT"/} failed"
  done
  plan_flags+=(--policies-dir "$ROOT/policies")
  # Checked even when the pull request changes no request: they compile, name only
  # playbooks the controller runs, and a policies/kustomization.yaml (Argo CD's
  # ConfigMap) generates exactly them. It prints the digest the controller will record.
  say "Checking the override policies: $REMEDIATOR plan --policies-dir policies"
  "$REMEDIATOR" plan --policies-dir "$ROOT/policies" || die "the policies in policies/ cannot be used"
else
  for k in policies/kustomization.yaml policies/kustomization.yml policies/Kustomization; do
    [[ -e "$k" ]] && die "$k is there for Argo CD, but policies/ has no .cue files: Argo CD could build no policies ConfigMap (add the policies, or remove $k)"
  done
  say "policies/ has no .cue files: planning with the policies embedded in $("$REMEDIATOR" version 2>/dev/null || echo remediator)"
fi

# 3. Plan each request: on live facts with a kubeconfig, else on its saved facts.
failed=()
waiting=()
forged=() # "request (facts file)" planned on saved facts this pull request changed
((${#requests[@]} > 0)) || say "No request to check"
for f in ${requests[@]+"${requests[@]}"}; do
  name="$(basename "${f%.*}")"
  args=(plan -f "$f" ${plan_flags[@]+"${plan_flags[@]}"})
  saved=""
  if $live; then
    args+=(--kubeconfig "$KUBECONFIG")
    from="live facts from the cluster"
  else
    for s in "facts/$name.yaml" "facts/$name.json"; do
      if [[ -f "$s" ]]; then
        saved="$s"
        break
      fi
    done
    if [[ -z "$saved" ]]; then
      say "$f"
      echo "check: no facts/$name.yaml and KUBECONFIG is not set: there is nothing to decide on." >&2
      echo "  Give the job read-only cluster credentials (KUBECONFIG) to plan on live facts, or, for an" >&2
      echo "  offline review, save the facts (kubectl get rr -n <ns> <name> -o jsonpath='{.status.facts}' of a DryRun request)." >&2
      failed+=("$f (no facts)")
      continue
    fi
    args+=(--facts "$saved")
    from="saved facts $saved, for offline review only"
    if contains "$saved" ${facts_changed[@]+"${facts_changed[@]}"}; then
      from="$from; WARNING: this pull request itself changed $saved"
      forged+=("$f ($saved)")
    fi
  fi
  say "$REMEDIATOR ${args[*]}"
  echo "(planned on $from)"
  rc=0
  "$REMEDIATOR" "${args[@]}" || rc=$?
  case "$rc" in
    0) ;;
    4) waiting+=("$f") ;;
    2) failed+=("$f (rejected)") ;;
    *) failed+=("$f (plan failed, exit code $rc)") ;;
  esac
done

say "Result"
if $live; then
  echo "facts: live, from the cluster in KUBECONFIG"
  ((${#facts_changed[@]} == 0)) ||
    echo "note: this pull request changes facts/: saved facts are for offline review only; they were not used"
else
  echo "facts: saved, from facts/: an offline review only, not evidence about the cluster; set KUBECONFIG to plan on live facts"
  if ((${#forged[@]} > 0)); then
    echo
    echo "!!! WARNING: this pull request changes the saved facts that its own requests were planned against:"
    for x in "${forged[@]}"; do echo "!!!   $x"; done
    echo "!!! A plan on facts the pull request brings says nothing about the cluster. Review the facts/ diff"
    echo "!!! as closely as the request, or give the job read-only credentials (KUBECONFIG) to plan on live facts."
    echo
  elif ((${#facts_changed[@]} > 0)); then
    echo "note: this pull request changes facts/ (${facts_changed[*]}); no request it plans was planned on those files"
  elif ! $have_base; then
    echo "warning: without the base $BASE, whether this pull request changed facts/ cannot be told"
  fi
fi
for f in ${prunes[@]+"${prunes[@]}"}; do
  echo "prune: $f — the request is deleted from the cluster; a running one restores first"
done
for f in ${waiting[@]+"${waiting[@]}"}; do
  echo "warning: $f would wait (a remediation on the same node or Lease, or its maintenance window); it starts by itself later"
done
for f in ${failed[@]+"${failed[@]}"}; do
  echo "FAILED: $f"
done
if ((${#failed[@]} > 0)); then
  exit 1
fi
echo "OK: ${#requests[@]} request(s) checked, ${#prunes[@]} prune(s)"
