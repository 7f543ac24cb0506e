"""The running loop, the current task and random ids, without a system call each time.

Why. On Python 3.11, ``asyncio.get_running_loop()`` calls ``getpid()`` on every call, to tell a
forked child from its parent (3.12 dropped the check). Everything built on it pays the same:
``asyncio.current_task()``, ``asyncio.timeout``, a future made without a loop. ``secrets.token_hex``
reads ``getrandom()`` on every id. ``strace -c -f`` on the gateway, 1,000 small-body
pass-throughs at 1 client (2026-12-03), counted 14.7 system calls per request. Of those, 7.06
were ``getpid`` and 1.0 ``getrandom``. The bare floor (``benchmarks/floor_bare.py``) needs 8.8
in all, and vllm-router 14.0. On this project's virtual machines a system call costs far more
than the opcodes around it. The standard library has no cheaper way to ask either question, so
this module keeps the answers.

- ``running_loop()``: the loop this thread runs, remembered per thread. It is asked again when
  the remembered loop is no longer running, and a forked child forgets it
  (``os.register_at_fork``), which is what the ``getpid`` check was for. The one case it cannot
  see: a thread that ran a loop, then starts another while a second thread runs the first. No
  part of the gateway moves a loop between threads (``asyncio.run``, uvicorn and the tests' server
  threads each run their own).
- ``this_task()``: ``asyncio.current_task()`` on that loop.
- ``random_hex(n)``: ``secrets.token_hex(n)`` from 4 KiB of ``os.urandom`` at a time, per thread.
  That is one ``getrandom`` per ~340 request ids, from the same kernel generator. A forked child
  drops what its parent had drawn, so the two never hand out the same id. These are ids, not
  secrets: API keys are never made here.
"""

from __future__ import annotations

import asyncio
import os
import threading
from typing import Any

POOL_BYTES = 4096


class _PerThread(threading.local):
    def __init__(self) -> None:
        self.loop: asyncio.AbstractEventLoop | None = None
        self.pool = b""
        self.at = 0


_here = _PerThread()


def running_loop() -> asyncio.AbstractEventLoop:
    """``asyncio.get_running_loop()``; raises ``RuntimeError`` as it does outside a loop."""
    loop = _here.loop
    if loop is None or not loop.is_running():
        loop = _here.loop = asyncio.get_running_loop()
    return loop


def this_task() -> asyncio.Task[Any]:
    """The task running now; ``RuntimeError`` when none is (a callback, not a task)."""
    task = asyncio.current_task(running_loop())
    if task is None:
        raise RuntimeError("this runs inside a task")
    return task


def random_hex(nbytes: int) -> str:
    """``2 * nbytes`` random hex digits, as ``secrets.token_hex(nbytes)`` gives them."""
    here = _here
    at = here.at
    end = at + nbytes
    pool = here.pool
    if end > len(pool):
        pool = here.pool = os.urandom(max(POOL_BYTES, nbytes))
        at, end = 0, nbytes
    here.at = end
    return pool[at:end].hex()


def _forget() -> None:
    """In a forked child: the parent's loop is not running here, its random bytes are spent."""
    _here.__init__()  # type: ignore[misc]


os.register_at_fork(after_in_child=_forget)
