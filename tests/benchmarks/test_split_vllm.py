"""Where the split benchmark puts its gateways and clients: never on the main engine's core."""

from __future__ import annotations

import os

import pytest

from benchmarks.split_vllm import gateway_cpus, pinned


def test_gateways_take_the_cpus_the_engines_leave_else_the_second_engines() -> None:
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        pytest.skip("the benchmark needs two CPUs, one per engine")
    main, second = str(cpus[0]), str(cpus[1])
    expected = ",".join(str(cpu) for cpu in cpus[2:]) or second
    assert gateway_cpus([main, second]) == expected
    assert gateway_cpus([str(cpu) for cpu in cpus]) == str(cpus[-1])  # none left: the last one
    assert pinned(["vllm", "serve"], "1,2") == ["taskset", "-c", "1,2", "vllm", "serve"]
