"""The core stays pure: no web framework, HTTP client, Redis or metrics imports anywhere in it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import rehearsal_gateway.rehearsal as rehearsal

FORBIDDEN = {"fastapi", "starlette", "httpx", "redis", "prometheus_client"}
PACKAGE = Path(rehearsal.__file__).parent


def imported_roots(source: str) -> set[str]:
    """Top-level module names imported anywhere in ``source``, including nested imports."""
    roots: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            roots |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
    return roots


@pytest.mark.parametrize("path", sorted(PACKAGE.rglob("*.py")), ids=lambda p: p.name)
def test_module_imports_nothing_forbidden(path: Path) -> None:
    """No module of rehearsal/ imports a forbidden package, even inside a function."""
    assert imported_roots(path.read_text(encoding="utf-8")) & FORBIDDEN == set()


def test_walker_sees_nested_and_dotted_imports() -> None:
    """The walker itself catches ``import x.y`` and ``from x.y import z`` inside functions."""
    source = (
        "def f():\n    import httpx.abc\n    from redis.asyncio import Redis\nfrom . import x\n"
    )
    assert imported_roots(source) == {"httpx", "redis"}
