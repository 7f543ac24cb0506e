"""One settings class read from RGW_* variables; secrets never printed."""

from __future__ import annotations

import orjson
import pytest
from pydantic import ValidationError

from rehearsal_gateway.rehearsal.budget import Budget
from rehearsal_gateway.rehearsal.risk import RiskSettings
from rehearsal_gateway.server.rehearse.defaults import (
    budget_caps,
    budget_defaults,
    planner_settings,
    risk_policy,
    trust_settings,
)
from rehearsal_gateway.server.settings import MASK, EngineSpec, GatewaySettings
from rehearsal_gateway.server.store.opening import lifetimes


def test_engines_aliases_and_keys_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Whitespace-separated engines with options, comma aliases and comma keys parse."""
    monkeypatch.setenv(
        "RGW_ENGINES",
        "http://a:1/v1,name=a,roles=act,max_concurrency=4 http://b:2/v1,model=m,roles=act+rehearse",
    )
    monkeypatch.setenv("RGW_ALIASES", "envace=m, other=n")
    monkeypatch.setenv("RGW_API_KEYS", "k1,k2")
    monkeypatch.setenv("RGW_CHUNK_TIMEOUT", "1.5")
    settings = GatewaySettings()
    first, second = settings.engines
    assert (first.label, first.roles, first.max_concurrency) == ("a", {"act"}, 4)
    assert (second.label, second.model, second.roles) == ("b:2", "m", {"act", "rehearse"})
    assert settings.aliases == {"envace": "m", "other": "n"}
    assert [key.get_secret_value() for key in settings.api_keys] == ["k1", "k2"]
    assert settings.chunk_timeout == 1.5


def test_json_lists_are_accepted(monkeypatch: pytest.MonkeyPatch) -> None:
    """A JSON list works for engines and keys (keys may contain commas)."""
    monkeypatch.setenv("RGW_ENGINES", orjson.dumps(["http://x:1/v1", "http://y:2"]).decode())
    monkeypatch.setenv("RGW_API_KEYS", orjson.dumps(["a,b"]).decode())
    settings = GatewaySettings()
    assert [spec.url for spec in settings.engines] == ["http://x:1/v1", "http://y:2"]
    assert settings.api_keys[0].get_secret_value() == "a,b"


@pytest.mark.parametrize(
    "engines",
    [
        pytest.param("ftp://x:1", id="bad-scheme"),
        pytest.param("http://x:1,colour=red", id="unknown-option"),
        pytest.param("http://x:1,roles=dance", id="unknown-role"),
        pytest.param("http://x:1 http://x:1", id="duplicate-names"),
    ],
)
def test_bad_engines_are_refused(monkeypatch: pytest.MonkeyPatch, engines: str) -> None:
    """Engine specs that cannot be right fail at start, not at the first request."""
    monkeypatch.setenv("RGW_ENGINES", engines)
    with pytest.raises(ValidationError):
        GatewaySettings()


def test_rehearsal_engines_serve_the_rehearse_role_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """``RGW_REHEARSAL_ENGINES`` parses as engines do; each serves the rehearse role alone."""
    monkeypatch.setenv("RGW_ENGINES", "http://a:1/v1,name=a")
    monkeypatch.setenv("RGW_REHEARSAL_ENGINES", "http://r:1/v1,name=r,max_concurrency=8 http://s:2")
    settings = GatewaySettings()
    assert [(s.label, s.roles) for s in settings.rehearsal_engines] == [
        ("r", {"rehearse"}),
        ("s:2", {"rehearse"}),
    ]
    assert [spec.label for spec in settings.all_engines] == ["a", "r", "s:2"]


@pytest.mark.parametrize(
    "rehearsal",
    [
        pytest.param("http://r:1,roles=act", id="acting-role"),
        pytest.param("http://a:1", id="name-of-a-main-engine"),
    ],
)
def test_bad_rehearsal_engines_are_refused(monkeypatch: pytest.MonkeyPatch, rehearsal: str) -> None:
    """A rehearsal engine that would act, or that shares a main engine's name, fails at start."""
    monkeypatch.setenv("RGW_ENGINES", "http://a:1")
    monkeypatch.setenv("RGW_REHEARSAL_ENGINES", rehearsal)
    with pytest.raises(ValidationError):
        GatewaySettings()


