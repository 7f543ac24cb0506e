"""`serve --config FILE`: YAML settings under flag > environment > file > default, and `config`."""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from rehearsal_gateway.server.launcher.sources import Given, SettingsRefused, load_settings
from rehearsal_gateway.server.rehearse.defaults import budget_defaults
from tests.support.procs import ROOT, cli_argv

REFERENCE = (ROOT / "docs" / "configuration.md").read_text()


@pytest.fixture(autouse=True)
def environ() -> Iterator[None]:
    """No RGW_* variable from outside, and none of the ones loading writes survives the test."""
    saved = dict(os.environ)
    for name in [n for n in os.environ if n.upper().startswith("RGW_")]:
        del os.environ[name]
    yield
    os.environ.clear()
    os.environ.update(saved)


def _file(tmp_path: Path, text: str) -> str:
    path = tmp_path / "gateway.yaml"
    path.write_text(text)
    return str(path)


def test_flag_beats_environment_beats_file_beats_default(tmp_path: Path) -> None:
    """Each setting comes from its highest source, and says which."""
    path = _file(tmp_path, "port: 8001\nrehearsal_budget: 2\nrehearsal_mode: parallel\n")
    os.environ["RGW_REHEARSAL_BUDGET"] = "3"
    os.environ["RGW_PORT"] = "8002"
    loaded = load_settings(Given({"port": ("--port", "9000")}, path))
    settings = loaded.settings
    assert (settings.port, settings.rehearsal_budget, settings.rehearsal_mode) == (
        9000, 3, "parallel"
    )  # fmt: skip
    assert settings.rehearsal_depth == 1
    where = {name: source.label() for name, _, source in loaded.rows()}
    assert where["port"] == "--port"
    assert where["rehearsal_budget"] == "RGW_REHEARSAL_BUDGET"
    assert where["rehearsal_mode"] == "rehearsal_mode in config file"
    assert where["rehearsal_depth"] == "default"
    assert where["config"] == "--config"


def test_the_documented_example_file_loads_as_written(tmp_path: Path) -> None:
    """docs/configuration.md's complete file is valid, and every value it sets is the one used."""
    blocks = re.findall(r"^```yaml\n(.*?)^```", REFERENCE, re.MULTILINE | re.DOTALL)
    assert len(blocks) == 1
    loaded = load_settings(Given(config_file=_file(tmp_path, blocks[0])))
    s = loaded.settings
    assert [spec.label for spec in s.engines] == ["gpu-0", "gpu-1"]
    assert s.engines[0].roles == {"act", "rehearse"}
    assert s.engines[1].max_concurrency == 128
    assert s.aliases == {"envace": "EnvACE-Qwen3-8B"}
    assert [key.get_secret_value() for key in s.api_keys] == ["sk-team-a", "sk-team-b"]
    assert (s.rehearsal_mode, s.rehearsal_budget, s.rehearsal_commit) == ("parallel", 4, "anchored")
    assert s.model_switch == ["parallel-4", "sequential-2"]
    assert s.trust_pins == {"send_email": "off"}
    assert s.limit_overrides["default"].rps == 5
    assert s.engine_scheduling == "priority"
    shown = json.dumps([value for _, value, _ in loaded.rows()])
    assert "s3cret" not in shown
    assert "sk-team-a" not in shown
    file_keys = {name for name, _, source in loaded.rows() if source.kind == "file"}
    assert "redis_url" in file_keys
    assert "limit_overrides" in file_keys


@pytest.mark.parametrize(
    ("text", "says"),
    [
        pytest.param(
            "rehearsal_mod: parallel\n",
            "rehearsal_mod: no such setting (did you mean rehearsal_mode?)",
            id="unknown-key",
        ),
        pytest.param("port: [1\n", "not valid YAML at line 2", id="bad-yaml"),
        pytest.param("- port\n", "expected a mapping", id="not-a-mapping"),
        pytest.param(
            "rehearsal_budget: 20\n",
            "rehearsal_budget in config file=20: the default budget must be between 0 and 8",
            id="above-cap",
        ),
        pytest.param(
            "rehearsal_budget: Auto\nrehearsal_commit: select\n",
            'is "auto", which needs RGW_REHEARSAL_COMMIT=anchored',
            id="auto-without-anchored",
        ),
    ],
)
def test_a_bad_file_is_refused_naming_the_key(tmp_path: Path, text: str, says: str) -> None:
    """An unknown key, bad YAML or a bad value stops loading with one line that says where."""
    with pytest.raises(SettingsRefused) as refused:
        load_settings(Given(config_file=_file(tmp_path, text)))
    assert says in str(refused.value)


def test_an_auto_default_budget_is_its_bound_learned_per_anchor(tmp_path: Path) -> None:
    """``rehearsal_budget: auto`` loads; the default budget is auto's bound (the least of
    ``max_budget`` and ``auto_max_k``), with ``auto`` set."""
    loaded = load_settings(Given(config_file=_file(tmp_path, "rehearsal_budget: auto\n")))
    settings = loaded.settings
    defaults = budget_defaults(settings)
    assert (settings.rehearsal_budget, defaults.auto, defaults.budget) == ("auto", True, 4)
    wide = _file(tmp_path, "rehearsal_budget: auto\nauto_max_k: 16\nmax_budget: 6\n")
    assert budget_defaults(load_settings(Given(config_file=wide)).settings).budget == 6


def test_config_command_prints_values_and_sources(tmp_path: Path) -> None:
    """`config --changed` shows what is not a default, masked, with its source; exit 0."""
    path = _file(tmp_path, "rehearsal_mode: parallel\napi_keys: [sk-hidden]\n")
    env = {k: v for k, v in os.environ.items()} | {"RGW_REHEARSAL_BUDGET": "2"}
    argv = cli_argv("config", "--config", path, "--port", "9001", "--changed")
    done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60,
                          check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    rows = {line.split()[0]: line for line in done.stdout.splitlines()}
    assert rows["port"].endswith("9001  [--port]")
    assert rows["rehearsal_budget"].endswith("2  [RGW_REHEARSAL_BUDGET]")
    assert rows["rehearsal_mode"].endswith("parallel  [rehearsal_mode in config file]")
    assert rows["api_keys"] == 'api_keys          ["********"]  [api_keys in config file]'
    assert "sk-hidden" not in done.stdout
    refused = subprocess.run([*argv, "--rehearsal-budget", "99"], cwd=ROOT, env=env,
                             capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert refused.returncode == 2
    assert refused.stderr.startswith("rehearsal-gateway config: --rehearsal-budget=99:")
