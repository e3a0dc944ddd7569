// The ArgoCD health script's test runner: gopher-lua, the Lua engine ArgoCD runs health checks with.
// tests/integration/chart/test_argocd_health.py builds it (localcluster.gotools) into e2e/.bin and rebuilds only when this module changes.
module sglang.ai/manifests/argocd/luatest

go 1.26.0

require github.com/yuin/gopher-lua v1.1.2
