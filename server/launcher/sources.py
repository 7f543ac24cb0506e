"""Where the gateway's settings come from, checked as a whole before anything starts.

Sources, highest first: a ``serve`` flag, an ``RGW_*`` variable, a key of the YAML file that
``--config`` (``RGW_CONFIG``) names, the default. ``load_settings`` reads them into one
``GatewaySettings`` and refuses, one line per problem naming the flag, variable or file key, the
value and the rule, whatever would otherwise surface later as a client's 400 or a silently
ignored name: a value of the wrong type or out of range, a rehearsal default beyond its cap, an
``RGW_*`` variable or a file key that names no setting (with the nearest setting suggested).
``Loaded.rows`` lists every setting with its value (secrets masked) and its source, which
``rehearsal-gateway config`` prints.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import orjson
from pydantic import ValidationError

from ...rehearsal.budget import check_budget
from ...rehearsal.errors import BudgetError
from ..rehearse.defaults import budget_caps, budget_defaults
from ..settings import CONFIG_VARIABLE, ENV_PREFIX, MASK, GatewaySettings

# RGW_* names that are no gateway setting but belong to the client commands and the twin.
CLIENT_VARIABLES = frozenset(("RGW_URL", "RGW_API_KEY"))
TWIN_PREFIX = "RGW_TWIN_"
SECRET_SETTINGS = frozenset(("api_keys", "redis_url"))
# The cap each rehearsal default is checked against (rehearsal.budget.check_budget).
CAPS = {"budget": "max_budget", "depth": "max_depth", "deadline_ms": "max_deadline_ms"}
Kind = Literal["flag", "env", "file", "default"]


class SettingsRefused(ValueError):
    """The flags, ``RGW_*`` variables and config file make no settings the gateway can run with.

    The message is one line per problem, each naming where the bad value came from.
    """


@dataclass(frozen=True, slots=True)
class Source:
    """Where one setting's value came from, and the name it was given under there."""

    kind: Kind
    name: str

    def label(self) -> str:
        return f"{self.name} in config file" if self.kind == "file" else self.name

    def where(self, setting: str) -> str:
        """How a refusal names the value: its flag, variable or file key (a default: by name)."""
        return f"{setting} (default)" if self.kind == "default" else self.label()


@dataclass(frozen=True)
class Given:
    """What the command line gave: ``flags`` maps a setting to (its flag, the value's text)."""

    flags: Mapping[str, tuple[str, str]] = field(default_factory=dict)
    config_file: str | None = None


def variable(name: str) -> str:
    """The ``RGW_*`` variable of a setting."""
    return ENV_PREFIX + name.upper()


def _nearest(name: str, known: list[str]) -> str:
    match = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
    return f" (did you mean {match[0]}?)" if match else ""


def unknown_variables(environ: Mapping[str, str]) -> list[str]:
    """One line per ``RGW_*`` variable that names no setting, with the nearest setting's."""
    known = sorted(variable(name) for name in GatewaySettings.model_fields)
    lines = []
    for name in sorted(environ):
        upper = name.upper()
        if not upper.startswith(ENV_PREFIX) or upper in known or upper in CLIENT_VARIABLES:
            continue
        if upper.startswith(TWIN_PREFIX):
            continue
        lines.append(f"{name}: no such setting{_nearest(upper, known)}")
    return lines


