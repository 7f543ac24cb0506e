"""The twin's HTTP face: vLLM's OpenAI routes over one TwinEngine, as a Starlette app."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from twin.config import MAX_MODEL_LEN, TwinSettings
from twin.engine import Generation, TwinEngine
from twin.protocol import ChatRequest, TwinError, parse_request
from twin.responses import DONE, ChoiceStream, ChunkWriter, completion_body
from twin.schema import JsonObject


def _error(exc: TwinError) -> JSONResponse:
    return JSONResponse(exc.envelope(), status_code=exc.status)


async def _stream(
    engine: TwinEngine, request: ChatRequest, generation: Generation, completion_id: str, model: str
) -> AsyncIterator[bytes]:
    writer = ChunkWriter(completion_id, model, engine.fingerprint)
    streams = [ChoiceStream.of(choice) for choice in generation.choices]
    async for tokens in engine.run(generation):
        budget = max(tokens, 1)
        for stream in streams:
            for delta in stream.take(budget if tokens else 0):
                yield writer.delta(stream.choice.index, delta)
    for stream in streams:  # whatever the decode clock left (the end-of-turn token's share)
        for delta in stream.take(1 << 30):
            yield writer.delta(stream.choice.index, delta)
    for event in writer.finals(streams):
        yield event
    if request.stream_options is not None and request.stream_options.include_usage:
        yield writer.usage(generation)
    yield DONE


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
        completion_id = f"chatcmpl-{uuid.uuid4().hex[:16]}"  # vLLM's length
        model = request.model or settings.model_names[0]
        if request.stream:
            return StreamingResponse(
                _stream(engine, request, generation, completion_id, model),
                media_type="text/event-stream",
            )
        async for _ in engine.run(generation):
            pass
        return JSONResponse(completion_body(completion_id, model, generation, engine.fingerprint))

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

    async def health(_: Request) -> Response:
        return Response(status_code=200)

    async def metrics(_: Request) -> Response:
        return Response(engine.metrics.render(), media_type="text/plain; version=0.0.4")

    app = Starlette(
        routes=[
            Route("/v1/chat/completions", chat, methods=["POST"]),
            Route("/v1/models", models, methods=["GET"]),
            Route("/health", health, methods=["GET"]),
            Route("/metrics", metrics, methods=["GET"]),
        ]
    )
    app.state.engine = engine
    return app
