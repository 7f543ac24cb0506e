"""A run's directory: what the run is, the episode log that makes it resumable, and its outputs.

::

    DIR/run.json        the manifest: suite, sampling and engine (what decides the results)
    DIR/episodes.jsonl  one finished episode per line, appended and fsynced as each one ends
    DIR/summary.json    the tables' numbers, per cell, plus the manifest   (written at the end)
    DIR/summary.csv     one row per cell, for notebooks                     (written at the end)
    DIR/plot.png        success and cost against budget, with --plot       (written at the end)

A killed run loses only the episodes in flight: a rerun with the same ``--out`` reads the log,
skips every (cell, seed, task) already there and runs the rest. The grid may grow between runs
(more modes, budgets, seeds or tasks); what decides the results may not change — a rerun whose
manifest differs is refused, naming the fields, instead of mixing two experiments in one table.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from .episode import Episode

MANIFEST = "run.json"
EPISODES = "episodes.jsonl"


class RunMismatch(Exception):
    """The directory holds a run of a different experiment."""


class RunDir:
    """The directory of one run (created on first use)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def open(self, manifest: dict[str, Any]) -> dict[tuple[str, int, str], Episode]:
        """Record or check the manifest; the episodes already finished, by key."""
        self.path.mkdir(parents=True, exist_ok=True)
        manifest_path = self.path / MANIFEST
        if manifest_path.exists():
            recorded = json.loads(manifest_path.read_text())
            changed = sorted(k for k in set(recorded) | set(manifest)
                             if recorded.get(k) != manifest.get(k))  # fmt: skip
            if changed:
                detail = "; ".join(
                    f"{k}: {recorded.get(k)!r} there, {manifest.get(k)!r} now" for k in changed
                )
                raise RunMismatch(
                    f"{self.path} holds a different run ({detail}): pass another --out"
                )
        else:
            manifest_path.write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
        return {episode.key: episode for episode in self._read()}

    def _read(self) -> list[Episode]:
        log = self.path / EPISODES
        if not log.exists():
            return []
        data = log.read_bytes()
        if data and not data.endswith(b"\n"):
            # Killed mid-write: the last line is partial; cut it so the next append starts clean.
            data = data[: data.rfind(b"\n") + 1]
            with log.open("r+b") as handle:
                handle.truncate(len(data))
        return [Episode.from_dict(json.loads(line)) for line in data.splitlines() if line.strip()]

    def append(self, episode: Episode) -> None:
        """Add one finished episode, durably, before the run moves on."""
        line = json.dumps(episode.to_dict(), separators=(",", ":")) + "\n"
        with (self.path / EPISODES).open("a") as handle:
            handle.write(line)
            handle.flush()
            os.fsync(handle.fileno())

    def write(self, name: str, text: str) -> Path:
        target = self.path / name
        target.write_text(text)
        return target
