"""The rehearsal budget: how much private rehearsal one request may spend, validated once.

A request's knobs come from three places, in order of precedence: the body's ``rehearsal`` object,
the ``X-Rehearsal-*`` headers, then the server's defaults. ``resolve_budget`` merges them into a
frozen ``Budget`` and checks every value against ``BudgetCaps``. Nothing is ever clamped: a value
of the wrong type or outside the caps raises ``BudgetError`` naming the parameter as the client
spelled it (``rehearsal.budget`` for a body field, ``X-Rehearsal-Budget`` for a header), which the
server turns into a 400. A budget of 0 means "off", whatever the mode says.

``budget`` may also be ``"auto"`` (``rehearsal.auto``): the K is learned per tenant and tool once
the anchor is known, within the caps; until then ``Budget.budget`` holds the cap, the bound every
engine-call count is held to. It needs the anchored commit rule, the only one that acts before
it spends: any other is a 400.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Literal, get_args

from .auto import AUTO
from .errors import BudgetError
from .risk import Risk, risk_map

Mode = Literal["off", "parallel", "sequential"]
CommitRule = Literal["anchored", "reflect", "select"]

MODES: tuple[str, ...] = get_args(Mode)
COMMIT_RULES: tuple[str, ...] = get_args(CommitRule)

# Header name -> Budget field. Headers carry only the knobs a plain HTTP client most often needs.
HEADERS: dict[str, str] = {
    "X-Rehearsal-Mode": "mode",
    "X-Rehearsal-Budget": "budget",
    "X-Rehearsal-Depth": "depth",
    "X-Rehearsal-Commit": "commit",
    "X-Rehearsal-Deadline-Ms": "deadline_ms",
}


@dataclass(frozen=True, slots=True)
class BudgetCaps:
    """Upper bounds an operator sets; requests beyond them are rejected, never clamped."""

    max_budget: int = 8
    max_depth: int = 4
    max_deadline_ms: int = 120_000
    max_temperature: float = 2.0
    # The most K a learned budget (``"auto"``) spends: with ``max_budget``, its bound, which is
    # what fair use charges it.
    auto_max_k: int = 4

    @property
    def auto_bound(self) -> int:
        return min(self.max_budget, self.auto_max_k)


@dataclass(frozen=True, slots=True)
class Budget:
    """The resolved knobs of one rehearsal. Defaults follow EnvACE's evaluation sampling."""

    mode: Mode = "parallel"
    budget: int = 4
    depth: int = 1
    commit: CommitRule = "anchored"
    deadline_ms: int = 20_000
    temperature: float = 0.6
    top_p: float = 0.95
    early_exit: bool = True
    trace: bool = False
    # One re-asking call when every candidate fails a deterministic check (rehearsal.planner).
    repair: bool = True
    # The request's own risk classes, tool name -> class, sorted (``rehearsal.risk``).
    risk: tuple[tuple[str, Risk], ...] = ()
    # A destructive call with evidence against it that no rule could act on becomes a question
    # to the user instead (rehearsal.confirm).
    confirm: bool = False
    # ``budget: "auto"``: ``budget`` is its bound (``BudgetCaps.auto_bound``), and the anchor's
    # tool's learned K is spent.
    auto: bool = False

    @property
    def active(self) -> bool:
        """Whether this budget asks for any rehearsal at all."""
        return self.mode != "off" and self.budget > 0

    def to_dict(self) -> dict[str, Any]:
        """The knobs as a JSON object (the trace stores it as is), in field order.

        Spelled out: ``dataclasses.asdict`` deep-copies each field and was most of this cost.
        """
        return {
            "mode": self.mode,
            "budget": self.budget,
            "depth": self.depth,
            "commit": self.commit,
            "deadline_ms": self.deadline_ms,
            "temperature": self.temperature,
            "top_p": self.top_p,
            "early_exit": self.early_exit,
            "trace": self.trace,
            "repair": self.repair,
            "risk": self.risk,
            "confirm": self.confirm,
            "auto": self.auto,
        }

    def max_engine_calls(self, calls_per_turn: int = 1) -> int:
        """The most engine calls this budget can cost, for turns of ``calls_per_turn`` tool calls.

        One trajectory of depth d costs ``c + (d - 1) * (1 + c)`` calls after its first acting
        turn: c imagined results per step, plus one acting call for every step after the first.
        ``anchored`` parallel adds one acting call (the anchor is its own call); ``reflect`` adds
        the reflecting call and the c imagined results that verify a new action. See
        docs/rehearsal.md for the exact count and when early exits make it smaller.
        """
        if not self.active:
            return 1
        c, d, k = calls_per_turn, self.depth, self.budget
        walk = c + (d - 1) * (1 + c)
        reflect = 0 if self.commit == "anchored" else 1 + c  # select reflects when all is bad
        if self.mode == "parallel":
            anchor = 1 if self.commit == "anchored" and k > 1 else 0
            return 1 + anchor + k * walk + reflect
        return k * (1 + walk) + reflect


