"""The metrics and deploy docs stay true to the contract and to the files they describe."""

from __future__ import annotations

import re
import shlex

from rehearsal_gateway.clients.cli import build_parser
from tests.deploy import promql

DOCS = promql.ROOT / "docs"
METRICS_DOC = (DOCS / "metrics.md").read_text()
DEPLOY_DOC = (DOCS / "deploy.md").read_text()
_PROMQL_BLOCK = re.compile(r"```promql\n(.*?)```", re.DOTALL)


def test_every_contract_metric_is_documented() -> None:
    """docs/metrics.md has a table row for every metric of docs/metrics-spec.md."""
    documented = set(re.findall(r"^\| `(rehearsal_gateway_\w+)` \|", METRICS_DOC, re.MULTILINE))
    families = promql.spec_families()
    assert len(families) == 33
    assert documented == families.keys()


def test_documented_queries_name_real_series() -> None:
    """Each PromQL example of docs/metrics.md names only contract series."""
    queries = [(f"example {i}", q) for i, q in enumerate(_PROMQL_BLOCK.findall(METRICS_DOC), 1)]
    assert len(queries) >= 10
    assert promql.unknown_names(queries, promql.spec_names()) == {}


def test_documented_alerts_exist() -> None:
    """Every alert docs/metrics.md names is defined in rules.yml, and the other way round."""
    named = set(re.findall(r"`((?:Rehearsal|Vllm)\w+)`", METRICS_DOC))
    assert named == promql.alerts().keys()


def test_deploy_doc_names_the_files_it_describes() -> None:
    """Every deploy/ path docs/deploy.md mentions exists."""
    paths = set(re.findall(r"`(deploy/[\w./-]+)`", DEPLOY_DOC))
    assert paths
    for path in paths:
        if path.startswith("deploy/models"):
            continue  # where the operator puts the weights; not in the repository
        assert (promql.ROOT / path).exists(), path


def _shell_commands(text: str, program: str) -> list[list[str]]:
    """The command lines of the page's bash blocks that run ``program``, split as a shell would."""
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", text, re.DOTALL):
        for line in block.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            while words and re.fullmatch(r"\w+=\S*", words[0]):
                words.pop(0)  # VAR=value before the command
            if words[:2] == program.split():
                commands.append(words[1:])
    return commands


def test_deploy_doc_up_commands_parse() -> None:
    """Every `rehearsal-gateway up` example is accepted by the real command line parser."""
    commands = _shell_commands(DEPLOY_DOC, "rehearsal-gateway up")
    assert len(commands) >= 2
    parser = build_parser()
    for words in commands:
        args = parser.parse_args(words)
        assert args.model
        assert args.func.__module__ == "rehearsal_gateway.server.launcher.up"
