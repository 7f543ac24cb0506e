"""The twin over real HTTP on loopback: vLLM's wire shapes, the SDK, metrics and errors."""

from __future__ import annotations

import json

import httpx
import openai
import pytest

from tests.twin.conftest import MODEL, rehearsal_request, world_request


def _post(url: str, body: dict) -> httpx.Response:
    return httpx.post(f"{url}/v1/chat/completions", json=body, timeout=10)


def _events(url: str, body: dict) -> list[dict]:
    with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=10) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        lines = [line for line in response.iter_lines() if line]
    assert lines[-1] == "data: [DONE]"
    return [json.loads(line.removeprefix("data: ")) for line in lines[:-1]]


def test_health_and_models(twin) -> None:
    """/health answers 200 and /v1/models lists the served model."""
    assert httpx.get(f"{twin.url}/health").status_code == 200
    models = httpx.get(f"{twin.url}/v1/models").json()
    assert models["object"] == "list"
    assert [m["id"] for m in models["data"]] == [MODEL]


def test_non_stream_tool_call_shape(twin) -> None:
    """A tools request returns reasoning, tool_calls and usage with cached_tokens."""
    body = _post(twin.url, world_request("retail", 0, temperature=0)).json()
    (choice,) = body["choices"]
    message = choice["message"]
    assert choice["finish_reason"] == "tool_calls"
    assert message["reasoning"]
    assert message["tool_calls"][0]["id"].startswith("chatcmpl-tool-")
    assert json.loads(message["tool_calls"][0]["function"]["arguments"]) == {"order_id": "W1001"}
    assert body["usage"]["prompt_tokens_details"]["cached_tokens"] >= 0
    assert body["id"].startswith("chatcmpl-")
    assert body["object"] == "chat.completion"


def test_streamed_tool_call_deltas_reassemble(twin) -> None:
    """Stream: a header delta with id/type/name, argument fragments, finish, usage, [DONE]."""
    request = world_request("airline", 3, stream=True, temperature=0,
                            stream_options={"include_usage": True})  # fmt: skip
    events = _events(twin.url, request)
    deltas = [e["choices"][0]["delta"] for e in events if e["choices"]]
    assert deltas[0] == {"role": "assistant", "content": ""}
    pieces = [d["tool_calls"][0] for d in deltas if "tool_calls" in d]
    header, fragments = pieces[0], pieces[1:]
    assert header["id"].startswith("chatcmpl-tool-")
    assert header["type"] == "function"
    assert header["function"]["name"] == "get_user"
    assert len(fragments) > 1
    assert all("id" not in f for f in fragments)
    arguments = "".join(f["function"]["arguments"] for f in fragments)
    assert json.loads(arguments) == {"user_id": "U2001"}
    finals = [e["choices"][0]["finish_reason"] for e in events if e["choices"]]
    assert finals[-1] == "tool_calls"
    assert events[-1]["choices"] == []
    assert events[-1]["usage"]["completion_tokens"] > 0


# Keys in the order a real vLLM 0.32 sends them (probed against the CPU engine).
COMPLETION_KEYS = [
    *("id", "object", "created", "model", "choices", "service_tier", "system_fingerprint"),
    *("usage", "prompt_logprobs", "prompt_token_ids", "prompt_text", "kv_transfer_params"),
    *("ec_transfer_params", "metrics"),
]
CHOICE_KEYS = ["index", "message", "logprobs", "finish_reason", "stop_reason", "token_ids",
               "routed_experts"]  # fmt: skip
TEXT_MESSAGE_KEYS = ["role", "content", "refusal", "annotations", "audio", "function_call",
                     "reasoning"]  # fmt: skip


