"""``server/`` reaches its libraries through their public surfaces only.

Every module under ``server/`` is read with ``ast`` and fails the build when it imports a private
name of one of its runtime libraries (uvicorn, Starlette, FastAPI, httpx, aiohttp, pydantic,
redis, prometheus_client, …: a leading underscore in the module path or the name, or one of their
internals that carry no underscore), overrides a
private method of one of their classes, or reads a private attribute of another object that
``server/`` itself never defines (``client._transport``). A renamed private then cannot turn a
feature off silently, and an upgrade of any of them is a version bump, not a port.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.procs import ROOT

# The web and HTTP stack, then every other runtime dependency of pyproject.toml.
LIBRARIES = frozenset(
    (
        *("uvicorn", "starlette", "fastapi", "httpx", "httpx_aiohttp", "aiohttp"),
        *("pydantic", "pydantic_settings", "typing_extensions", "redis", "prometheus_client"),
        *("orjson", "jsonschema", "jsonschema_rs", "rich", "openai"),
    )
)
# Internals whose names carry no underscore: the request cycle and helpers of uvicorn's
# protocols, and httpx-aiohttp's exception mapping.
INTERNAL_NAMES = frozenset(
    (
        "STATUS_LINE",
        "RequestResponseCycle",
        "get_client_addr",
        "get_path_with_query_string",
        "map_aiohttp_exceptions",
    )
)
INTERNAL_MODULES = frozenset(("uvicorn.protocols.utils",))
# A named tuple's methods carry an underscore so as not to clash with its fields: public API.
NAMED_TUPLE_API = frozenset(("_replace", "_asdict", "_fields", "_make"))
SERVER = ROOT / "server"
# Offences that are known and on their way out, each a subset its module may still hold.
KNOWN: dict[str, set[str]] = {}


@functools.cache
def modules() -> list[Path]:
    return sorted(SERVER.rglob("*.py"))


def is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def library_of(module: str) -> str | None:
    root = module.split(".")[0]
    return root if root in LIBRARIES else None


def imported_names(tree: ast.Module) -> dict[str, str]:
    """Each name a module binds from a library, to the dotted path it stands for."""
    names: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and library_of(node.module):
            for alias in node.names:
                names[alias.asname or alias.name] = f"{node.module}.{alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if library_of(alias.name):
                    names[alias.asname or alias.name.split(".")[0]] = alias.name
    return names


def dotted(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute) and (base := dotted(node.value)) is not None:
        return f"{base}.{node.attr}"
    return None


def private_imports(tree: ast.Module) -> Iterator[str]:
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and library_of(node.module):
            path = node.module
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if library_of(alias.name) and (
                    any(map(is_private, alias.name.split("."))) or alias.name in INTERNAL_MODULES
                ):
                    yield f"line {node.lineno}: import {alias.name}"
            continue
        else:
            continue
        if any(map(is_private, path.split("."))) or path in INTERNAL_MODULES:
            yield f"line {node.lineno}: from {path} import {', '.join(names)}"
            continue
        for name in names:
            if is_private(name) or name in INTERNAL_NAMES:
                yield f"line {node.lineno}: from {path} import {name}"


def private_overrides(tree: ast.Module, names: dict[str, str]) -> Iterator[str]:
    """A private method defined in a subclass of a library's class: it overrides one of the
    library's privates, or may in its next version (which would then call ours instead)."""
    for node in ast.walk(tree):
        if not isinstance(node, ast.ClassDef):
            continue
        bases = []
        for base in node.bases:
            path = dotted(base)
            if path is None:
                continue
            head, _, rest = path.partition(".")
            if head in names:
                bases.append(f"{names[head]}.{rest}" if rest else names[head])
        for item in node.body:
            if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef) and is_private(item.name):
                for base in bases:
                    yield f"line {item.lineno}: {node.name}.{item.name} in a subclass of {base}"


@functools.cache
def own_private_names() -> frozenset[str]:
    """Every private name ``server/`` (and the core) defines: reading those is our business."""
    names: set[str] = set()
    for path in [*modules(), *sorted((ROOT / "rehearsal").rglob("*.py"))]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                names.add(node.name)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                names.add(node.attr)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                names.add(node.target.id)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                names.add(node.value)  # __slots__ entries
    return frozenset(name for name in names if is_private(name))


def foreign_private_reads(tree: ast.Module, ours: frozenset[str]) -> Iterator[str]:
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "hasattr")
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
            and is_private(node.args[1].value)
        ):
            yield f'line {node.lineno}: {node.func.id}(..., "{node.args[1].value}")'
        if not isinstance(node, ast.Attribute) or not is_private(node.attr):
            continue
        if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
            continue
        if node.attr not in ours and node.attr not in NAMED_TUPLE_API:
            yield f"line {node.lineno}: .{node.attr}"


def offences(path: Path, ours: frozenset[str]) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names = imported_names(tree)
    return [
        *private_imports(tree),
        *private_overrides(tree, names),
        *foreign_private_reads(tree, ours),
    ]


@pytest.mark.parametrize("path", modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_module_reaches_into_a_librarys_privates(path: Path) -> None:
    """No private import, private override or foreign private read in this module."""
    found = offences(path, own_private_names())
    known = KNOWN.get(str(path.relative_to(ROOT)), set())
    assert [line for line in found if line.partition(": ")[2] not in known] == []


SAMPLE = """
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle
from starlette._utils import is_async_callable
import httpx._transports.default
from fastapi import FastAPI

class Lane(HttpToolsProtocol):
    def _start_asgi_task(self, cycle, app):
        return self.client._transport, getattr(self.client, "_pool")

class Ours:
    def _own_helper(self):
        return None
"""


def test_the_scan_finds_each_kind_of_offence() -> None:
    """One offence of each kind is caught on each; a helper of our own class is not."""
    found = offences_of_source(SAMPLE)
    assert any("RequestResponseCycle" in line for line in found)
    assert any("starlette._utils" in line for line in found)
    assert any("httpx._transports" in line for line in found)
    assert any("Lane._start_asgi_task" in line for line in found)
    assert any(line.endswith("._transport") for line in found)
    assert any(line.endswith('getattr(..., "_pool")') for line in found)
    assert not any("_own_helper" in line for line in found)
    assert not any("FastAPI" in line for line in found)


def offences_of_source(source: str) -> list[str]:
    tree = ast.parse(source)
    names = imported_names(tree)
    return [
        *private_imports(tree),
        *private_overrides(tree, names),
        *foreign_private_reads(tree, set()),
    ]
