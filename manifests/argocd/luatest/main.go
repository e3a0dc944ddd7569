// Command luatest runs an ArgoCD resource health script the way ArgoCD does: gopher-lua with only the package,
// base and table libraries opened (ArgoCD's util/lua runLua; no string, os or io library), the resource as the
// global `obj` (JSON objects as tables, arrays as 1-based tables), a 1 s deadline, and the returned table read as
// {status, message}; a status outside ArgoCD's set is reported as Unknown, as ArgoCD does.
//
// Usage: luatest SCRIPT < objects.json, where objects.json is a JSON array of resources; it prints a JSON array
// of {"status", "message"} (or {"error"} for a script that failed), one per resource, in order.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	lua "github.com/yuin/gopher-lua"
)

type health struct {
	Status  string `json:"status,omitempty"`
	Message string `json:"message,omitempty"`
	Error   string `json:"error,omitempty"`
}

var validStatuses = map[string]bool{
	"Healthy": true, "Progressing": true, "Degraded": true, "Suspended": true, "Missing": true, "Unknown": true,
}

func decodeValue(l *lua.LState, value any) lua.LValue {
	switch v := value.(type) {
	case bool:
		return lua.LBool(v)
	case float64:
		return lua.LNumber(v)
	case string:
		return lua.LString(v)
	case []any:
		arr := l.CreateTable(len(v), 0)
		for _, item := range v {
			arr.Append(decodeValue(l, item))
		}
		return arr
	case map[string]any:
		tbl := l.CreateTable(0, len(v))
		for key, item := range v {
			tbl.RawSetH(lua.LString(key), decodeValue(l, item))
		}
		return tbl
	}
	return lua.LNil
}

func run(script string, obj map[string]any) health {
	l := lua.NewState(lua.Options{SkipOpenLibs: true})
	defer l.Close()
	for _, lib := range []struct {
		name string
		open lua.LGFunction
	}{{lua.LoadLibName, lua.OpenPackage}, {lua.BaseLibName, lua.OpenBase}, {lua.TabLibName, lua.OpenTable}} {
		if err := l.CallByParam(lua.P{Fn: l.NewFunction(lib.open), NRet: 0, Protect: true}, lua.LString(lib.name)); err != nil {
			return health{Error: err.Error()}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	l.SetContext(ctx)
	l.SetGlobal("obj", decodeValue(l, obj))
	if err := l.DoString(script); err != nil {
		return health{Error: err.Error()}
	}
	returned, ok := l.Get(-1).(*lua.LTable)
	if !ok {
		return health{Error: fmt.Sprintf("expect table output from Lua script, not %s", l.Get(-1).Type())}
	}
	result := health{Status: lua.LVAsString(returned.RawGetString("status")),
		Message: lua.LVAsString(returned.RawGetString("message"))}
	if !validStatuses[result.Status] {
		return health{Status: "Unknown", Message: "Lua returned an invalid health status"}
	}
	return result
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: luatest SCRIPT < objects.json")
		os.Exit(2)
	}
	script, err := os.ReadFile(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	var objects []map[string]any
	if err := json.NewDecoder(os.Stdin).Decode(&objects); err != nil {
		fmt.Fprintln(os.Stderr, "reading objects:", err)
		os.Exit(1)
	}
	results := make([]health, 0, len(objects))
	for _, obj := range objects {
		results = append(results, run(string(script), obj))
	}
	if err := json.NewEncoder(os.Stdout).Encode(results); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
