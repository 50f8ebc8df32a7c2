#!/usr/bin/env bash
# The pull-request check of a remediation repository: tests override policies (if any)
# with cue vet, then runs `remediator plan` on every request the pull request adds or
# changes, and fails when a request is invalid or would be rejected. A request that
# would wait (another remediation on the same node or Lease, or a closed maintenance
# window) only warns: it runs later by itself.
#
#   ci/check.sh [BASE]      BASE defaults to $BASE_REF, else origin/main
#
# Environment:
#   REMEDIATOR      the remediator binary (default: remediator on PATH)
#   REMEDIATOR_CUE  the cue command for override policies (default: cue on PATH), e.g.
#                   "go -C /src/remediator tool cue" to use the one pinned by remediator
#   KUBECONFIG      read-only credentials for live facts, used for requests that have no
#                   saved facts in facts/<name>.yaml
#
# Exit code: 0 when every checked request would be allowed or would wait, 1 otherwise.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BASE="${1:-${BASE_REF:-origin/main}}"
REMEDIATOR="${REMEDIATOR:-remediator}"
read -r -a CUE <<<"${REMEDIATOR_CUE:-cue}"
cd "$ROOT"

say() { printf '\n==> %s\n' "$*"; }
die() { printf 'check: ERROR: %s\n' "$*" >&2; exit 1; }

command -v "$REMEDIATOR" >/dev/null 2>&1 || die "no remediator binary: install it or set REMEDIATOR=/path/to/remediator"

# 1. Which requests: those added or modified since the merge base with BASE. Deleted
# requests need no plan: pruning one runs its finalizer, which restores first. Without
# a usable base (a shallow clone, the first commit) every request is checked.
requests=()
if git rev-parse --verify --quiet "$BASE^{commit}" >/dev/null 2>&1 &&
  git merge-base "$BASE" HEAD >/dev/null 2>&1; then
  while IFS= read -r f; do
    case "$f" in *.yaml | *.yml | *.json) requests+=("$f") ;; esac
  done < <(git diff --name-only --relative --diff-filter=AM "$BASE...HEAD" -- requests/)
  say "${#requests[@]} request file(s) added or changed since $BASE"
else
  printf 'check: warning: base %s not found; checking every request\n' "$BASE" >&2
  for f in requests/*.yaml requests/*.yml requests/*.json; do
    [[ -e "$f" ]] && requests+=("$f")
  done
  say "${#requests[@]} request file(s) in requests/"
fi

# 2. Which policies: an override directory replaces the embedded policies whole, so its
# own cases must pass before any request is planned with it. Each case file goes in on
# stdin, unified with the policy files, because cue ignores *_test.cue files named as
# paths (the same as remediator's `make policy-test`).
plan_flags=()
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
else
  say "policies/ has no .cue files: planning with the policies embedded in $("$REMEDIATOR" version 2>/dev/null || echo remediator)"
fi

# 3. Plan each request on its saved facts, else on live ones.
((${#requests[@]} > 0)) || { say "No request to check"; exit 0; }
failed=()
waiting=()
for f in "${requests[@]}"; do
  name="$(basename "${f%.*}")"
  args=(plan -f "$f" ${plan_flags[@]+"${plan_flags[@]}"})
  if [[ -f "facts/$name.yaml" ]]; then
    args+=(--facts "facts/$name.yaml")
  elif [[ -f "facts/$name.json" ]]; then
    args+=(--facts "facts/$name.json")
  elif [[ -n "${KUBECONFIG:-}" ]]; then
    args+=(--kubeconfig "$KUBECONFIG")
  else
    say "$f"
    echo "check: no facts/$name.yaml and KUBECONFIG is not set: there is nothing to decide on." >&2
    echo "  Save the facts (kubectl get rr -n <ns> <name> -o jsonpath='{.status.facts}' of a DryRun request)" >&2
    echo "  or give the job read-only cluster credentials." >&2
    failed+=("$f (no facts)")
    continue
  fi
  say "$REMEDIATOR ${args[*]}"
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
for f in ${waiting[@]+"${waiting[@]}"}; do
  echo "warning: $f would wait (a remediation on the same node or Lease, or its maintenance window); it starts by itself later"
done
for f in ${failed[@]+"${failed[@]}"}; do
  echo "FAILED: $f"
done
if ((${#failed[@]} > 0)); then
  exit 1
fi
echo "OK: ${#requests[@]} request(s) checked"
