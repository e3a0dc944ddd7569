"""The package's floors (docs/architecture.md): every import runs from a higher floor to a lower one or within a
floor, the three per-CR components on the peers' floor import none of each other, and no module imports itself back
through others. Read from the source (every `import`, function-level ones too), so a new module or edge is checked
the day it lands."""

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE_DIR = Path(__file__).resolve().parents[3] / "operator" / "sglang_operator"
PACKAGE = "sglang_operator"

GROUND = (
    *("api", "settings", "names", "capacity", "topology", "kubeyaml", "crfile", "secretref", "metrics", "observed"),
    *("desired", "childkinds", "kvepoch"),
)
FLOORS: dict[str, int] = {
    # 0, the ground: the typed API, the operator's settings and pure domain functions. No I/O.
    **dict.fromkeys(GROUND, 0),
    "render": 1,  # pure (spec, observed state) -> manifests
    "runtime": 2,  # the machinery every per-CR loop runs on
    "router": 3,  # the clients of what the operator talks to besides the API server
    "prometheus": 3,
    "controller": 4,  # the peers: each hands its per-CR loop to the runtime
    "autoscaling": 4,
    "doctor": 4,
    "app": 5,  # the entry points, which compose the peers
    "cli": 5,
    "groupplan": 5,
}
PEERS = ("controller", "autoscaling", "doctor")


def modules() -> dict[str, Path]:
    found = {}
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        parts = path.relative_to(PACKAGE_DIR).with_suffix("").parts
        parts = parts[:-1] if parts[-1] == "__init__" else parts
        found[".".join((PACKAGE, *parts))] = path
    return found


def imported(module: str, path: Path, known: dict[str, Path]) -> Iterator[str]:
    """Every module of the package that `module` imports (a name imported from a package counts as that package's
    submodule when one of that name exists)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names if alias.name.startswith(PACKAGE))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if not target.startswith(PACKAGE):
                continue
            for alias in node.names:
                yield f"{target}.{alias.name}" if f"{target}.{alias.name}" in known else target


def top(module: str) -> str:
    return module.split(".")[1] if "." in module else ""


def edges() -> dict[str, set[str]]:
    known = modules()
    return {module: set(imported(module, path, known)) - {module} for module, path in known.items()}


def test_every_top_level_module_and_package_has_a_floor() -> None:
    unplaced = sorted({top(m) for m in modules() if top(m)} - set(FLOORS))
    assert unplaced == [], f"place these in FLOORS (and in docs/architecture.md): {unplaced}"


def test_no_import_runs_from_a_lower_floor_to_a_higher_one() -> None:
    upward = sorted(
        f"{source} -> {target}"
        for source, targets in edges().items()
        for target in targets
        if top(source) and top(target) and FLOORS[top(source)] < FLOORS[top(target)]
    )
    assert upward == []


def test_the_peers_import_none_of_each_other() -> None:
    across = sorted(
        f"{source} -> {target}"
        for source, targets in edges().items()
        for target in targets
        if top(source) in PEERS and top(target) in PEERS and top(source) != top(target)
    )
    assert across == []


def test_no_module_imports_itself_back() -> None:
    graph = edges()
    cycles = [cycle for cycle in strongly_connected(graph) if len(cycle) > 1]
    assert cycles == []


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components of `graph` (each a sorted list)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for successor in graph.get(node, ()):
            if successor not in index:
                visit(successor)
                low[node] = min(low[node], low[successor])
            elif successor in on_stack:
                low[node] = min(low[node], index[successor])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            components.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return components


@pytest.mark.parametrize(
    ("graph", "expected"),
    [({"a": {"b"}, "b": {"a"}, "c": {"a"}}, [["a", "b"]]), ({"a": {"b"}, "b": set()}, [])],
)
def test_the_cycle_finder_finds_cycles(graph: dict[str, set[str]], expected: list[list[str]]) -> None:
    assert [c for c in strongly_connected(graph) if len(c) > 1] == expected
