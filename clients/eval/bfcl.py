"""The ``bfcl-multi-turn`` suite: BFCL v4's own multi-turn tasks, environments and checker.

Everything that decides a score comes from the ``bfcl-eval`` package, unchanged: the tasks and
ground truth (``load_dataset_entry``, ``load_ground_truth_entry``), the function docs and their
conversion to OpenAI tools (``convert_to_tool`` with ``GORILLA_TO_OPENAPI``, as BFCL's own
OpenAI-compatible handler sends them: ``"type": "dict"`` becomes ``"object"`` there), the
executable environments (``execute_multi_turn_func_call``: file system, travel, trading, vehicle,
messaging, tickets, posting, math), the decoding of tool calls into calls
(``convert_to_function_call``) and ``multi_turn_checker`` (state and response checks). What is
ours is the glue ``eval_runner`` does around the checker (its module imports every vendor SDK, so
it cannot be imported here): the turn-count check for force-terminated runs, and skipping steps
that do not decode, as ``_evaluate_single_multi_turn_entry`` does.

One guard is ours too: BFCL evaluates ``name(args)`` strings with ``eval``, so a model that names
a Python builtin (``open``) or a name of BFCL's module as a "tool" would run it. A call whose
name is neither an offered tool nor an undefined identifier is replaced by an undefined name, so
it fails exactly as an unknown tool does in BFCL (``Error during execution: name … is not
defined``) and touches nothing.
"""

from __future__ import annotations

import builtins
import copy
import fnmatch
import importlib
import importlib.metadata
import json
import keyword
import os
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from .episode import Call, ScriptedTurns, Trajectory, UserTurn, Verdict

BFCL_EVAL_REQUIREMENT = "bfcl-eval==2026.3.23"  # the Makefile installs the same release
CATEGORIES = ("base", "miss_func", "miss_param", "long_context")
NOT_OFFERED = "tool_not_offered_to_the_model"
_INSTALL = (
    f"pip install 'rehearsal-gateway[eval]' && pip install --no-deps '{BFCL_EVAL_REQUIREMENT}' "
    "(`make install` does both; bfcl-eval's own dependency list would pull torch and CUDA)"
)


class SuiteUnavailable(Exception):
    """The suite's package (or one of the modules it imports) is not installed."""


def load_bfcl(workdir: Path) -> SimpleNamespace:
    """BFCL's functions this suite calls; ``SuiteUnavailable`` with the fix when missing.

    BFCL creates ``result/``, ``score/`` and ``.file_locks/`` under ``BFCL_PROJECT_ROOT`` (by
    default next to its installed package) when imported: they go to ``workdir`` instead.
    """
    workdir.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("BFCL_PROJECT_ROOT", str(workdir))
    names = {
        "utils": "bfcl_eval.utils",
        "handler_utils": "bfcl_eval.model_handler.utils",
        "types": "bfcl_eval.constants.type_mappings",
        "enums": "bfcl_eval.constants.enums",
        "prompts": "bfcl_eval.constants.default_prompts",
        "execution": "bfcl_eval.eval_checker.multi_turn_eval.multi_turn_utils",
        "checker": "bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker",
    }
    try:
        modules = {key: importlib.import_module(name) for key, name in names.items()}
        version = importlib.metadata.version("bfcl-eval")
    except ImportError as exc:
        missing = exc.name or "bfcl_eval"
        what = "bfcl-eval is not installed" if missing.startswith("bfcl_eval") else (
            f"bfcl-eval needs the module {missing!r}, which is not installed"
        )  # fmt: skip
        raise SuiteUnavailable(f"the bfcl-multi-turn suite cannot run: {what}. {_INSTALL}") from exc
    except importlib.metadata.PackageNotFoundError as exc:
        raise SuiteUnavailable(f"bfcl-eval's metadata is missing. {_INSTALL}") from exc
    return SimpleNamespace(version=version, **modules)


def _unsafe(name: str, namespace: dict[str, Any]) -> bool:
    """Whether BFCL's ``eval`` of ``name(...)`` could reach something other than a NameError."""
    return (
        not name.isidentifier()
        or keyword.iskeyword(name)
        or hasattr(builtins, name)
        or name in namespace
    )


