"""Shared pieces of the rehearsal suites: a twin + gateway + Redis stack and world helpers."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import openai
import redis

from rehearsal_gateway.twin.worlds import Task, World, load_world
from tests.server.conftest import FAST_HEALTH, TWIN_MODEL
from tests.support import inprocess
from tests.support.inprocess import InProcessGateway
from tests.support.procs import Proc, cli_argv, free_port, start_http_server

REDIS_URL = "redis://127.0.0.1:6379/0"


@dataclass
class Stack:
    """A running twin, one or more gateways in front of it, and their Redis key prefix."""

    twin: Proc
    gateways: list[Proc | InProcessGateway]
    prefix: str
    world: World
    # Every SDK client handed out, closed with the stack: an unclosed client's pooled socket
    # warns when collected, failing whichever later test the collection happens in.
    clients: list[openai.OpenAI] = field(default_factory=list)

    def close_clients(self) -> None:
        for client in self.clients:
            client.close()
        self.clients.clear()

    @property
    def gateway(self) -> Proc | InProcessGateway:
        return self.gateways[0]

    def sdk(self, index: int = 0, api_key: str = "unused") -> openai.OpenAI:
        url = self.gateways[index].url + "/v1"
        client = openai.OpenAI(base_url=url, api_key=api_key, max_retries=0, timeout=60)
        self.clients.append(client)
        return client

    def twin_requests(self) -> float:
        """How many chat requests the twin has finished (vLLM's e2e latency histogram count)."""
        text = httpx.get(self.twin.url + "/metrics", timeout=5).text
        total = 0.0
        for line in text.splitlines():
            if line.startswith("vllm:e2e_request_latency_seconds_count"):
                total += float(line.rsplit(" ", 1)[1])
        return total

    def redis_keys(self) -> list[str]:
        client = redis.Redis.from_url(REDIS_URL)
        try:
            return [k.decode() for k in client.scan_iter(match=self.prefix + "*")]
        finally:
            client.close()


def drop_prefix(prefix: str, url: str = REDIS_URL) -> None:
    client = redis.Redis.from_url(url)
    try:
        for key in client.scan_iter(match=prefix + "*"):
            client.delete(key)
    finally:
        client.close()


@contextmanager
def running_stack(
    logs: Path,
    *,
    twin_args: tuple[str, ...] = (),
    gateways: int = 1,
    env: dict[str, str] | None = None,
    world: str = "retail",
    process: bool = False,
) -> Iterator[Stack]:
    """Start a twin and ``gateways`` gateways sharing one Redis prefix; stop and clean after.

    The gateways run in this process unless ``process`` asks for ``serve`` processes.
    """
    prefix = f"rgwtest-{uuid.uuid4().hex[:8]}:"
    procs: list[Proc | InProcessGateway] = []
    try:
        port = free_port()
        twin = start_http_server(
            cli_argv("twin", "--port", str(port), "--world", world, *twin_args),
            port=port,
            log_path=logs / f"twin-{port}.log",
        )
        procs.append(twin)
        fronts: list[Proc | InProcessGateway] = []
        for index in range(gateways):
            settings = {
                **FAST_HEALTH,
                "RGW_REDIS_URL": REDIS_URL,
                "RGW_REDIS_PREFIX": prefix,
                **(env or {}),
            }
            if not process:
                front = inprocess.start_gateway(
                    ["--engine", twin.url + "/v1"],
                    log_path=logs / f"gateway-{index}.log",
                    env=settings,
                )
                procs.append(front)
                fronts.append(front)
                continue
            port = free_port()
            gateway = start_http_server(
                cli_argv("serve", "--port", str(port), "--engine", twin.url + "/v1"),
                port=port,
                log_path=logs / f"gateway-{port}.log",
                env=settings,
            )
            procs.append(gateway)
            fronts.append(gateway)
        stack = Stack(twin, fronts, prefix, load_world(world))
        try:
            yield stack
        finally:
            stack.close_clients()
    finally:
        for proc in reversed(procs):
            proc.stop()
        drop_prefix(prefix)


def opening(world: World, task: Task) -> list[dict[str, Any]]:
    """The first two messages of a task's conversation."""
    return [
        {"role": "system", "content": world.system_prompt},
        {"role": "user", "content": task.instruction},
    ]


def chat(client: openai.OpenAI, world: World, messages: list[dict[str, Any]], **knobs: Any) -> Any:
    """One chat call with the world's tools and the given rehearsal knobs (SDK ``extra_body``)."""
    seed = knobs.pop("seed", 0)
    headers = knobs.pop("headers", None)
    return client.chat.completions.create(
        model=TWIN_MODEL,
        messages=messages,
        tools=world.tool_schemas(),
        seed=seed,
        extra_body={"rehearsal": knobs} if knobs else None,
        extra_headers=headers,
    )


def run_committed(world: World, state: Any, completion: Any) -> list[tuple[str, Any]]:
    """Execute each committed tool call on the world: (id, real result) pairs."""
    results = []
    for call in completion.choices[0].message.tool_calls or []:
        try:
            arguments = json.loads(call.function.arguments)
        except ValueError:
            arguments = None
        results.append((call.id, world.call(state, call.function.name, arguments)))
    return results


def assistant_turn(completion: Any) -> dict[str, Any]:
    message = completion.choices[0].message
    turn: dict[str, Any] = {"role": "assistant", "content": message.content or ""}
    if message.tool_calls:
        turn["tool_calls"] = [
            {
                "id": c.id,
                "type": "function",
                "function": {"name": c.function.name, "arguments": c.function.arguments},
            }
            for c in message.tool_calls
        ]
    return turn


def rehearsal_of(completion: Any) -> dict[str, Any]:
    extra = completion.model_extra or {}
    summary = extra.get("rehearsal")
    assert isinstance(summary, dict), f"no rehearsal object in {extra}"
    return summary


def trust_route(stack: Stack, key: str) -> dict[str, Any]:
    """``GET /v1/rehearsals/trust`` as tenant ``key`` sees it: trust rows, the learned budget."""
    response = httpx.get(
        stack.gateway.url + "/v1/rehearsals/trust",
        headers={"Authorization": f"Bearer {key}"},
        timeout=10,
    )
    assert response.status_code == 200
    result: dict[str, Any] = response.json()
    return result
