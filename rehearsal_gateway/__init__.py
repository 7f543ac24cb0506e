"""Rehearsal Gateway: one import name for everything the project installs.

The code lives in the repository's top-level folders (``server/``, ``rehearsal/``, ``clients/``,
``twin/``); this package holds links to them, so that a wheel puts one top-level package in
site-packages and a checkout imports the same names (docs/decisions/0103-one-import-name.md).
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("rehearsal-gateway")
except PackageNotFoundError:  # a checkout that was never installed
    __version__ = "0+unknown"
