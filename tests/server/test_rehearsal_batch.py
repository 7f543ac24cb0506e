"""Imaginations ready together go as one ``/v1/chat/completions/batch`` call (batching.py).

Through the gateway on loopback: against the twin (which serves the batch route as vLLM 0.32
does) K walks' imaginations take fewer engine calls than there were imaginations, with the same
answers as one call each; against an engine without the route batching turns itself off after
the first 404 and every rehearsal still answers. ``Batcher``'s own rules (a refused batch sent
again call by call, a failed one failing every call, a cancelled sender) are driven directly.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest

from rehearsal_gateway.rehearsal.errors import GeneratorError, MalformedResponse
from rehearsal_gateway.rehearsal.messages import (
    AssistantTurn,
    GenerationRequest,
    GenerationResponse,
)
from rehearsal_gateway.server.rehearse.batching import Batcher, BatchRefused, BatchRoute, batchable
from tests.server.conftest import metric_value
from tests.server.rehearsal_support import Stack, chat, opening, rehearsal_of, running_stack

KNOBS = {"mode": "parallel", "budget": 4, "commit": "select", "early_exit": False}


@pytest.fixture(scope="module", params=["true", "false"], ids=["batched", "one-by-one"])
def stacked(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Stack, bool]]:
    """A weak policy (many distinct candidates) with faithful imagination, zero latency."""
    logs = tmp_path_factory.mktemp("batch")
    twin_args = ("--skill", "0.3", "--fidelity", "1.0", "--seed", "5")
    env = {"RGW_REHEARSAL_BATCH": request.param}
    with running_stack(logs, twin_args=twin_args, env=env) as stack:
        yield stack, request.param == "true"


def _rehearse(stack: Stack, seeds: range) -> list[dict[str, Any]]:
    summaries = []
    for seed in seeds:
        task = stack.world.tasks[seed % len(stack.world.tasks)]
        completion = chat(stack.sdk(), stack.world, opening(stack.world, task), seed=seed, **KNOBS)
        assert completion.choices[0].message.tool_calls
        summaries.append(rehearsal_of(completion))
    return summaries


def _counts(stack: Stack) -> tuple[float, float]:
    """(imaginations, rehearsal-role engine calls) the gateway has made so far."""
    url = stack.gateway.url
    imagined = metric_value(url, "rehearsal_gateway_imagined_observation_seconds_count")
    calls = metric_value(url, "rehearsal_gateway_engine_call_seconds_count", role="rehearse")
    return imagined, calls


def test_imaginations_of_a_rehearsal_share_engine_calls(stacked: tuple[Stack, bool]) -> None:
    """Batched: fewer rehearsal calls than imaginations; one by one: a call each."""
    stack, batched = stacked
    summaries = _rehearse(stack, range(6))
    imagined, calls = _counts(stack)
    assert imagined >= 6  # enough walks imagined side by side to batch
    if batched:
        assert calls < imagined
    else:
        assert calls == imagined
    assert all(not s["degraded"] for s in summaries)


LOOKUP = {"type": "function", "function": {
    "name": "lookup", "description": "Look a key up.",
    "parameters": {"type": "object", "properties": {"key": {"type": "integer"}},
                   "required": ["key"]},
}}  # fmt: skip


def test_an_engine_without_the_route_turns_batching_off(
    start_double: Any, start_gateway: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """The double has no batch route: its 404 sends the calls one by one, now and after."""
    engine = start_double("imagine:0")
    gateway = start_gateway(engine.url + "/v1")
    body = {"model": "double-model", "messages": [{"role": "user", "content": "Look up keys."}],
            "tools": [LOOKUP], "rehearsal": KNOBS}  # fmt: skip
    with httpx.Client(base_url=gateway.url, timeout=30) as client:
        for _ in range(2):
            answer = client.post("/v1/chat/completions", json=body)
            assert answer.status_code == 200, answer.text
            assert answer.json()["rehearsal"]["degraded"] is None
    imagined = metric_value(gateway.url, "rehearsal_gateway_imagined_observation_seconds_count")
    calls = metric_value(
        gateway.url, "rehearsal_gateway_engine_call_seconds_count", role="rehearse"
    )
    assert imagined == 8  # four distinct calls each time
    assert calls == 1 + imagined  # the refused batch, then every imagination alone
    warnings = [r for r in caplog.records if "batching is off" in r.getMessage()]
    assert len(warnings) == 1


# -- Batcher's rules, driven directly ---------------------------------------------------------


def _request(text: str) -> GenerationRequest:
    return GenerationRequest(role="rehearse", messages=({"role": "user", "content": text},), seed=1)


def _body(request: GenerationRequest) -> dict[str, Any]:
    return {"model": "m", **request.to_openai_body()}


def _answer(text: str) -> GenerationResponse:
    return GenerationResponse((AssistantTurn(content=text),))


class Engine:
    """What ``Batcher`` calls: ``one`` answers with the conversation's text, ``send`` as told."""

    def __init__(self, send: Any = None) -> None:
        self.alone: list[str] = []
        self.batches: list[list[str]] = []
        self.route = BatchRoute()
        self._send = send

    async def one(self, request: GenerationRequest, body: dict[str, Any]) -> GenerationResponse:
        assert body["messages"] == list(request.messages)  # the body built for it, passed on
        text = request.messages[0]["content"]
        self.alone.append(text)
        if text == "bad":
            raise GeneratorError("refused alone too", role="rehearse")
        return _answer(f"alone:{text}")

    async def send(self, payload: bytes, requests: list[GenerationRequest]) -> bytes:
        body = orjson.loads(payload)
        assert "n" not in body
        assert body["seed"] == requests[0].seed
        texts = [conversation[0]["content"] for conversation in body["messages"]]
        self.batches.append(texts)
        if self._send is not None:
            return await self._send(texts)
        choices = [{"index": i, "message": {"role": "assistant", "content": f"batch:{t}"}}
                   for i, t in enumerate(texts)]  # fmt: skip
        return orjson.dumps({"choices": choices, "usage": {"prompt_tokens": 9}})

    def batcher(self) -> Batcher:
        return Batcher(self.one, self.send, self.route)


