"""``/openapi.json`` is usable by API tools: bodies and error answers declared, schemathesis green.

The document is read in-process for what it must say, then schemathesis fuzzes every operation
of a live gateway (twin and Redis behind it, API keys on) from the document the gateway serves:
bounded examples per operation, no 5xx, and every 4xx in the OpenAI error envelope.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from rehearsal_gateway.server.app import create_app
from rehearsal_gateway.server.settings import GatewaySettings
from tests.server.conftest import TWIN_MODEL
from tests.server.rehearsal_support import Stack, running_stack

KEY = "openapi-suite-key"
AUTH = {"Authorization": f"Bearer {KEY}"}
# Per operation; 20 operations x this many cases, each a real request through gateway and twin.
EXAMPLES = 25


def _document(**fields: Any) -> dict[str, Any]:
    return create_app(GatewaySettings(**fields)).openapi()


def _refs(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "$ref":
                yield value
            else:
                yield from _refs(value)
    elif isinstance(node, list):
        for item in node:
            yield from _refs(item)


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/responses"])
def test_bodies_and_error_answers_are_declared(path: str) -> None:
    """Chat and responses declare their JSON body, the knob headers and envelope-shaped 4xx."""
    operation = _document()["paths"][path]["post"]
    body = operation["requestBody"]["content"]["application/json"]["schema"]["$ref"]
    assert body.rsplit("/", 1)[1] in ("ChatCompletionRequest", "ResponsesRequest")
    headers = {parameter["name"] for parameter in operation["parameters"]}
    assert {"X-Rehearsal-Budget", "X-Rehearsal-Mode"} <= headers
    for status in ("400", "401", "404", "413", "4XX", "502", "503", "504"):
        schema = operation["responses"][status]["content"]["application/json"]["schema"]
        assert schema == {"$ref": "#/components/schemas/ErrorEnvelope"}
    assert "422" not in operation["responses"]  # a bad body is a 400 here
    answers = set(operation["responses"]["200"]["content"])
    assert answers == {"application/json", "text/event-stream"}


def test_knob_schema_follows_the_settings_and_every_ref_resolves() -> None:
    """The rehearsal object carries this deployment's caps and defaults; no dangling $ref."""
    doc = _document(max_budget=5, rehearsal_mode="sequential", api_keys=[KEY])
    schemas = doc["components"]["schemas"]
    knobs = schemas["RehearsalKnobs"]
    assert knobs["properties"]["budget"]["anyOf"][0]["maximum"] == 5
    assert knobs["properties"]["mode"]["default"] == "sequential"
    assert knobs["additionalProperties"] is False
    chat = schemas["ChatCompletionRequest"]
    assert chat["properties"]["rehearsal"]["anyOf"][0] == {
        "$ref": "#/components/schemas/RehearsalKnobs"
    }
    assert "messages" in chat["required"]
    assert schemas["ErrorBody"]["required"] == ["message", "type"]
    for ref in set(_refs(doc)):
        assert ref.removeprefix("#/components/schemas/") in schemas, ref
    assert doc["security"] == [{"apiKey": []}]
    assert doc["paths"]["/health"]["get"]["security"] == []
    assert "security" not in _document()  # no keys configured, no auth declared


# --------------------------------------------------------------------------- schemathesis


@pytest.fixture(scope="module")
def fuzzed_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """Twin (retail, zero latency) + gateway with an API key, Redis behind it."""
    with running_stack(
        tmp_path_factory.mktemp("openapi"),
        twin_args=("--latency", "zero"),
        env={
            "RGW_API_KEYS": KEY,
            "RGW_MAX_BUDGET": "2",
            "RGW_REHEARSAL_BUDGET": "2",
            "RGW_MAX_DEPTH": "2",
        },  # small caps: a rehearsed case costs at most a few calls
    ) as stack:
        yield stack


@pytest.fixture(scope="module")
def session() -> Iterator[requests.Session]:
    """One keep-alive session for every case (a connection per case would dominate the time)."""
    with requests.Session() as http:
        yield http


@pytest.fixture(scope="module")
def served_schema(fuzzed_stack: Stack) -> Any:
    """The document the live gateway serves, loaded as schemathesis loads any API's."""
    url = fuzzed_stack.gateway.url
    return schemathesis.openapi.from_url(url + "/openapi.json", headers=AUTH, timeout=10)


def _served_model(drawn: tuple[Any, bool]) -> Any:
    case, serve = drawn
    if serve and isinstance(case.body, dict) and "model" in case.body:
        case.body["model"] = TWIN_MODEL
    return case


CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]
# schemathesis' own pytest loader (``from_fixture``) reads a node attribute pytest 9 no longer
# has, so each operation gets a test here and drives schemathesis' strategies with hypothesis.
OPERATIONS = sorted(
    (method.upper(), path)
    for path, operations in _document(api_keys=[KEY])["paths"].items()
    for method in operations
)


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    ("method", "path"), [pytest.param(m, p, id=f"{m} {p}") for m, p in OPERATIONS]
)
def test_schemathesis_finds_no_5xx_and_only_envelope_4xx(
    served_schema: Any, session: requests.Session, method: str, path: str
) -> None:
    """Generated requests, valid and invalid: no 5xx, declared answers, 4xx in the envelope."""
    operation = served_schema[path][method]
    generated = operation.as_strategy(GenerationMode.POSITIVE) | operation.as_strategy(
        GenerationMode.NEGATIVE
    )
    # A random model name is a 404 before any engine call: half the bodies name the served
    # model instead, so they reach the engine (and rehearsal, when they offer tools).
    cases = st.tuples(generated, st.booleans()).map(_served_model)

    # Reasons: hypothesis' shrinking and explain phases would multiply the request count on a
    # 2-core machine (a failure still shows its case); ``too_slow`` and ``filter_too_much`` fire
    # on the chat body (a nested discriminated union) when the machine is busy.
    @given(case=cases)
    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        database=None,
    )
    def exchange(case: Any) -> None:
        response = case.call(session=session, headers=AUTH, timeout=60)
        case.validate_response(response, checks=CHECKS)
        if 400 <= response.status_code < 500:
            error = response.json()["error"]
            assert isinstance(error["message"], str)
            assert isinstance(error["type"], str)

    exchange()
