"""The twin's HTTP face: vLLM's OpenAI routes over one TwinEngine, as a Starlette app.

Chat completions (and vLLM's batch of them, ``twin/batch.py``) are the twin's own; the rest of
the surface a gateway relays (``/version``, ``/tokenize``, ``/detokenize``, ``/v1/completions``,
``/v1/responses``) is in ``twin/surface.py``, and the Anthropic-style ``/v1/messages`` and
``/v1/messages/count_tokens`` in ``twin/anthropic.py``.
"""

from __future__ import annotations

import json
import math
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from . import anthropic, batch, surface
from .config import MAX_MODEL_LEN, TwinSettings
from .engine import Generation, TwinEngine
from .prompt import render_prompt
from .protocol import ChatRequest, TwinError, parse_request
from .responses import DONE, ChoiceStream, ChunkWriter, completion_body
from .schema import JsonObject
from .tokens import tokenize as tokenize_text


def _error(exc: TwinError) -> JSONResponse:
    return JSONResponse(exc.envelope(), status_code=exc.status)


async def _stream(
    engine: TwinEngine, request: ChatRequest, generation: Generation, completion_id: str, model: str
) -> AsyncIterator[bytes]:
    writer = ChunkWriter(completion_id, model, engine.fingerprint, generation.logprobs_top)
    logprobs = generation.logprobs_top is not None
    streams = [ChoiceStream.of(choice, logprobs=logprobs) for choice in generation.choices]
    usage = request.stream_options is not None and bool(request.stream_options.include_usage)
    async for tokens in engine.run(generation):
        budget = max(tokens, 1)
        for stream in streams:
            for piece in stream.take(budget if tokens else 0):
                if event := writer.piece(stream.choice, piece, usage=usage):
                    yield event
    for stream in streams:  # whatever the decode clock left (the end-of-turn token's share)
        for piece in stream.take(1 << 30):
            if event := writer.piece(stream.choice, piece, usage=usage):
                yield event
    if usage:
        yield writer.usage(generation)
    yield DONE


def _not_stored(response_id: str) -> JSONResponse:
    """vLLM's 404 for a response it does not hold (it stores none unless its store is on)."""
    message = f"Response with id '{response_id}' not found."
    return _error(TwinError(message, param="response_id", status=404, kind="invalid_request_error"))


def _request_id(http: Request) -> str:
    """vLLM names a request by the client's ``X-Request-Id``, else a random id of this length."""
    return http.headers.get("x-request-id") or uuid.uuid4().hex[:16]


def _finite(value: Any) -> Any:
    """``value`` with every non-finite float as ``None``, as pydantic serialises them in vLLM.

    Python's ``json`` reads ``NaN`` and ``Infinity`` (vLLM does too: a ``NaN`` temperature gets
    its range error, not a parse error), and a Responses object echoes the request's tools; a
    schema holding ``Infinity`` made that echo unwritable (a 500 the fuzz test found).
    """
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_finite(item) for item in value]
    return value


async def _json_body(http: Request) -> Any:
    try:
        return json.loads(await http.body())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise TwinError(f"Invalid JSON body: {exc}") from exc