def test_wire_keys_match_vllm(twin) -> None:
    """Envelope, choice, message, usage and stream chunks carry exactly vLLM's keys."""
    hello = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "seed": 1}
    body = _post(twin.url, {**hello, "max_tokens": 5}).json()
    assert list(body) == COMPLETION_KEYS
    assert list(body["choices"][0]) == CHOICE_KEYS
    assert list(body["choices"][0]["message"]) == TEXT_MESSAGE_KEYS
    assert body["system_fingerprint"].startswith("vllm-0.32.0-")
    assert body["usage"]["prompt_tokens_details"].keys() == {
        "cached_tokens", "created_cache_tokens", "multimodal_tokens"}  # fmt: skip
    assert body["usage"]["completion_tokens_details"] == {"reasoning_tokens": 5}
    tools = world_request("retail", 0, temperature=0)
    message = _post(twin.url, tools).json()["choices"][0]["message"]
    assert list(message) == [*TEXT_MESSAGE_KEYS[:-1], "tool_calls", "reasoning"]
    events = _events(twin.url, {**tools, "stream": True, "stream_options": {"include_usage": True}})
    assert events[0]["prompt_token_ids"] is None
    tool_deltas = [e["choices"][0]["delta"] for e in events[1:-1] if e["choices"][0]["delta"]]
    tool_deltas = [d for d in tool_deltas if "tool_calls" in d]
    assert all(d["content"] is None for d in tool_deltas)
    assert list(tool_deltas[0]["tool_calls"][0]) == ["id", "type", "index", "function"]
    final = events[-2]["choices"][0]
    assert list(final) == ["index", "delta", "logprobs", "finish_reason", "stop_reason",
                           "token_ids"]  # fmt: skip
    assert events[-1]["system_fingerprint"] == body["system_fingerprint"]
    assert "multimodal_tokens" not in events[-1]["usage"]["prompt_tokens_details"]


def test_openai_sdk_gets_parsed_tool_call(twin) -> None:
    """The official SDK parses a tool call, non-stream and stream."""
    with openai.OpenAI(base_url=f"{twin.url}/v1", api_key="unused") as client:
        request = world_request("bank", 3, temperature=0)
        completion = client.chat.completions.create(**request)
        call = completion.choices[0].message.tool_calls[0]
        assert call.function.name == "get_card"
        with client.chat.completions.stream(**request) as stream:
            for _ in stream:
                pass
            final = stream.get_final_completion()
        streamed = final.choices[0].message.tool_calls[0]
        assert (streamed.function.name, streamed.function.arguments) == (
            call.function.name,
            call.function.arguments,
        )


def test_n_and_seed(twin) -> None:
    """n=3 gives three indexed choices; the same seed repeats them exactly."""
    request = world_request("retail", 5, n=3, seed=5)
    first, second = _post(twin.url, request).json(), _post(twin.url, request).json()
    assert [c["index"] for c in first["choices"]] == [0, 1, 2]

    def strip(body: dict) -> list:
        return [
            (c["message"]["reasoning"], [t["function"] for t in c["message"]["tool_calls"]])
            for c in body["choices"]
        ]

    assert strip(first) == strip(second)


def test_max_tokens_cut_and_thinking_off(twin) -> None:
    """max_tokens cuts with finish_reason length; enable_thinking false drops reasoning."""
    cut = _post(twin.url, world_request("bank", 0, max_tokens=4)).json()
    assert cut["choices"][0]["finish_reason"] == "length"
    assert cut["usage"]["completion_tokens"] <= 5
    plain = _post(twin.url, world_request(
        "bank", 0, chat_template_kwargs={"enable_thinking": False})).json()  # fmt: skip
    assert plain["choices"][0]["message"]["reasoning"] is None


def test_repeated_request_is_mostly_cached_and_n_prefills_once(twin) -> None:
    """A repeat is ≥90% cached; an n=4 request adds its prompt to the counters once."""
    request = world_request("airline", 7, n=4)
    request["messages"][0]["content"] = "Fresh session 51. " + request["messages"][0]["content"]
    first = _post(twin.url, request).json()["usage"]
    before = _metric(twin.url, "vllm:prompt_tokens_total")
    repeat = _post(twin.url, request).json()["usage"]
    assert _metric(twin.url, "vllm:prompt_tokens_total") - before == repeat["prompt_tokens"]
    assert first["prompt_tokens_details"]["cached_tokens"] < repeat["prompt_tokens"] * 0.5
    ratio = repeat["prompt_tokens_details"]["cached_tokens"] / repeat["prompt_tokens"]
    assert ratio >= 0.9


def _metric(url: str, name: str) -> float:
    for line in httpx.get(f"{url}/metrics").text.splitlines():
        if line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} missing")


