"""The latency model: profiles, and batching measured as a ratio over real HTTP."""

from __future__ import annotations

import asyncio
import json
import time

import httpx

from rehearsal_gateway.twin.latency import H100, load_profile
from tests.twin.conftest import world_request


def test_profiles_load_and_scale(tmp_path) -> None:
    """zero, h100, a JSON file, and a scale factor all produce profiles."""
    assert load_profile("zero").is_zero
    assert load_profile("h100", 0.5).decode_step_s == H100.decode_step_s * 0.5
    path = tmp_path / "slow.json"
    path.write_text(json.dumps({"decode_step_s": 0.02, "max_batch": 8}))
    profile = load_profile(str(path))
    assert (profile.name, profile.decode_step_s, profile.max_batch) == ("slow", 0.02, 8)


async def test_concurrent_requests_overlap_in_decode(start_twin) -> None:
    """4 concurrent requests take < 2x one request: decode steps are shared by the batch."""
    twin = start_twin("--latency", "h100", "--latency-scale", "0.5")
    body = world_request("retail", 2, max_tokens=120)
    async with httpx.AsyncClient(base_url=twin.url, timeout=30) as client:
        await client.post("/v1/chat/completions", json=body)  # warm the prefix cache
        started = time.perf_counter()
        await client.post("/v1/chat/completions", json=body)
        single = time.perf_counter() - started
        started = time.perf_counter()
        await asyncio.gather(*(client.post("/v1/chat/completions", json=body) for _ in range(4)))
        batch = time.perf_counter() - started
    print(f"one request {single:.3f}s, four concurrent {batch:.3f}s, ratio {batch / single:.2f}")
    assert single > 0.1
    assert batch < 2 * single


async def test_streaming_ttft_reflects_prefill(start_twin) -> None:
    """Time to first token grows with uncached prompt; a cached repeat starts sooner."""
    twin = start_twin("--latency", "h100", "--latency-scale", "2")
    body = {**world_request("bank", 5, max_tokens=8), "stream": True}

    async def ttft(client: httpx.AsyncClient) -> float:
        started = time.perf_counter()
        async with client.stream("POST", "/v1/chat/completions", json=body) as response:
            async for line in response.aiter_lines():
                if '"role"' in line:
                    return time.perf_counter() - started
        raise AssertionError("no first chunk")

    async with httpx.AsyncClient(base_url=twin.url, timeout=30) as client:
        cold = await ttft(client)
        warm = await ttft(client)
    assert warm < cold
