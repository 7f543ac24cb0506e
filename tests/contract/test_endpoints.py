"""The side endpoints a gateway relies on: ``/health``, ``/v1/models`` and ``/metrics``."""

from __future__ import annotations

import time

import httpx
from openai import OpenAI

from tests.contract.conftest import Engine
from tests.contract.wire import HELLO, THINKING_OFF, metric_types, sample_value

# The families the gateway's dashboards and routing read, with vLLM's Prometheus types.
VLLM_FAMILIES = {
    "vllm:prompt_tokens": "counter",
    "vllm:generation_tokens": "counter",
    "vllm:prefix_cache_queries": "counter",
    "vllm:prefix_cache_hits": "counter",
    "vllm:num_requests_running": "gauge",
    "vllm:num_requests_waiting": "gauge",
    "vllm:request_success": "counter",
    "vllm:e2e_request_latency_seconds": "histogram",
    "vllm:time_to_first_token_seconds": "histogram",
    "vllm:cache_config_info": "gauge",  # `doctor` reads enable_prefix_caching from its labels
}


def test_health(engine: Engine, http: httpx.Client) -> None:
    """``GET /health`` answers 200 while the engine serves."""
    assert http.get("/health").status_code == 200


def test_models_lists_the_served_model(engine: Engine, http: httpx.Client) -> None:
    """``/v1/models`` lists one model in vLLM's shape, including ``max_model_len``."""
    listing = http.get("/v1/models").json()
    assert listing["object"] == "list"
    assert len(listing["data"]) == 1
    model = listing["data"][0]
    assert model["id"] == engine.model
    assert model["object"] == "model"
    assert model["owned_by"] == "vllm"
    assert isinstance(model["created"], int)
    assert isinstance(model["max_model_len"], int)
    assert model["max_model_len"] > 0


def test_models_through_sdk(engine: Engine, client: OpenAI) -> None:
    """The OpenAI SDK lists the served model."""
    assert [model.id for model in client.models.list()] == [engine.model]


def test_metrics_families(engine: Engine, http: httpx.Client) -> None:
    """``/metrics`` exposes vLLM's ``vllm:*`` families with vLLM's types and model label."""
    http.post(
        "/v1/chat/completions",
        json={"model": engine.model, "messages": HELLO, "max_tokens": 2, **THINKING_OFF},
    )
    exposition = http.get("/metrics").text
    types = metric_types(exposition)
    missing = {name: kind for name, kind in VLLM_FAMILIES.items() if types.get(name) != kind}
    assert not missing, f"absent or mistyped: {missing}; got {sorted(types)}"
    assert sample_value(exposition, "vllm:prompt_tokens_total", engine.model) > 0


def test_metrics_count_request_tokens(engine: Engine, http: httpx.Client) -> None:
    """A request adds exactly its usage to the prompt and generation token counters."""

    def counters() -> tuple[float, float]:
        exposition = http.get("/metrics").text
        return (
            sample_value(exposition, "vllm:prompt_tokens_total", engine.model),
            sample_value(exposition, "vllm:generation_tokens_total", engine.model),
        )

    before = counters()
    body = {"model": engine.model, "messages": HELLO, "max_tokens": 5, "seed": 9, **THINKING_OFF}
    usage = http.post("/v1/chat/completions", json=body).json()["usage"]
    expected = (before[0] + usage["prompt_tokens"], before[1] + usage["completion_tokens"])
    # vLLM publishes engine stats a moment after the response; poll briefly.
    deadline = time.monotonic() + 5
    while (after := counters()) != expected and time.monotonic() < deadline:
        time.sleep(0.1)
    assert after == expected
