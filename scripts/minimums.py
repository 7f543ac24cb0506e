"""The requirement lines that install pyproject's runtime dependencies at their declared minimums.

``scripts/test_minimums.sh`` installs what this prints, so the lower bound of every runtime range
in ``pyproject.toml`` is the version a test run used. Every runtime dependency must have one (a
``>=``): a range without a floor cannot be tested at it. ``--tools`` prints instead the pinned
test tools of the ``dev`` extra that the server suite needs (``TOOLS``).

    python scripts/minimums.py            # fastapi==0.165, uvicorn[standard]==0.30, ...
    python scripts/minimums.py --tools    # pytest==..., pytest-asyncio==..., ...
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"
# What the server suite imports beyond the runtime dependencies, pinned as the dev extra pins them.
TOOLS = ("pytest", "pytest-asyncio", "pytest-timeout", "hypothesis", "trustme")
REQUIREMENT = re.compile(r"^\s*([A-Za-z0-9_.-]+)(\[[^\]]*\])?\s*(.*)$")


def minimums(dependencies: list[str]) -> list[str]:
    """``name[extras]==lower`` for each requirement; a requirement without ``>=`` is an error."""
    pins = []
    for requirement in dependencies:
        match = REQUIREMENT.match(requirement.split(";")[0])
        if match is None:
            raise ValueError(f"cannot read the requirement {requirement!r}")
        name, extras, specifiers = match.group(1), match.group(2) or "", match.group(3)
        lower = re.search(r">=\s*([^,\s]+)", specifiers)
        if lower is None:
            raise ValueError(f"{name} has no lower bound (>=) to test at")
        pins.append(f"{name}{extras}=={lower.group(1)}")
    return pins


def tools(dev: list[str]) -> list[str]:
    """The ``dev`` extra's pins of the test tools in ``TOOLS``."""
    pinned = {REQUIREMENT.match(line).group(1).lower(): line for line in dev}  # type: ignore[union-attr]
    return [pinned[name] for name in TOOLS]


def main() -> int:
    project = tomllib.loads(PYPROJECT.read_text())["project"]
    if sys.argv[1:] == ["--tools"]:
        lines = tools(project["optional-dependencies"]["dev"])
    else:
        lines = minimums(project["dependencies"])
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
