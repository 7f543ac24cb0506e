"""A misbehaving OpenAI-compatible engine for the gateway's fault tests, run as a real server.

The engine twin behaves; this one hangs, fails, cuts streams, streams forever or echoes what it
received, as chosen by ``--chat``. It answers ``/health``, ``/v1/models`` and ``/metrics`` (with
``vllm:num_requests_running``, so a test can watch a cancelled request leave the engine), and
``/v1/responses`` with one text answer, refusing tools that carry ``annotations`` with a 400.

    python -m tests.server.engine_double --port P --chat MODE [--model M]

MODE is hang, echo, slow, cut, usage (vLLM's continuous usage stats), status:CODE,
delay:SECONDS (a normal answer after SECONDS: a whole one, or a stream spread over them), or
imagine:SECONDS (a whole engine for rehearsal: an acting call, one with ``tools``, gets ``n``
distinct calls of the first tool at once; a rehearsal-role call, one whose system message asks
for an ``<execution_result>``, is answered after SECONDS, or aborted when the gateway leaves;
an acting call whose tools carry ``annotations`` is refused with a 400, as a strict engine would;
any other call is answered at once; ``/metrics`` adds the rehearsal calls running now, the
most ever running at once and how many ever started).
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import AsyncIterator
from typing import Any

import orjson
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

MODEL = "double-model"


def completion(content: str, model: str) -> bytes:
    return orjson.dumps(
        {
            "id": "chatcmpl-double",
            "object": "chat.completion",
            "created": 0,
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": content},
                    "finish_reason": "stop",
                }
            ],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        }
    )


def chunk(content: str) -> bytes:
    body = {
        "id": "chatcmpl-double",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": MODEL,
        "choices": [{"index": 0, "delta": {"content": content}, "finish_reason": None}],
    }
    return b"data: " + orjson.dumps(body) + b"\n\n"


def usage_stream(model: str) -> list[bytes]:
    """vLLM with ``continuous_usage_stats``: cumulative usage on every chunk, then the total."""
    events = []
    for done in (1, 2, 3):
        body = orjson.loads(chunk(f"t{done} ")[6:])
        body["model"] = model
        body["usage"] = {"prompt_tokens": 10, "total_tokens": 10 + done, "completion_tokens": done}
        events.append(b"data: " + orjson.dumps(body) + b"\n\n")
    total = {"prompt_tokens": 10, "total_tokens": 13, "completion_tokens": 3}
    final = {"id": "chatcmpl-double", "object": "chat.completion.chunk", "created": 0,
             "model": model, "choices": [], "usage": total}  # fmt: skip
    return [*events, b"data: " + orjson.dumps(final) + b"\n\n", b"data: [DONE]\n\n"]


async def wait_for_disconnect(request: Request) -> None:
    message = await request.receive()  # the body was read: the next message is the disconnect
    while message["type"] != "http.disconnect":
        message = await request.receive()


def acting(body: dict[str, Any], model: str) -> bytes:
    """``n`` choices, choice ``i`` calling the first tool with ``{"key": i}``."""
    name = body["tools"][0]["function"]["name"]
    choices = [
        {
            "index": i,
            "message": {"role": "assistant", "content": None, "tool_calls": [
                {"id": f"call_{i}", "type": "function",
                 "function": {"name": name, "arguments": orjson.dumps({"key": i}).decode()}},
            ]},
            "finish_reason": "tool_calls",
        }
        for i in range(body.get("n") or 1)
    ]  # fmt: skip
    usage = {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}
    return orjson.dumps({"id": "chatcmpl-double", "object": "chat.completion", "created": 0,
                         "model": model, "choices": choices, "usage": usage})  # fmt: skip


def annotated(tools: list[dict[str, Any]]) -> bool:
    """Whether a tool carries MCP-style ``annotations`` (on the entry or in its function)."""
    return any("annotations" in tool or "annotations" in tool.get("function", {}) for tool in tools)


def is_rehearsal_call(body: dict[str, Any]) -> bool:
    first = (body.get("messages") or [{}])[0]
    return first.get("role") == "system" and "execution_result" in str(first.get("content"))


def build_app(mode: str, model: str = MODEL) -> Starlette:
    running = 0
    imagining = peak = started = 0

    async def imagine(request: Request, seconds: float) -> Response:
        nonlocal running, imagining, peak, started
        running += 1
        imagining += 1
        started += 1
        peak = max(peak, imagining)
        try:
            await asyncio.wait_for(wait_for_disconnect(request), seconds)
        except TimeoutError:
            text = '<execution_result>{"found": true}</execution_result>'
            return Response(completion(text, model), media_type="application/json")
        finally:
            running -= 1
            imagining -= 1
        return Response(b"", 499)

    async def chat(request: Request) -> Response:
        nonlocal running
        raw = await request.body()
        body = orjson.loads(raw)
        stream = bool(body.get("stream"))
        if mode.startswith("imagine:"):
            if body.get("tools"):
                if annotated(body["tools"]):  # an engine that refuses what it does not know
                    error = {
                        "message": "tools[].annotations: extra fields not permitted",
                        "type": "BadRequestError",
                        "param": "tools",
                        "code": 400,
                    }
                    return Response(orjson.dumps({"error": error}), 400)
                return Response(acting(body, model), media_type="application/json")
            if is_rehearsal_call(body):
                return await imagine(request, float(mode.split(":", 1)[1]))
            return Response(completion("plain", model), media_type="application/json")
        if mode.startswith("status:"):
            code = int(mode.split(":", 1)[1])
            error = {"message": f"double says {code}", "type": "BadRequestError", "code": code}
            return Response(orjson.dumps({"error": {**error, "param": "max_tokens"}}), code)
        if mode == "echo":
            return Response(completion(raw.decode(), model), media_type="application/json")
        if mode == "hang" and not stream:
            # Like vLLM, abort the request when the client (the gateway) goes away.
            running += 1
            try:
                await wait_for_disconnect(request)
            finally:
                running -= 1
            return Response(b"", 499)
        if mode.startswith("delay:"):
            seconds = float(mode.split(":", 1)[1])
            if stream:
                return StreamingResponse(_spread(seconds), media_type="text/event-stream")
            running += 1
            try:
                await asyncio.sleep(seconds)
            finally:
                running -= 1
            return Response(completion("late", model), media_type="application/json")
        if mode == "usage":
            return Response(b"".join(usage_stream(model)), media_type="text/event-stream")
        if mode == "cut":
            return StreamingResponse(_cut(), media_type="text/event-stream")
        return StreamingResponse(_slow(), media_type="text/event-stream")

    async def _slow() -> AsyncIterator[bytes]:
        nonlocal running
        running += 1
        try:
            if mode == "hang":
                await asyncio.sleep(3600)
            for i in range(10_000):
                yield chunk(f"t{i} ")
                await asyncio.sleep(0.02)
        finally:
            running -= 1

    async def _spread(seconds: float) -> AsyncIterator[bytes]:
        for i in range(10):
            yield chunk(f"t{i} ")
            await asyncio.sleep(seconds / 10)
        yield b"data: [DONE]\n\n"

    async def _cut() -> AsyncIterator[bytes]:
        yield chunk("first ")
        raise RuntimeError("the double cuts the stream here")

    async def metrics(request: Request) -> Response:
        text = f'vllm:num_requests_running{{model_name="{MODEL}"}} {running}\n'
        text += f'vllm:num_requests_waiting{{model_name="{MODEL}"}} 0\n'
        text += f"double_rehearsal_running {imagining}\ndouble_rehearsal_peak {peak}\n"
        text += f"double_rehearsal_started {started}\n"
        return Response(text, media_type="text/plain")

    async def responses(request: Request) -> Response:
        """``/v1/responses``: refuses annotated tools as chat does; else one text answer that
        carries the tools it received."""
        body = orjson.loads(await request.body())
        tools = body.get("tools") or []
        if annotated(tools):
            error = {"message": "tools[].annotations: extra fields not permitted",
                     "type": "BadRequestError", "param": "tools", "code": 400}  # fmt: skip
            return Response(orjson.dumps({"error": error}), 400)
        text = {"type": "output_text", "text": "plain", "annotations": []}
        item = {"type": "message", "id": "msg_double", "role": "assistant",
                "status": "completed", "content": [text]}  # fmt: skip
        answer = {"id": "resp_double", "object": "response", "created_at": 0, "model": model,
                  "status": "completed", "output": [item], "tools": tools}  # fmt: skip
        return Response(orjson.dumps(answer), media_type="application/json")

    async def models(request: Request) -> Response:
        return Response(orjson.dumps({"object": "list", "data": [{"id": model}]}))

    async def health(request: Request) -> Response:
        return Response(b"")

    return Starlette(
        routes=[
            Route("/v1/chat/completions", chat, methods=["POST"]),
            Route("/v1/responses", responses, methods=["POST"]),
            Route("/v1/models", models),
            Route("/metrics", metrics),
            Route("/health", health),
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--chat", required=True)
    parser.add_argument("--model", default=MODEL)
    args = parser.parse_args()
    uvicorn.run(
        build_app(args.chat, args.model), host="127.0.0.1", port=args.port, log_level="warning"
    )


if __name__ == "__main__":
    main()
