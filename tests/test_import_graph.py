"""The package's import graph, read from the source (module-level, function-local and type-only imports alike):
every import goes to the same layer or one below (docs/ARCHITECTURE.md), no cycles, and the sans-I/O modules reach
no transport."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Dict, List, Set

PACKAGE = Path(__file__).resolve().parents[1] / "llmroute"

# The protocol logic: request building, SSE parsing, the call state machine, breakers, routing,
# pricing. None of them may import the transport or an HTTP library, directly or through another
# module. (Shared state is reached through the objects a client passes in: the budget book and the
# breakers catch the Redis client's `Unavailable`, so they import llmroute.state, not a transport.)
# docs/ARCHITECTURE.md's layers, bottom first: a module may import its own layer and the ones below. The most
# specific prefix decides a module's layer.
LAYERS = [
    ("base", ["llmroute._runtime", "llmroute.errors"]),
    ("wire", ["llmroute._http", "llmroute.providers.registry"]),
    ("domain", ["llmroute.types", "llmroute.accounting", "llmroute.resilience", "llmroute.routing", "llmroute.cache",
                "llmroute.state"]),
    ("config", ["llmroute.config"]),
    ("adapters", ["llmroute.providers"]),
    ("call core", ["llmroute._call"]),
    ("public API", ["llmroute", "llmroute.client", "llmroute.completions", "llmroute.streams", "llmroute.embeddings",
                    "llmroute.models", "llmroute.batch", "llmroute.openai_surface"]),
    ("tools", ["llmroute.cli", "llmroute.bench", "llmroute.__main__"]),
]

SANS_IO = ["llmroute._call.call", "llmroute._call.engine", "llmroute._call.targets", "llmroute._http.timeouts", "llmroute._call.exits",
           "llmroute._http.sse", "llmroute._call.validate", "llmroute.providers.base", "llmroute.providers.prefill", "llmroute.providers.server_identity",
           "llmroute.resilience.failover", "llmroute.resilience.breaker", "llmroute.resilience.deployment_health",
           "llmroute.resilience.retry", "llmroute.resilience.hedge", "llmroute.routing.classifier",
           "llmroute.routing.rules", "llmroute.routing.fitted", "llmroute.accounting.cost",
           "llmroute.accounting.prices"]
TRANSPORTS = {"llmroute._http.transport", "httpx", "httpcore", "aiohttp", "socket", "requests", "urllib3"}


def _modules() -> Dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


def _imports(name: str, path: Path, modules: Dict[str, Path], *, top_level_only: bool,
             type_only_too: bool = True) -> Set[str]:
    """What `name` imports (with its TYPE_CHECKING blocks unless `type_only_too` is false): modules of the
    package and top-level names of other packages."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    type_only = set() if type_only_too else {
        id(n) for block in ast.walk(tree) if isinstance(block, ast.If) and "TYPE_CHECKING" in ast.unparse(block.test)
        for n in ast.walk(block)}
    top = {id(n) for n in tree.body}
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: Set[str] = set()
    for node in ast.walk(tree):
        if id(node) in type_only or (top_level_only and id(node) not in top):
            continue
        if isinstance(node, ast.Import):
            found.update(a.name if a.name in modules else a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target in modules:
                found.add(target)
                found.update(f"{target}.{a.name}" for a in node.names if f"{target}.{a.name}" in modules)
            else:
                found.add(target.split(".")[0])
    # Importing a submodule runs its packages' __init__ first; that edge is not a cycle of the code's making.
    return {m for m in found if m != name and not name.startswith(m + ".")}


def _cycles(graph: Dict[str, Set[str]]) -> List[List[str]]:
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on_stack: Set[str] = set()
    found: List[List[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in graph:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycles_in_the_package() -> None:
    modules = _modules()
    graph = {name: _imports(name, path, modules, top_level_only=False) for name, path in modules.items()}
    assert _cycles(graph) == []


def _layer(module: str) -> int:
    best, rank = -1, -1
    for index, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best:
                best, rank = len(prefix), index
    assert rank >= 0, f"{module} is in no layer of docs/ARCHITECTURE.md"
    return rank


def test_every_import_goes_to_the_same_layer_or_below() -> None:
    modules = _modules()
    upward = []
    for name, path in modules.items():
        for target in _imports(name, path, modules, top_level_only=False):
            if target in modules and _layer(target) > _layer(name):
                upward.append(f"{name} ({LAYERS[_layer(name)][0]}) imports {target} ({LAYERS[_layer(target)][0]})")
    assert upward == []


def test_the_root_holds_only_the_public_modules() -> None:
    root = sorted(p.stem for p in PACKAGE.glob("*.py"))
    assert root == ["__init__", "__main__", "client", "completions", "config", "embeddings", "errors", "models",
                    "streams", "types"]


def test_no_two_modules_share_a_name() -> None:
    names: Dict[str, List[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        if path.stem not in ("__init__", "__main__"):
            names.setdefault(path.stem, []).append(str(path.relative_to(PACKAGE)))
    assert {n: p for n, p in names.items() if len(p) > 1} == {}


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_sans_io_modules_reach_no_transport() -> None:
    modules = _modules()
    graph = {name: _imports(name, path, modules, top_level_only=False) for name, path in modules.items()}
    for start in SANS_IO:
        assert start in modules, start
        seen: Set[str] = set()
        todo = [start]
        while todo:
            current = todo.pop()
            if current in seen:
                continue
            seen.add(current)
            todo.extend(m for m in graph.get(current, ()) if m in modules)
        reached = {m for name in seen for m in graph.get(name, ())} & TRANSPORTS
        assert not reached, f"{start} reaches {sorted(reached)}"
