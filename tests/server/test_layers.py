"""server/ stays in layers: imports point down only, never into twin/ or clients/, and no circle.

The layers, top to bottom (docs/architecture.md draws them). A module may import modules of its
own layer's package and of any lower layer; two packages on one floor (``store``, ``engines``)
may not import each other. Every import counts: at the top of a module, inside a function, or
under ``TYPE_CHECKING``. Names are read without the installed prefix (``rehearsal_gateway.``):
``rehearsal_gateway.server.chat`` is the part ``server.chat``.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

import rehearsal_gateway.server as server

ROOT = Path(server.__file__).parent

# part of server/ -> floor; a part is a sub-package or a top-level module.
FLOORS: dict[str, int] = {
    "server.launcher": 8,  # command lines: serve, up, engine processes
    "server.app": 7,  # the factory and the lifespan that builds everything below
    "server.http": 6,  # routes, middleware, relays, error handlers
    "server.chat": 5,  # the front door
    "server.rehearse": 4,  # rehearsal around the pure core
    "server.engines": 3,  # calls, pool, client, transport, discovery
    "server.store": 3,  # the rehearsal store and its keys
    "server.telemetry": 2,  # metrics, logs, waits, readiness
    "server.chat_call": 1,  # the values that cross the service layers
    "server.responses_protocol": 1,  # the Responses API's wire models
    "server.protocol": 0,
    "server.settings": 0,
    "server.errors": 0,
}
OUTSIDE = {"twin", "clients", "tests", "benchmarks"}
PREFIX = "rehearsal_gateway."


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(source: str, module: str, package: bool) -> set[str]:
    """Every module name ``source`` imports, anywhere in it; ``from a import b`` gives both."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.split(".")
                anchor = anchor[: len(anchor) - node.level + (1 if package else 0)]
                base = ".".join([*anchor, base] if base else anchor)
            names.add(base)
            names |= {f"{base}.{alias.name}" for alias in node.names}
    return {name.removeprefix(PREFIX) for name in names}


def import_graph() -> dict[str, set[str]]:
    """server module -> the names it imports (server's resolved to known modules)."""
    paths = sorted(ROOT.rglob("*.py"))
    known = {module_name(path) for path in paths}
    graph: dict[str, set[str]] = {}
    for path in paths:
        name = module_name(path)
        raw = imports_of(path.read_text(encoding="utf-8"), name, path.name == "__init__.py")
        graph[name] = {n for n in raw if n in known or n.split(".")[0] != "server"} - {name}
    return graph


def part_of(module: str) -> str | None:
    for part in FLOORS:
        if module == part or module.startswith(part + "."):
            return part
    return None


def upward(graph: Mapping[str, Iterable[str]]) -> list[str]:
    """Each import that does not point down (or stay inside its own package)."""
    found = []
    for module, targets in graph.items():
        here = part_of(module)
        for target in targets:
            there = part_of(target)
            if there is None or here is None or there == here:
                continue
            if FLOORS[there] >= FLOORS[here]:
                found.append(f"{module} -> {target}")
    return sorted(found)


def circles(graph: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """The strongly connected sets of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in graph.get(node, ()):
            if target not in graph:
                continue
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            members = []
            while True:
                member = stack.pop()
                members.append(member)
                if member == node:
                    break
            if len(members) > 1:
                found.append(sorted(members))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


GRAPH = import_graph()


@pytest.mark.parametrize("module", sorted(GRAPH))
def test_every_module_has_a_floor(module: str) -> None:
    """A new part of server/ is placed in the layers (here and in docs/architecture.md)."""
    assert module == "server" or part_of(module) is not None


def test_imports_point_down() -> None:
    """No module of server/ imports a higher layer, or a package on its own floor."""
    assert upward(GRAPH) == []


def test_no_import_circle() -> None:
    """No two modules of server/ import each other, however indirectly."""
    assert circles(GRAPH) == []


@pytest.mark.parametrize("module", sorted(GRAPH))
def test_server_imports_nothing_outside_it(module: str) -> None:
    """The gateway never imports the twin, the clients, tests or benchmarks."""
    assert {name.split(".")[0] for name in GRAPH[module]} & OUTSIDE == set()


def test_core_never_imports_the_server() -> None:
    """rehearsal/ knows nothing of server/ (its own test keeps it free of I/O libraries)."""
    core = ROOT.parent / "rehearsal"
    for path in core.rglob("*.py"):
        names = imports_of(path.read_text(encoding="utf-8"), "rehearsal", False)
        assert not {n for n in names if n.split(".")[0] == "server"}, path


def test_the_checks_catch_what_they_guard() -> None:
    """An upward import, a same-floor import and a circle are each reported."""
    graph = {
        "server.engines.pool": {"server.chat.service"},  # up
        "server.store.keys": {"server.engines.pool"},  # same floor, other package
        "server.rehearse.a": {"server.rehearse.b"},
        "server.rehearse.b": {"server.rehearse.a"},  # a circle inside one package
        "server.http.routes": {"server.errors", "server.http.state"},  # fine
    }
    assert upward(graph) == [
        "server.engines.pool -> server.chat.service",
        "server.store.keys -> server.engines.pool",
    ]
    assert circles(graph) == [["server.rehearse.a", "server.rehearse.b"]]
    source = (
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from rehearsal_gateway.server.chat import x\n"
    )
    assert "server.chat.x" in imports_of(source, "server.rehearse.a", False)
    assert imports_of("from . import b\n", "server.rehearse.a", False) == {
        "server.rehearse",
        "server.rehearse.b",
    }