async def _together(batcher: Batcher, texts: list[str]) -> list[Any]:
    requests = [_request(text) for text in texts]
    return await asyncio.gather(
        *(batcher.generate(r, _body(r)) for r in requests), return_exceptions=True
    )


def test_calls_ready_together_are_one_batch_each_with_its_own_choice() -> None:
    engine = Engine()
    answers = asyncio.run(_together(engine.batcher(), ["a", "b", "c"]))
    assert engine.batches == [["a", "b", "c"]]
    assert engine.alone == []
    assert [a.choices[0].content for a in answers] == ["batch:a", "batch:b", "batch:c"]
    assert [a.usage.prompt for a in answers] == [9, 0, 0]  # counted once


def test_a_call_alone_goes_as_it_always_did() -> None:
    engine = Engine()
    answers = asyncio.run(_together(engine.batcher(), ["a"]))
    assert engine.batches == []
    assert engine.alone == ["a"]
    assert answers[0].choices[0].content == "alone:a"


def test_only_calls_agreeing_on_their_fields_share_a_batch() -> None:
    engine = Engine()
    batcher = engine.batcher()
    hot, cold = _request("hot"), _request("cold")

    async def both() -> list[GenerationResponse]:
        return list(await asyncio.gather(
            batcher.generate(hot, {**_body(hot), "temperature": 1.0}),
            batcher.generate(cold, {**_body(cold), "temperature": 0.1}),
        ))  # fmt: skip

    asyncio.run(both())
    assert engine.batches == []
    assert sorted(engine.alone) == ["cold", "hot"]


@pytest.mark.parametrize(("status", "route_on"), [(400, True), (404, False), (405, False)])
def test_a_refused_batch_is_sent_call_by_call(status: int, route_on: bool) -> None:
    """Each call then stands alone: one fails as it would have, the others answer."""

    async def refuse(texts: list[str]) -> bytes:
        raise BatchRefused(status)

    engine = Engine(refuse)
    answers = asyncio.run(_together(engine.batcher(), ["a", "bad", "c"]))
    assert sorted(engine.alone) == ["a", "bad", "c"]
    assert answers[0].choices[0].content == "alone:a"
    assert isinstance(answers[1], GeneratorError)
    assert answers[2].choices[0].content == "alone:c"
    assert engine.route.enabled is route_on