def read_config_file(path: str) -> dict[str, Any]:
    """The settings a YAML file holds: setting names mapped to values (``rehearsal_mode: off``).

    ``SettingsRefused`` when the file cannot be read or parsed, is not a mapping, or has a key that
    names no setting.
    """
    import yaml

    where = f"config file {path}"
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise SettingsRefused(f"{where}: cannot read it ({exc.strerror})") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}" if mark is not None else ""
        raise SettingsRefused(f"{where}: not valid YAML{at}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise SettingsRefused(f"{where}: expected a mapping of setting names to values")
    known = sorted(name for name in GatewaySettings.model_fields if name != "config")
    unknown = [
        f"{where}: {key}: no such setting{_nearest(str(key).lower(), known)}"
        for key in data
        if key not in known
    ]
    if unknown:
        raise SettingsRefused("\n".join(unknown))
    return data


@dataclass(frozen=True)
class Loaded:
    """Settings as read, with where each value came from."""

    settings: GatewaySettings
    sources: Mapping[str, Source]

    def rows(self) -> list[tuple[str, Any, Source]]:
        """Every setting, its value as JSON data (secrets masked) and its source."""
        shown = self.settings.masked()
        return [
            (name, shown[name], self.sources[name]) for name in type(self.settings).model_fields
        ]


def sources_of(
    given: Given, environ: Mapping[str, str], file_data: Mapping[str, Any]
) -> dict[str, Source]:
    """Each setting's source, by precedence: flag, variable, file key, default."""
    present = {name.upper() for name in environ}
    found: dict[str, Source] = {}
    for name in GatewaySettings.model_fields:
        if name == "config" and given.config_file:
            found[name] = Source("flag", "--config")
        elif name in given.flags:
            found[name] = Source("flag", given.flags[name][0])
        elif variable(name) in present:
            found[name] = Source("env", variable(name))
        elif name in file_data:
            found[name] = Source("file", name)
        else:
            found[name] = Source("default", "default")
    return found


def _raw(name: str, source: Source, given: Given, environ: Mapping[str, str],
         file_data: Mapping[str, Any]) -> str:  # fmt: skip
    """The value as the user wrote it, for the refusal's line (secrets masked)."""
    if name in SECRET_SETTINGS:
        return MASK
    if source.kind == "flag":
        return (given.config_file or "") if name == "config" else given.flags[name][1]
    if source.kind == "env":
        return next((v for k, v in environ.items() if k.upper() == source.name), "")
    if source.kind == "file":
        value = file_data[name]
        return value if isinstance(value, str) else orjson.dumps(value, default=str).decode()
    return str(GatewaySettings.model_fields[name].get_default(call_default_factory=True))


def _refusals(
    exc: ValidationError, found: Mapping[str, Source], raw: Mapping[str, str]
) -> list[str]:
    """``WHERE=VALUE: RULE`` for each pydantic error; pydantic's own URL never shows."""
    lines = []
    for error in exc.errors(include_url=False):
        loc = [str(part) for part in error["loc"]]
        name = loc[0] if loc else ""
        source = found.get(name, Source("default", "default"))
        inner = f" (at {'.'.join(loc[1:])})" if len(loc) > 1 else ""
        rule = str(error["msg"]).removeprefix("Value error, ")
        lines.append(f"{source.where(name)}={raw.get(name, '')}{inner}: {rule}")
    return lines


def whole_problems(settings: GatewaySettings) -> list[tuple[str, str]]:
    """Rules across settings, as ``(setting, rule)``: what no field can check alone."""
    problems: list[tuple[str, str]] = []
    try:
        check_budget(budget_defaults(settings), budget_caps(settings), {})
    except BudgetError as exc:
        knob = exc.param.removeprefix("default.")
        cap = f" (the cap, {variable(CAPS[knob])})" if knob in CAPS else ""
        if settings.rehearsal_budget == "auto" and settings.rehearsal_commit != "anchored":
            rule = f'is "auto", which needs {variable("rehearsal_commit")}=anchored'
            problems.append(("rehearsal_budget", rule))
        else:
            problems.append((f"rehearsal_{knob}", f"the default {knob} {exc.message}{cap}"))
    default_k = settings.rehearsal_budget
    bound = budget_caps(settings).auto_bound  # what fair use charges auto
    cost = (bound if default_k == "auto" else default_k) * settings.rehearsal_depth
    if settings.rehearsal_mode != "off" and 0 < settings.limit_max_cost < cost:
        problems.append(("limit_max_cost", (
            f"is below the default rehearsal's cost (budget x depth = {cost}): every "
            "request without knobs of its own would be refused"
        )))  # fmt: skip
    for suffix in settings.model_switch:
        budget = suffix.partition("-")[2]
        if budget and budget != "auto" and not 0 <= int(budget) <= settings.max_budget:
            problems.append(("model_switch", (
                f"@{suffix}: the budget must be between 0 and {settings.max_budget} "
                f"(the cap, {variable('max_budget')})"
            )))  # fmt: skip
    if settings.workers > 1 and settings.redis_url is None:
        problems.append(("workers", (
            "more than 1 needs a Redis URL (--redis, RGW_REDIS_URL): with the in-process store "
            "each worker would keep its own rehearsal memory, and a tool result reaching another "
            "worker than the one that committed the call would be lost"
        )))  # fmt: skip
    for name in ("simulator_prompt_file", "engine_ca_file"):
        path = getattr(settings, name)
        if path is not None and not Path(path).is_file():
            problems.append((name, f"no such file: {path}"))
    return problems


def load_settings(given: Given) -> Loaded:
    """Read and check the settings ``serve`` would run with; ``SettingsRefused`` says why not.

    The flags are written into the environment as their ``RGW_*`` variables, and the config
    file's path as ``RGW_CONFIG``, so that worker processes, which build their settings from the
    environment, read the same ones.
    """
    environ = os.environ
    problems = unknown_variables(environ)
    path = given.config_file or environ.get(CONFIG_VARIABLE)
    file_data = read_config_file(path) if path else {}
    found = sources_of(given, environ, file_data)
    raw = {name: _raw(name, found[name], given, environ, file_data) for name in found}
    if problems:
        raise SettingsRefused("\n".join(problems))
    for name, (_, text) in given.flags.items():
        environ[variable(name)] = text
    if given.config_file:
        environ[CONFIG_VARIABLE] = given.config_file
    try:
        settings = GatewaySettings()
    except ValidationError as exc:
        raise SettingsRefused("\n".join(_refusals(exc, found, raw))) from None
    problems = [f"{found[n].where(n)}={raw[n]}: {rule}" for n, rule in whole_problems(settings)]
    if problems:
        raise SettingsRefused("\n".join(problems))
    return Loaded(settings, found)
