-- ArgoCD health check for sglang.ai/SGLangDeployment (installed by argocd-cm-patch.yaml; docs/operations.md).
-- Reads only what the operator writes: status.observedGeneration and the conditions Ready, Progressing, Degraded,
-- RouterSynced and MetricsAvailable (operator/sglang_operator/controller/status.py). Runs on ArgoCD's Lua VM
-- (gopher-lua with the base and table libraries only: no string library). Tested by tests/integration/chart/test_argocd_health.py
-- (fixtures, some captured from the e2e suite) and e2e/tests/test_argocd_health.py (live CRs).
--   Progressing  the operator has not reported on the current generation yet, or replicas are starting, rolling
--                out, draining or waiting for the router
--   Degraded     the operator refused the spec (InvalidSpec, PolicyViolation) or reports a problem (Degraded=True:
--                ReconcileError, NameCollision, ChildKindUnavailable, RouterUnreachable, ReplicaFailed)
--   Suspended    spec.replicas is 0 and no autoscaler owns the count: nothing runs until someone scales it
--   Healthy      Ready=True on the current generation (an autoscaler holding on missing metrics is still Healthy,
--                with a message; the SGLangMetricsUnavailable alert pages for it)
local hs = {status = "Progressing", message = "Waiting for the operator to report status"}

local function condition(kind)
  if obj.status == nil or obj.status.conditions == nil then
    return nil
  end
  for _, c in ipairs(obj.status.conditions) do
    if c.type == kind then
      return c
    end
  end
  return nil
end

local function describe(c)
  local text = ""
  if c.reason ~= nil then
    text = c.reason
  end
  if c.message ~= nil and c.message ~= "" then
    if text ~= "" then
      text = text .. ": "
    end
    text = text .. c.message
  end
  return text
end

if obj.status == nil or obj.status.observedGeneration == nil then
  return hs
end
local generation = obj.metadata.generation
if generation ~= nil and obj.status.observedGeneration < generation then
  hs.message = "Waiting for the operator to observe generation " .. tostring(generation)
    .. " (observed " .. tostring(obj.status.observedGeneration) .. ")"
  return hs
end

local ready = condition("Ready")
local progressing = condition("Progressing")
local degraded = condition("Degraded")
local router = condition("RouterSynced")
local metrics = condition("MetricsAvailable")

if ready ~= nil and ready.status == "False" and (ready.reason == "InvalidSpec" or ready.reason == "PolicyViolation") then
  hs.status = "Degraded"
  hs.message = describe(ready)
  return hs
end
if degraded ~= nil and degraded.status == "True" then
  hs.status = "Degraded"
  hs.message = describe(degraded)
  return hs
end

local spec = obj.spec or {}
local autoscaling = spec.autoscaling or {}
local autoscaled = autoscaling.enabled == true and autoscaling.recommendOnly ~= true
if ready == nil then
  return hs
end
if ready.status == "True" then
  if spec.replicas == 0 and not autoscaled then
    hs.status = "Suspended"
    hs.message = "spec.replicas is 0: no replicas run"
    return hs
  end
  hs.status = "Healthy"
  hs.message = describe(ready)
  if metrics ~= nil and metrics.status == "False" then
    hs.message = hs.message .. "; autoscaler holding, " .. describe(metrics)
  end
  return hs
end

hs.message = describe(ready)
if progressing ~= nil and progressing.status == "True" then
  hs.message = describe(progressing)
end
if router ~= nil and router.status == "False" then
  hs.message = hs.message .. "; router " .. describe(router)
end
return hs