@pytest.mark.parametrize(
    "failure",
    [GeneratorError("rehearse call failed: 503", role="rehearse"),
     MalformedResponse("two choices for three")],
)  # fmt: skip
def test_a_failed_batch_fails_every_call(failure: Exception) -> None:
    async def fail(texts: list[str]) -> bytes:
        raise failure

    engine = Engine(fail)
    answers = asyncio.run(_together(engine.batcher(), ["a", "b", "c"]))
    assert answers == [failure] * 3
    assert engine.alone == []
    assert engine.route.enabled


def test_an_answer_with_the_wrong_number_of_choices_fails_every_call() -> None:
    async def short(texts: list[str]) -> bytes:
        return orjson.dumps({"choices": [{"index": 0, "message": {"content": "x"}}]})

    answers = asyncio.run(_together(Engine(short).batcher(), ["a", "b"]))
    assert all(isinstance(a, MalformedResponse) for a in answers)
    assert "1 choices to a batch of 2" in str(answers[0])


def test_invalid_json_fails_every_call() -> None:
    async def garbage(texts: list[str]) -> bytes:
        return b"{not json"

    answers = asyncio.run(_together(Engine(garbage).batcher(), ["a", "b"]))
    assert all(isinstance(a, MalformedResponse) for a in answers)


def test_a_cancelled_sender_fails_its_waiting_siblings() -> None:
    """Cancelled while the engine answers: the siblings get GeneratorError, never hang."""
    started = asyncio.Event()

    async def hang(texts: list[str]) -> bytes:
        started.set()
        await asyncio.sleep(60)
        raise AssertionError("never answered")

    async def scenario() -> list[Any]:
        batcher = Engine(hang).batcher()
        requests = [_request(t) for t in ("a", "b", "c")]
        tasks = [asyncio.create_task(batcher.generate(r, _body(r))) for r in requests]
        await started.wait()
        tasks[0].cancel()  # the first to arrive sends the batch
        return await asyncio.gather(*tasks, return_exceptions=True)

    answers = asyncio.run(scenario())
    assert isinstance(answers[0], asyncio.CancelledError)
    assert all(isinstance(a, GeneratorError) for a in answers[1:])


def test_a_sender_cancelled_while_the_batch_forms_fails_the_joined() -> None:
    async def scenario() -> list[Any]:
        engine = Engine()
        batcher = engine.batcher()
        requests = [_request(t) for t in ("a", "b")]
        first, second = (asyncio.create_task(batcher.generate(r, _body(r))) for r in requests)
        await asyncio.sleep(0)  # the first waits its turn of the loop, the second has joined
        first.cancel()
        answers = await asyncio.gather(first, second, return_exceptions=True)
        assert engine.batches == []
        assert engine.alone == []
        return answers

    answers = asyncio.run(scenario())
    assert isinstance(answers[0], asyncio.CancelledError)
    assert isinstance(answers[1], GeneratorError)


def test_a_cancelled_member_leaves_the_others_their_answers() -> None:
    release = asyncio.Event()

    async def slow(texts: list[str]) -> bytes:
        await release.wait()
        choices = [{"index": i, "message": {"content": t}} for i, t in enumerate(texts)]
        return orjson.dumps({"choices": choices})

    async def scenario() -> list[Any]:
        batcher = Engine(slow).batcher()
        requests = [_request(t) for t in ("a", "b", "c")]
        tasks = [asyncio.create_task(batcher.generate(r, _body(r))) for r in requests]
        await asyncio.sleep(0.01)
        tasks[1].cancel()
        await asyncio.sleep(0)
        release.set()
        return await asyncio.gather(*tasks, return_exceptions=True)

    answers = asyncio.run(scenario())
    assert answers[0].choices[0].content == "a"
    assert answers[2].choices[0].content == "c"
    assert isinstance(answers[1], asyncio.CancelledError)


def test_what_may_join_a_batch() -> None:
    assert batchable(_request("a"))
    assert not batchable(GenerationRequest(role="act", messages=()))
    assert not batchable(GenerationRequest(role="rehearse", messages=(), n=2))
    assert not batchable(GenerationRequest(role="rehearse", messages=(), tools=({},)))