def test_masked_hides_every_secret() -> None:
    """The printed settings show neither API keys nor passwords in URLs."""
    settings = GatewaySettings(
        api_keys=["sk-secret"],  # type: ignore[list-item]
        redis_url="redis://user:hunter2@redis:6379/0",  # type: ignore[arg-type]
        engines=[EngineSpec(url="http://tok:pw@engine:8000/v1")],
        rehearsal_engines=[EngineSpec(url="http://tok:pw2@imagine:8000/v1")],
    )
    shown = orjson.dumps(settings.masked()).decode()
    for secret in ("sk-secret", "hunter2", "pw@", "pw2@"):
        assert secret not in shown
    assert shown.count(MASK) == 4
    assert "redis:6379" in shown


def test_values_for_maps_each_field_to_its_setting() -> None:
    """Settings reach the core's and the store's dataclasses field by field, renames included."""
    settings = GatewaySettings(
        rehearsal_mode="sequential", rehearsal_budget=3, rehearsal_deadline_ms=1234,
        max_budget=5, max_deadline_ms=4321, trust_enabled=False, trust_threshold=0.7,
        trust_window=77, trust_pins={"f": "ignore_vetoes"}, trace_ttl_s=11, trust_ttl_s=12,
        memory_max_entries=9,
    )  # fmt: skip
    budget = budget_defaults(settings)
    assert (budget.mode, budget.budget, budget.deadline_ms) == ("sequential", 3, 1234)
    assert budget.trace is Budget().trace  # no setting of that name: the dataclass's default
    caps = budget_caps(settings)
    assert (caps.max_budget, caps.max_deadline_ms) == (5, 4321)
    trust = trust_settings(settings)
    assert (trust.enabled, trust.trust_threshold, trust.window) == (False, 0.7, 77)
    assert trust.pins == {"f": "ignore_vetoes"}
    kept = lifetimes(settings)
    assert (kept.trace_s, kept.trust_s, kept.memory_max_entries, kept.trust_window) == (
        11, 12, 9, 77
    )  # fmt: skip


def test_rehearse_max_tokens_reaches_the_planner(monkeypatch: pytest.MonkeyPatch) -> None:
    """RGW_REHEARSE_MAX_TOKENS bounds every imagined result's engine call (default 2048)."""
    assert planner_settings(GatewaySettings()).rehearse_max_tokens == 2048
    monkeypatch.setenv("RGW_REHEARSE_MAX_TOKENS", "96")
    assert planner_settings(GatewaySettings()).rehearse_max_tokens == 96


def test_risk_patterns_and_tenant_overrides(monkeypatch: pytest.MonkeyPatch) -> None:
    """Patterns in written order; a tenant's before the gateway's, its imagine_reads its own."""
    monkeypatch.setenv("RGW_RISK_PATTERNS", "get_*=read_only, cancel_*=destructive")
    monkeypatch.setenv("RGW_RISK_IMAGINE_READS", "true")
    overrides = {"t_a": {"patterns": {"get_secret": "write"}, "imagine_reads": False},
                 "t_b": {}, "t_c": {"confirm": True}}  # fmt: skip
    monkeypatch.setenv("RGW_RISK_OVERRIDES", orjson.dumps(overrides).decode())
    policy = risk_policy(GatewaySettings())
    gateway = (("get_*", "read_only"), ("cancel_*", "destructive"))
    assert policy.default == RiskSettings(gateway, imagine_reads=True)
    assert policy.for_tenant("t_a") == RiskSettings((("get_secret", "write"), *gateway), False)
    assert policy.for_tenant("t_b") == policy.default
    assert policy.for_tenant("t_c").require_confirm
    assert not policy.default.require_confirm
    monkeypatch.setenv("RGW_RISK_PATTERNS", '{"*": "harmless"}')
    with pytest.raises(ValidationError):
        GatewaySettings()