def test_metrics_carry_vllm_names(twin) -> None:
    """/metrics exposes the vllm:* families with the model_name label."""
    _post(twin.url, world_request("retail", 1))
    text = httpx.get(f"{twin.url}/metrics").text
    for name in (
        "vllm:prompt_tokens_total", "vllm:generation_tokens_total",
        "vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total",
        "vllm:num_requests_running", "vllm:num_requests_waiting",
        "vllm:e2e_request_latency_seconds_bucket", "vllm:time_to_first_token_seconds_count",
    ):  # fmt: skip
        lines = [line for line in text.splitlines() if line.startswith(name + "{")]
        assert lines, name
        assert all(f'model_name="{MODEL}"' in line for line in lines), name


@pytest.mark.parametrize(
    ("body", "status"),
    [
        pytest.param({"model": MODEL, "messages": []}, 400, id="no-messages"),
        pytest.param({"model": MODEL, "messages": "hi"}, 400, id="messages-type"),
        pytest.param(
            {"model": "gpt-9", "messages": [{"role": "user", "content": "x"}]},
            404,
            id="unknown-model",
        ),
        pytest.param(
            rehearsal_request("Candidate tools (whitelist for this sample):\n[oops"),
            400,
            id="malformed-rehearsal",
        ),
    ],
)
def test_errors_use_vllm_envelope(twin, body: dict, status: int) -> None:
    """Invalid requests get vLLM's error envelope with the HTTP status as code."""
    response = _post(twin.url, body)
    assert response.status_code == status
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["code"] == status


def test_invalid_json_is_a_400(twin) -> None:
    """A body that is not JSON gets a 400, not a 500."""
    response = httpx.post(f"{twin.url}/v1/chat/completions", content=b"{nope", timeout=10)
    assert response.status_code == 400
    assert response.json()["error"]["type"] == "BadRequestError"


def test_a_non_finite_number_in_a_tool_schema_is_echoed_as_null(twin) -> None:
    """``Infinity`` in a Responses tool's schema: a 200 whose echo says null, never a 500."""
    raw = (
        b'{"model": "%s", "input": "hi", "tools": [{"type": "function", "name": "f",'
        b' "parameters": {"type": "object", "properties": {"n": {"maximum": Infinity}}}}]}'
        % MODEL.encode()
    )
    response = httpx.post(twin.url + "/v1/responses", content=raw, timeout=10)
    assert response.status_code == 200, response.text
    (tool,) = response.json()["tools"]
    assert tool["parameters"]["properties"]["n"]["maximum"] is None


def test_rehearsal_over_http(twin) -> None:
    """The rehearsal role answers with thinking and an execution_result block."""
    from tests.twin.conftest import rehearsal_text

    tools = world_request("bank", 0)["tools"]
    text = rehearsal_text(tools, "User: hi", "get_card", {"card_id": "K3001"})
    body = _post(twin.url, rehearsal_request(text)).json()
    content = body["choices"][0]["message"]["content"]
    payload = json.loads(content.removeprefix("<execution_result>\n").split("\n</execution")[0])
    assert payload["card_id"] == "K3001"
    assert payload["status"] == "active"


def test_memory_note_steers_a_weak_policy(start_twin) -> None:
    """At skill 0 the twin errs; with a note vetoing its mistakes it takes the correct step."""
    from rehearsal_gateway.twin.worlds import load_world

    weak = start_twin("--skill", "0")
    world = load_world("retail")
    task = world.tasks[0]
    request = world_request("retail", 0, n=8, seed=1)
    plain = _post(weak.url, request).json()
    right = {"name": task.plan[0].name, "arguments": json.dumps(task.plan[0].arguments)}
    assert all(c["message"]["tool_calls"][0]["function"] != right for c in plain["choices"])
    entries = []
    for i, mistake in enumerate(world.mistakes(task, 0), start=1):
        entries.append(
            f"[{i}] outcome=veto:INVALID_PARAMETERS score=0.00\n"
            f"action: {mistake.call.signature}\nimagined: -"
        )
    note = "<rehearsal_memory>\nImagined outcomes.\n" + "\n".join(entries) + "\n</rehearsal_memory>"
    request["messages"].append({"role": "user", "content": note})
    steered = _post(weak.url, request).json()
    assert all(c["message"]["tool_calls"][0]["function"] == right for c in steered["choices"])
