"""Tool risk classes: which calls only read the world, which change it, which destroy something.

Every tool of a request gets one class, and rehearsal treats a call by its class
(docs/rehearsal.md, "Risk classes"):

- ``read_only`` — changes nothing: its real result is its own evidence, so its imagination may be
  skipped (``imagine_reads``);
- ``write`` — changes the world, in a way the task may well ask for;
- ``destructive`` — changes it in a way that is hard to undo (a cancellation, a transfer): always
  imagined, whatever trust switched off; its imagined failure is acted on unless trust measured
  that tool's vetoes as unreliable; as the anchor it needs a majority of the samples; with
  ``confirm``, evidence against it that rehearsal could not act on turns it into a question to
  the user;
- ``unknown`` — nobody said: rehearsed as every call was before classes existed.

A tool's class comes from the first of these that names it: the request's ``rehearsal.risk``
map; the tool definition's MCP-style ``annotations`` (on the tool entry or inside its
``function``: ``readOnlyHint`` true is read_only, else ``destructiveHint`` false is write, else —
when either hint is given at all — destructive, MCP's own defaults); the operator's tool-name
patterns (the tenant's, then the gateway's; shell-style, the first that matches in the order
written); else ``unknown``. ``idempotentHint`` and ``openWorldHint`` do not change a class.
Annotations never reach an engine (``strip_annotations``): a chat template would print them into
the prompt the model was not trained on.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import Any, Literal, get_args

from .errors import BudgetError
from .messages import JSON_OBJECT, AssistantTurn
from .trust import Policy

Risk = Literal["read_only", "write", "destructive", "unknown"]
RiskSource = Literal["request", "annotations", "operator", "default"]
RISKS: tuple[str, ...] = get_args(Risk)
# A turn of several calls is as risky as its riskiest call.
_ORDER: dict[str, int] = {"read_only": 0, "unknown": 1, "write": 2, "destructive": 3}


@dataclass(frozen=True, slots=True)
class ToolRisk:
    """One tool's class and where it came from (for the trace)."""

    risk: Risk
    source: RiskSource

    def to_dict(self) -> dict[str, str]:
        return {"risk": self.risk, "source": self.source}


UNKNOWN = ToolRisk("unknown", "default")


@dataclass(frozen=True, slots=True)
class RiskSettings:
    """The operator's policy for one tenant: name patterns, whether reads are imagined, and
    whether ``confirm`` is required (on for every request, whatever the request says)."""

    patterns: tuple[tuple[str, Risk], ...] = ()
    imagine_reads: bool = True
    require_confirm: bool = False


@dataclass(frozen=True, slots=True)
class RiskPolicy:
    """The gateway's ``RiskSettings`` and each tenant's own, where an operator set one."""

    default: RiskSettings = RiskSettings()
    tenants: Mapping[str, RiskSettings] = field(default_factory=dict)

    def for_tenant(self, tenant: str | None) -> RiskSettings:
        return self.tenants.get(tenant, self.default) if tenant is not None else self.default


def as_risk(value: object, param: str) -> Risk:
    """``value`` as a class, or a BudgetError naming ``param``."""
    if not isinstance(value, str) or value not in RISKS:
        raise BudgetError(param, f"expected one of {', '.join(RISKS)}, got {value!r}")
    return value  # type: ignore[return-value]  # checked against RISKS just above


def risk_map(value: object, param: str) -> tuple[tuple[str, Risk], ...]:
    """A request's ``rehearsal.risk`` (tool name -> class) as sorted pairs; BudgetError if bad."""
    if not isinstance(value, JSON_OBJECT):
        raise BudgetError(param, "expected an object mapping tool names to risk classes")
    return tuple(sorted((str(name), as_risk(v, f"{param}.{name}")) for name, v in value.items()))


def _function(tool: Mapping[str, Any]) -> Mapping[str, Any] | None:
    function = tool.get("function")
    return function if isinstance(function, JSON_OBJECT) else None


def annotations_of(tool: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """A tool definition's MCP-style annotations (on the entry, else in its function)."""
    found = tool.get("annotations")
    if not isinstance(found, JSON_OBJECT):
        function = _function(tool)
        found = function.get("annotations") if function is not None else None
    return found if isinstance(found, JSON_OBJECT) else None


def from_annotations(annotations: Mapping[str, Any]) -> Risk | None:
    """The class MCP's hints give (module docstring), or None when neither hint is there."""
    read_only, destructive = annotations.get("readOnlyHint"), annotations.get("destructiveHint")
    if read_only is None and destructive is None:
        return None
    if read_only is True:
        return "read_only"
    return "write" if destructive is False else "destructive"


def _name(tool: Mapping[str, Any]) -> str | None:
    function = _function(tool)
    name = function.get("name") if function is not None else tool.get("name")
    return name if isinstance(name, str) else None


def classify(
    tools: Iterable[Mapping[str, Any]],
    asked: Iterable[tuple[str, Risk]] = (),
    settings: RiskSettings = RiskSettings(),
) -> dict[str, ToolRisk]:
    """Each named tool's class by the precedence of the module docstring."""
    requested = dict(asked)
    classes: dict[str, ToolRisk] = {}
    for tool in tools:
        name = _name(tool) if isinstance(tool, JSON_OBJECT) else None
        if name is None:
            continue
        annotations = annotations_of(tool)
        hinted = from_annotations(annotations) if annotations is not None else None
        if name in requested:
            classes[name] = ToolRisk(requested[name], "request")
        elif hinted is not None:
            classes[name] = ToolRisk(hinted, "annotations")
        else:
            matched = next((r for p, r in settings.patterns if fnmatchcase(name, p)), None)
            classes[name] = UNKNOWN if matched is None else ToolRisk(matched, "operator")
    return classes


def has_annotations(tools: object) -> bool:
    """Whether a request's ``tools`` (a list, else none) carry annotations anywhere."""
    return isinstance(tools, list) and any(
        isinstance(tool, JSON_OBJECT) and annotations_of(tool) is not None for tool in tools
    )


def strip_annotations(tools: Sequence[Any]) -> tuple[Any, ...]:
    """``tools`` without annotations (copies of the entries that had some; the rest as given)."""
    stripped: list[Any] = []
    for tool in tools:
        if isinstance(tool, JSON_OBJECT):
            function = _function(tool)
            if "annotations" in tool:
                tool = {k: v for k, v in tool.items() if k != "annotations"}
            if function is not None and "annotations" in function:
                tool = {
                    **tool,
                    "function": {k: v for k, v in function.items() if k != "annotations"},
                }
        stripped.append(tool)
    return tuple(stripped)


def turn_risk(turn: AssistantTurn, classes: Mapping[str, ToolRisk]) -> Risk | None:
    """The riskiest class among a turn's calls; None for a final answer."""
    risks: list[Risk] = [classes.get(call.name, UNKNOWN).risk for call in turn.tool_calls]
    if not risks:
        return None
    return max(risks, key=lambda risk: _ORDER[risk])


def judging_trust(
    trust: Mapping[str, Policy], classes: Mapping[str, ToolRisk]
) -> dict[str, Policy]:
    """The trust the commit rules judge by: a destructive tool's ``learning`` counts as trusted.

    An imagined failure of a destructive call is acted on unless trust *measured* that tool's
    vetoes as unreliable (``ignore_vetoes``, ``off``); too few real results yet is no measure.
    """
    judged = dict(trust)
    for tool, policy in trust.items():
        if policy == "learning" and classes.get(tool, UNKNOWN).risk == "destructive":
            judged[tool] = "trusted"
    return judged
