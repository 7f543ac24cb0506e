"""Contract: vLLM 0.32's ``/v1/chat/completions/batch``, which rehearsal batches imaginations on.

What ``server/rehearse/batching.py`` relies on, on the twin and on real vLLM: one choice per
conversation, indexed in order, in a chat completion of the usual shape; the usage summed; ``n``
other than 1 refused with a 400 naming it (the gateway then sends the calls one by one).
"""

from __future__ import annotations

import httpx

from tests.contract.conftest import Engine
from tests.contract.wire import THINKING_OFF

BATCH = "/v1/chat/completions/batch"
ANSWER_KEYS = {"id", "object", "created", "model", "choices", "service_tier",
               "system_fingerprint", "usage", "prompt_logprobs", "prompt_token_ids",
               "prompt_text", "kv_transfer_params", "ec_transfer_params",
               "metrics"}  # fmt: skip
CHOICE_KEYS = {"index", "message", "logprobs", "finish_reason", "stop_reason", "token_ids",
               "routed_experts"}  # fmt: skip
MESSAGE_KEYS = {"role", "content", "refusal", "annotations", "audio", "function_call",
                "reasoning"}  # fmt: skip


def _conversation(text: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": "You simulate tools."}, {"role": "user", "content": text}]


def test_one_choice_per_conversation_in_order(engine: Engine, http: httpx.Client) -> None:
    conversations = [_conversation(f"Imagine result number {n}.") for n in range(3)]
    body = {"model": engine.model, "messages": conversations, "max_tokens": 8, "seed": 3,
            "temperature": 0.6, "top_p": 0.95, "top_k": 20, **THINKING_OFF}  # fmt: skip
    answer = http.post(BATCH, json=body)
    assert answer.status_code == 200, answer.text
    data = answer.json()
    assert set(data) == ANSWER_KEYS
    assert data["object"] == "chat.completion"
    assert [choice["index"] for choice in data["choices"]] == [0, 1, 2]
    for choice in data["choices"]:
        assert set(choice) == CHOICE_KEYS
        assert set(choice["message"]) == MESSAGE_KEYS
        assert choice["message"]["role"] == "assistant"
    usage = data["usage"]
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    assert usage["completion_tokens"] <= 3 * 8
    alone = http.post("/v1/chat/completions", json={**body, "messages": conversations[0]})
    assert usage["prompt_tokens"] > alone.json()["usage"]["prompt_tokens"]  # a sum, not one


def test_more_than_one_choice_is_refused(engine: Engine, http: httpx.Client) -> None:
    body = {"model": engine.model, "messages": [_conversation("hi")], "max_tokens": 4, "n": 2}
    answer = http.post(BATCH, json=body)
    assert answer.status_code == 400
    error = answer.json()["error"]
    assert error["param"] == "n"
