"""The wheel installs one top-level package, ``rehearsal_gateway``, and the console script.

The code lives in the top-level folders; ``rehearsal_gateway/`` links them. The wheel is built
here as ``pip install .`` builds it (pip, isolated build), then installed into a folder of its
own and imported from a directory outside the checkout, so a module the links miss, or an import
that still uses an old top-level name, fails here rather than in a user's site-packages.
"""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.support.procs import ROOT

FOLDERS = ("server", "rehearsal", "clients", "twin")
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), str(ROOT)],
        check=True,
        timeout=300,
    )
    [built] = out.glob("rehearsal_gateway-*.whl")
    return built


def test_one_top_level_package_and_the_script(wheel: Path) -> None:
    """Nothing generic lands in site-packages: one package, its metadata, one console script."""
    names = zipfile.ZipFile(wheel).namelist()
    tops = {name.split("/")[0] for name in names}
    assert tops == {"rehearsal_gateway", wheel.name.split("-py3")[0] + ".dist-info"}
    [entry_points] = [n for n in names if n.endswith("entry_points.txt")]
    scripts = zipfile.ZipFile(wheel).read(entry_points).decode()
    assert scripts.split() == [
        "[console_scripts]",
        "rehearsal-gateway",
        "=",
        "rehearsal_gateway.clients.cli:main",
    ]


def test_every_module_of_the_folders_is_in_the_wheel(wheel: Path) -> None:
    """Each tracked module of the four folders is shipped under the one package name."""
    shipped = {n for n in zipfile.ZipFile(wheel).namelist() if n.endswith(".py")}
    tracked = subprocess.run(
        ["git", "ls-files", "--", *(f"{folder}/*.py" for folder in FOLDERS)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert tracked
    assert {f"rehearsal_gateway/{path}" for path in tracked} <= shipped


def test_installed_wheel_imports_without_the_checkout(wheel: Path, tmp_path: Path) -> None:
    """Installed alone, every module imports from the wheel; the old top-level names are gone."""
    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target), wheel],
        check=True,
        timeout=300,
    )
    site = str(target)
    probe = (
        "import importlib, importlib.util, pkgutil, sys\n"
        "import rehearsal_gateway as package\n"
        f"assert package.__file__.startswith({site!r}), package.__file__\n"
        "for info in pkgutil.walk_packages(package.__path__, 'rehearsal_gateway.'):\n"
        "    module = importlib.import_module(info.name)\n"
        f"    assert module.__file__.startswith({site!r}), module.__file__\n"
        "old = ('server', 'rehearsal', 'clients', 'twin')\n"
        "assert all(importlib.util.find_spec(name) is None for name in old)\n"
        "print('ok')\n"
    )
    # Not measured by the suite's coverage: the installed copy is not the checkout's code.
    env = {k: v for k, v in os.environ.items() if not k.startswith("COV")}
    env["PYTHONPATH"] = str(target)
    done = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