class BfclTask:
    """One BFCL multi-turn task with its live environment instances (BFCL's classes)."""

    def __init__(self, bfcl: SimpleNamespace, entry: dict[str, Any], ground_truth: list[Any]):
        self.bfcl = bfcl
        self.entry = copy.deepcopy(entry)
        self.id: str = entry["id"]
        self.ground_truth = ground_truth
        category = self.id.rsplit("_", 1)[0]
        self.category = category
        self.long_context = "long_context" in category or "composite" in category
        self.functions: list[dict[str, Any]] = list(self.entry["function"])
        held_out = self.entry.get("missed_function", {}).values()
        self.tool_names = {f["name"] for f in self.functions}
        self.tool_names |= {f["name"] for docs in held_out for f in docs}
        # BFCL caches environment instances in its module globals under this name: one per run.
        self.run_name = f"rgweval_{uuid.uuid4().hex[:12]}"
        self._scored = 0

    def turns(self) -> Iterator[UserTurn]:
        """BFCL's turns; a missed-function turn adds its held-out docs and BFCL's prompt."""
        holdout: dict[str, list[dict[str, Any]]] = self.entry.get("missed_function", {})
        handler_utils, enums = self.bfcl.handler_utils, self.bfcl.enums
        for index, messages in enumerate(self.entry["question"]):
            if str(index) in holdout:
                self.functions.extend(holdout[str(index)])
                prompt = self.bfcl.prompts.DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_FC
                messages = [{"role": "user", "content": prompt}]
            tools = handler_utils.convert_to_tool(
                self.functions, self.bfcl.types.GORILLA_TO_OPENAPI,
                enums.ModelStyle.OPENAI_COMPLETIONS,
            )  # fmt: skip
            yield UserTurn(messages=copy.deepcopy(messages), tools=tools)

    def decode(self, calls: Sequence[Call]) -> list[str] | None:
        """BFCL's call strings for committed calls, or ``None`` when BFCL could not decode them."""
        try:
            decoded: list[str] = self.bfcl.handler_utils.convert_to_function_call(
                [{name: arguments} for name, arguments in calls]
            )
        except Exception:  # BFCL: "Failed to decode the model response. Proceed to next turn."
            return None
        if self.bfcl.execution.is_empty_execute_response(decoded):
            return None
        namespace = vars(self.bfcl.execution)
        return [
            text if name in self.tool_names or not _unsafe(name, namespace)
            else NOT_OFFERED + text[len(name):]
            for (name, _), text in zip(calls, decoded, strict=True)
        ]  # fmt: skip

    def execute(self, calls: Sequence[Call]) -> list[str] | None:
        decoded = self.decode(calls)
        if decoded is None:
            return None
        results, _ = self.bfcl.execution.execute_multi_turn_func_call(
            decoded, self.entry.get("initial_config", {}), self.entry["involved_classes"],
            self.run_name, self.id, long_context=self.long_context, is_evaL_run=False,
        )  # fmt: skip
        return [str(result) for result in results]

    def is_error(self, result: str) -> bool:
        """A real tool error: BFCL's execution failure, or an environment's ``{"error": …}``."""
        if result.startswith("Error during execution"):
            return True
        try:
            parsed = json.loads(result)
        except ValueError:
            return False
        return isinstance(parsed, dict) and "error" in parsed

    def score(self, trajectory: Trajectory, force_quit: bool = False) -> Verdict:
        """BFCL's verdict on the trajectory, as ``eval_runner`` reaches it."""
        if len(trajectory) != len(self.ground_truth):
            return Verdict(
                False, "multi_turn:force_terminated",
                f"{len(trajectory)} turns answered of {len(self.ground_truth)}",
            )  # fmt: skip
        decoded_turns = [
            [step for step in (self.decode(_calls(s)) for s in turn) if step] for turn in trajectory
        ]
        self._scored += 1
        name = f"{self.run_name}_score{self._scored}"
        try:
            result = self.bfcl.checker.multi_turn_checker(
                decoded_turns, self.ground_truth, self.entry, self.category, name
            )
        finally:
            self.release()
        if result.get("valid"):
            return Verdict(True)
        return Verdict(False, result.get("error_type"), str(result.get("error_message"))[:500])

    def release(self) -> None:
        """Drop this run's environment instances from BFCL's module-level cache."""
        namespace = vars(self.bfcl.execution)
        for key in [k for k in namespace if k.startswith(self.run_name)]:
            del namespace[key]


def _calls(step: dict[str, Any]) -> list[Call]:
    return [(str(name), str(arguments)) for name, arguments in step.get("calls") or []]


class BfclSuite(ScriptedTurns):
    """BFCL v4 multi-turn, one category (``base`` by default)."""

    name = "bfcl-multi-turn"

    def __init__(self, workdir: Path, category: str = "base") -> None:
        if category not in CATEGORIES:
            raise ValueError(f"unknown BFCL category {category!r} (one of {', '.join(CATEGORIES)})")
        self.bfcl = load_bfcl(workdir)
        self.category = category
        dataset = f"multi_turn_{category}"
        self.entries = {e["id"]: e for e in self.bfcl.utils.load_dataset_entry(dataset)}
        answers = self.bfcl.utils.load_ground_truth_entry(dataset)
        self.ground_truth = {a["id"]: a["ground_truth"] for a in answers}
        self.step_limit: int = self.bfcl.prompts.MAXIMUM_STEP_LIMIT

    def task_ids(self, patterns: Sequence[str] = ()) -> list[str]:
        ids = list(self.entries)
        if patterns:
            ids = [i for i in ids if any(fnmatch.fnmatchcase(i, p) for p in patterns)]
        return ids

    def start(self, task_id: str) -> BfclTask:
        return BfclTask(self.bfcl, self.entries[task_id], self.ground_truth[task_id])

    def manifest(self) -> dict[str, Any]:
        return {
            "suite": self.name,
            "category": self.category,
            "package": f"bfcl-eval {self.bfcl.version}",
            "step_limit": self.step_limit,
        }
