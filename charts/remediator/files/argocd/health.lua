-- Argo CD health check for remediator.io/v1alpha1 RemediationRequest.
--
-- A RemediationRequest is a one-shot request committed to Git: the controller decides
-- it from live facts and, when the policy allows, runs a playbook once. The health
-- reported here reads only what the controller writes to status:
--
--   observedGeneration missing or < generation  Progressing  the spec is not seen yet
--   no phase, Pending, Waiting                  Progressing  Progressing condition
--   Waiting, reason WaitingForMaintenanceWindow Suspended    Progressing condition
--     or MaintenanceWindowClosed or Paused
--   Running, reason Paused (held by the pause)  Suspended    Progressing condition
--                                                            + the running step
--   Pending + Progressing=False reason DryRun   Healthy      Progressing condition
--   Running                                     Progressing  Progressing condition
--                                                            + the running step
--   Succeeded                                   Healthy      Succeeded condition
--   Rejected                                    Degraded     Accepted=False condition,
--                                                            else decision.message
--   Failed                                      Degraded     Succeeded=False condition,
--                                                            else decision.message
--   any other phase                             Unknown
--
-- The generation check comes first because every other field may describe an older
-- spec: a DryRun request switched to mode: Apply still shows its DryRun status until
-- the controller has seen the change.
--
-- A decided DryRun is Healthy, not Progressing. A DryRun request stops at phase
-- Pending with Progressing=False reason DryRun once its decision and plan are
-- recorded, and nothing moves it further: only a spec change does, and that bumps
-- the generation, which the first check catches. Progressing would keep the
-- Application Progressing forever and hold any sync that waits for the request to
-- become healthy. The dry run has done all it was asked to do, and its message
-- carries the plan. A DryRun the policy rejects is still Rejected, so Degraded: its
-- answer is "no", and the message says what to do next.
--
-- A request waiting for its maintenance window, or held by `kubectl remediator pause`,
-- is Suspended: it is paused on purpose, until a time the request itself names or a
-- resume, which is what Argo CD's Suspended means
-- (a suspended Rollout or CronJob). Progressing would read, for hours, as a sync that
-- is stuck. Waiting for another remediation or a free slot stays Progressing: that
-- wait ends as soon as the cluster moves.
--
-- Rejected is Degraded even when the decision is re-evaluated later
-- (status.decision.recheckAt): until then the request does not do what the commit
-- asked, and the message says why.
--
-- An unknown phase is Unknown: the CRD only admits the six phases above, so another
-- one comes from a controller newer than this script, and any guess could be wrong.
--
-- Argo CD reports an object with a deletionTimestamp as Progressing ("Pending
-- deletion") before it runs a health script, so deletion is not handled here.
--
-- Argo CD runs argocd-cm health scripts without the Lua standard libraries (only
-- base, table and a safe os) unless resource.customizations.useOpenLibs is set, so
-- this script uses no string.* functions. Every field is read through get() because
-- a request may have no status or only part of one, and a Lua error would hide the
-- request's state behind a stack trace.

local hs = {}

-- get walks t along the keys and returns nil as soon as a level is missing or is not
-- a table.
local function get(t, ...)
  for i = 1, select("#", ...) do
    if type(t) ~= "table" then
      return nil
    end
    t = t[select(i, ...)]
  end
  return t
end

-- first returns the first argument that is a non-empty string; arguments may be nil.
local function first(...)
  for i = 1, select("#", ...) do
    local v = select(i, ...)
    if type(v) == "string" and v ~= "" then
      return v
    end
  end
  return nil
end

local function number(v)
  if type(v) == "number" then
    return v
  end
  return nil
end

local function condition(status, conditionType)
  local conditions = get(status, "conditions")
  if type(conditions) ~= "table" then
    return nil
  end
  for _, c in ipairs(conditions) do
    if type(c) == "table" and c.type == conditionType then
      return c
    end
  end
  return nil
end

-- messageOf returns the condition's message, only when the condition has the wanted
-- status (any status when wantStatus is nil): a stale condition says the wrong thing.
local function messageOf(c, wantStatus)
  if c == nil or (wantStatus ~= nil and c.status ~= wantStatus) then
    return nil
  end
  return first(c.message)
end

-- runningStep describes the step a running playbook is on. The Progressing
-- condition names the whole plan and stays the same while the steps advance, so
-- without it the message would not show where a long run is.
local function runningStep(status)
  local steps = get(status, "steps")
  if type(steps) ~= "table" then
    return nil
  end
  for i, st in ipairs(steps) do
    if type(st) == "table" and st.state == "Running" then
      local text = "step " .. tostring(i) .. "/" .. tostring(#steps) .. " " .. (first(st.name) or "(unnamed)")
      local msg = first(st.message)
      if msg ~= nil then
        text = text .. ": " .. msg
      end
      return text
    end
  end
  return nil
end

local generation = number(get(obj, "metadata", "generation"))
local status = get(obj, "status")
local observed = number(get(status, "observedGeneration"))

if generation ~= nil and (observed == nil or observed < generation) then
  hs.status = "Progressing"
  hs.message = "Waiting for the controller to observe generation " .. tostring(generation)
  if observed ~= nil then
    hs.message = hs.message .. " (last observed: " .. tostring(observed) .. ")"
  end
  return hs
end

local phase = get(status, "phase")
local accepted = condition(status, "Accepted")
local progressing = condition(status, "Progressing")
local succeeded = condition(status, "Succeeded")
local decisionMessage = first(get(status, "decision", "message"))

if phase == nil or phase == "" or phase == "Pending" then
  if phase == "Pending" and progressing ~= nil and progressing.status == "False" and progressing.reason == "DryRun" then
    hs.status = "Healthy"
    hs.message = first(progressing.message, "DryRun: decided; nothing was changed")
  else
    hs.status = "Progressing"
    hs.message = first(messageOf(progressing), decisionMessage, "Waiting for the controller to decide")
  end
elseif phase == "Waiting" then
  hs.status = "Progressing"
  if progressing ~= nil and progressing.status == "True" and
      (progressing.reason == "WaitingForMaintenanceWindow" or progressing.reason == "MaintenanceWindowClosed" or
       progressing.reason == "Paused") then
    hs.status = "Suspended"
  end
  hs.message = first(messageOf(progressing), decisionMessage, "Waiting")
elseif phase == "Running" then
  hs.status = "Progressing"
  if progressing ~= nil and progressing.status == "True" and progressing.reason == "Paused" then
    hs.status = "Suspended"
  end
  hs.message = first(messageOf(progressing), "Running the playbook")
  local step = runningStep(status)
  if step ~= nil then
    hs.message = hs.message .. "; " .. step
  end
elseif phase == "Succeeded" then
  hs.status = "Healthy"
  hs.message = first(messageOf(succeeded, "True"), messageOf(progressing), "Playbook completed")
elseif phase == "Rejected" then
  hs.status = "Degraded"
  hs.message = first(messageOf(accepted, "False"), decisionMessage, messageOf(progressing), "Rejected by policy")
elseif phase == "Failed" then
  hs.status = "Degraded"
  hs.message = first(messageOf(succeeded, "False"), messageOf(progressing, "False"), decisionMessage, "Playbook failed")
else
  hs.status = "Unknown"
  hs.message = "Unknown phase " .. tostring(phase) .. "; this health check knows Pending, Waiting, Running, Succeeded, Rejected and Failed"
end
return hs