def create_app(settings: TwinSettings) -> Starlette:
    """An app with its own engine, cache and metrics registry (no module state)."""
    engine = TwinEngine(settings)

    async def chat(http: Request) -> Response:
        try:
            body = json.loads(await http.body())
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            return _error(TwinError(f"Invalid JSON body: {exc}"))
        try:
            request = parse_request(body, MAX_MODEL_LEN)
            engine.check_model(request.model)
            generation = engine.prepare(request, body)
        except TwinError as exc:
            return _error(exc)
        completion_id = "chatcmpl-" + _request_id(http)
        model = request.model or settings.model_names[0]
        if request.stream:
            return StreamingResponse(
                _stream(engine, request, generation, completion_id, model),
                media_type="text/event-stream",
            )
        async for _ in engine.run(generation):
            pass
        return JSONResponse(completion_body(completion_id, model, generation, engine.fingerprint))

    async def chat_batch(http: Request) -> Response:
        try:
            model, generations = batch.prepare_batch(engine, await _json_body(http))
        except TwinError as exc:
            return _error(exc)
        await batch.run_batch(engine, generations)
        completion_id = "chatcmpl-" + _request_id(http)
        name = model or settings.model_names[0]
        return JSONResponse(batch.batch_body(completion_id, name, generations, engine.fingerprint))

    async def models(_: Request) -> Response:
        now = int(time.time())
        cards: list[JsonObject] = [
            {
                "id": name,
                "object": "model",
                "created": now,
                "owned_by": "vllm",
                "root": name,
                "parent": None,
                "max_model_len": MAX_MODEL_LEN,
                "permission": [],
            }
            for name in settings.model_names
        ]
        return JSONResponse({"object": "list", "data": cards})

    vocab = surface.Vocabulary()

    async def version(_: Request) -> Response:
        return JSONResponse(surface.version())

    async def tokenize(http: Request) -> Response:
        try:
            body = await _json_body(http)
            rendered = None
            if isinstance(body, dict) and isinstance(body.get("messages"), list):
                request = parse_request({**body, "max_tokens": 1}, MAX_MODEL_LEN)
                messages = [m.model_dump(exclude_none=True) for m in request.messages]
                tools = [t.model_dump(exclude_none=True) for t in request.tools or []]
                rendered = render_prompt(messages, tools or None)
            return JSONResponse(surface.tokenize_body(vocab, body, rendered))
        except TwinError as exc:
            return _error(exc)

    async def detokenize(http: Request) -> Response:
        try:
            return JSONResponse(surface.detokenize_body(vocab, await _json_body(http)))
        except TwinError as exc:
            return _error(exc)

    async def completions(http: Request) -> Response:
        try:
            body = await _json_body(http)
            request, generation = surface.prepare_chat(engine, surface.completion_as_chat(body))
        except TwinError as exc:
            return _error(exc)
        completion_id = "cmpl-" + _request_id(http)
        model = request.model or settings.model_names[0]
        if request.stream:
            stream = surface.completion_stream(engine, request, generation, completion_id, model)
            return StreamingResponse(stream, media_type="text/event-stream")
        async for _ in engine.run(generation):
            pass
        return JSONResponse(
            surface.completion_body(completion_id, model, generation, engine.fingerprint)
        )

    async def responses(http: Request) -> Response:
        try:
            body = await _json_body(http)
            previous = body.get("previous_response_id") if isinstance(body, dict) else None
            if isinstance(previous, str):  # the twin stores none, as vLLM without its store
                return _not_stored(previous)
            request, generation = surface.prepare_chat(engine, surface.responses_as_chat(body))
        except TwinError as exc:
            return _error(exc)
        model = request.model or settings.model_names[0]
        if request.stream:
            stream = surface.response_stream(engine, body, generation, model)
            return StreamingResponse(stream, media_type="text/event-stream")
        async for _ in engine.run(generation):
            pass
        created = int(time.time())
        response_id = "resp_" + uuid.uuid4().hex[:16]
        answer = surface.response_object(body, model, response_id, created, generation)
        return JSONResponse(_finite(answer))

    async def messages(http: Request) -> Response:
        try:
            body = await _json_body(http)
            request, generation = surface.prepare_chat(engine, anthropic.messages_as_chat(body))
        except TwinError as exc:
            return _error(exc)
        message_id = "chatcmpl-" + _request_id(http)
        model = request.model or settings.model_names[0]
        if request.stream:
            stream = anthropic.message_stream(engine, request, generation, message_id, model)
            return StreamingResponse(stream, media_type="text/event-stream")
        async for _ in engine.run(generation):
            pass
        return JSONResponse(anthropic.message_body(message_id, model, generation))

    async def count_tokens(http: Request) -> Response:
        try:
            body = await _json_body(http)
            chat = anthropic.messages_as_chat(body, counting=True)
            request = parse_request(chat, MAX_MODEL_LEN)
            engine.check_model(request.model)
        except TwinError as exc:
            return _error(exc)
        messages = [m.model_dump(exclude_none=True) for m in request.messages]
        tools = [t.model_dump(exclude_none=True) for t in request.tools or []]
        count = len(tokenize_text(render_prompt(messages, tools)))
        return JSONResponse(anthropic.count_tokens_body(count))

    async def stored_response(http: Request) -> Response:
        return _not_stored(http.path_params["response_id"])

    async def health(_: Request) -> Response:
        return Response(status_code=200)

    async def metrics(_: Request) -> Response:
        return Response(engine.metrics.render(), media_type="text/plain; version=0.0.4")

    app = Starlette(
        routes=[
            Route("/v1/chat/completions", chat, methods=["POST"]),
            Route("/v1/chat/completions/batch", chat_batch, methods=["POST"]),
            Route("/v1/models", models, methods=["GET"]),
            Route("/v1/completions", completions, methods=["POST"]),
            Route("/v1/responses", responses, methods=["POST"]),
            Route("/v1/responses/{response_id}", stored_response, methods=["GET"]),
            Route("/v1/messages", messages, methods=["POST"]),
            Route("/v1/messages/count_tokens", count_tokens, methods=["POST"]),
            Route("/tokenize", tokenize, methods=["POST"]),
            Route("/detokenize", detokenize, methods=["POST"]),
            Route("/version", version, methods=["GET"]),
            Route("/health", health, methods=["GET"]),
            Route("/metrics", metrics, methods=["GET"]),
        ]
    )
    app.state.engine = engine
    return app