def _field_names() -> tuple[str, ...]:
    """The knobs a body may name: every field but ``auto``, which ``budget: "auto"`` sets."""
    return tuple(name for name in Budget.__dataclass_fields__ if name != "auto")


def _is_auto(value: object) -> bool:
    return isinstance(value, str) and value.strip().lower() == AUTO


def _as_int(param: str, value: object, *, from_text: bool) -> int:
    # ``budget`` also takes "auto" (checked before this): say so when it is wrong.
    wanted = 'an integer or "auto"' if param.lower().endswith("budget") else "an integer"
    if from_text and isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            raise BudgetError(param, f"expected {wanted}, got {value!r}") from None
    if isinstance(value, bool) or not isinstance(value, int):
        raise BudgetError(param, f"expected {wanted}, got {type(value).__name__}")
    return value


def _as_float(param: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise BudgetError(param, f"expected a number, got {type(value).__name__}")
    number = float(value)
    if not math.isfinite(number):
        raise BudgetError(param, "expected a finite number")
    return number


def _as_choice(param: str, value: object, choices: tuple[str, ...]) -> str:
    text = value.strip().lower() if isinstance(value, str) else None
    if text not in choices:
        raise BudgetError(param, f"expected one of {', '.join(choices)}, got {value!r}")
    return choices[choices.index(text)]


def _coerce(name: str, param: str, value: object, *, from_text: bool) -> object:
    """One knob's value in its field's type, or a BudgetError naming ``param``."""
    if name == "mode":
        return _as_choice(param, value, MODES)
    if name == "commit":
        return _as_choice(param, value, COMMIT_RULES)
    if name == "budget" and _is_auto(value):
        return AUTO
    if name in ("budget", "depth", "deadline_ms"):
        return _as_int(param, value, from_text=from_text)
    if name in ("temperature", "top_p"):
        return _as_float(param, value)
    if name == "risk":
        return risk_map(value, param)
    if not isinstance(value, bool):
        raise BudgetError(param, f"expected a boolean, got {type(value).__name__}")
    return value


def check_budget(budget: Budget, caps: BudgetCaps, params: Mapping[str, str]) -> None:
    """Raise BudgetError unless every knob of ``budget`` lies within ``caps``.

    ``params`` maps a field to the name the client used for it; fields absent from it were
    defaults, reported as ``default.<field>`` (a server misconfiguration, not a client error).
    """

    def fail(name: str, message: str) -> None:
        raise BudgetError(params.get(name, f"default.{name}"), message)

    if not 0 <= budget.budget <= caps.max_budget:
        fail("budget", f"must be between 0 and {caps.max_budget}")
    if not 1 <= budget.depth <= caps.max_depth:
        fail("depth", f"must be between 1 and {caps.max_depth}")
    if not 1 <= budget.deadline_ms <= caps.max_deadline_ms:
        fail("deadline_ms", f"must be between 1 and {caps.max_deadline_ms}")
    if not 0.0 <= budget.temperature <= caps.max_temperature:
        fail("temperature", f"must be between 0 and {caps.max_temperature}")
    if not 0.0 < budget.top_p <= 1.0:
        fail("top_p", "must be greater than 0 and at most 1")
    if budget.auto and budget.commit != "anchored":
        named = "commit" if "commit" in params and "budget" not in params else "budget"
        fail(named, 'a budget of "auto" needs the anchored commit rule')


def _asks_for_rehearsal(chosen: Mapping[str, object]) -> bool:
    value = chosen.get("budget")
    return value == AUTO or (isinstance(value, int) and value > 0)


_KNOB_HEADERS = frozenset(header.lower() for header in HEADERS)


def names_a_knob(headers: Mapping[str, str] | None) -> bool:
    """Whether ``headers`` hold an ``X-Rehearsal-*`` knob (names in any case)."""
    # In C (a set against lowered names), as it runs on every request.
    return headers is not None and not _KNOB_HEADERS.isdisjoint(map(str.lower, headers))


@lru_cache(maxsize=16)
def _resolved(defaults: Budget, caps: BudgetCaps) -> Budget:
    """``defaults`` checked and resolved as a request without knobs gets them, once per pair.

    The merge, the ``replace`` and the checks give the same answer for every such request.
    """
    return resolve_budget({}, None, defaults=defaults, caps=caps)


def resolve_budget(
    body: object = None,
    headers: Mapping[str, str] | None = None,
    *,
    defaults: Budget,
    caps: BudgetCaps,
) -> Budget:
    """Merge the body's ``rehearsal`` object, then the headers, over ``defaults``; check caps.

    ``body`` is the raw JSON value of the ``rehearsal`` field (``None`` when absent); a ``null``
    knob inside it means "not given". Header names are matched case-insensitively; other headers
    are ignored. Unknown body fields are rejected so that a typo never passes silently.

    A request that sets ``budget`` above 0 but no ``mode`` rehearses in the server's default
    mode, or in ``parallel`` when that default is ``off``.
    """
    if body is None and not names_a_knob(headers):
        return _resolved(defaults, caps)  # most requests: the server's defaults, as they are
    if body is not None and not isinstance(body, Mapping):
        raise BudgetError("rehearsal", "expected an object")
    fields = _field_names()
    chosen: dict[str, object] = {}
    params: dict[str, str] = {}
    lowered = {key.lower(): value for key, value in (headers or {}).items()}
    for header, name in HEADERS.items():
        raw = lowered.get(header.lower())
        if raw is not None:
            chosen[name] = _coerce(name, header, raw, from_text=True)
            params[name] = header
    for key, value in (body or {}).items():
        param = f"rehearsal.{key}"
        if key not in fields:
            raise BudgetError(param, "unknown rehearsal parameter")
        if value is not None:
            chosen[key] = _coerce(key, param, value, from_text=False)
            params[key] = param
    if "mode" not in chosen and defaults.mode == "off" and _asks_for_rehearsal(chosen):
        # A budget given without a mode means "rehearse": silently doing nothing would be worse.
        chosen["mode"] = "parallel"
    if "budget" in chosen:  # a request's own budget, learned or fixed, over the default's
        chosen["auto"] = chosen["budget"] == AUTO
    if chosen.get("auto", defaults.auto):
        chosen["budget"] = caps.auto_bound  # the learned K is chosen per anchor, within it
    # ``Budget(**...)`` over ``to_dict`` (held to every field by a test), not ``replace``, which
    # walks the dataclass's fields in Python on every rehearsed request.
    merged = defaults.to_dict() | chosen
    budget = Budget(**merged)
    check_budget(budget, caps, params)
    if budget.budget == 0:
        merged["mode"] = "off"
        budget = Budget(**merged)
    return budget
