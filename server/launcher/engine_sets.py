"""What ``rehearsal-gateway up`` starts: the main engine set and the rehearsal set, as plans.

``up`` can start two sets of engines from one model: the main set (``--engines`` /
``--gpus``), which serves every role, and the rehearsal set (``--rehearsal-engines`` /
``--rehearsal-gpus``), which the gateway sends only rehearsal-role calls (``--rehearsal-engine``,
``docs/deploy.md#a-rehearsal-set``). Every engine of both sets runs the same ``vllm serve``
command line (the EnvACE flags, the gateway's batch, its scheduling policy, the user's flags), so
the two sets serve the same model under the same name. One GPU per engine, none shared between
the sets: with GPUs given for one set they must be given for the other, or vLLM would load the
rehearsal engines onto the main engines' devices.

This module only plans (flags to GPUs, ports, command lines, the gateway's engine entries);
``server/launcher/up.py`` starts the plans and the gateway.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # processes imports httpx: the CLI imports this module to build its parser
    from .processes import EnginePlan

ENVACE_FLAGS = (
    "--enable-auto-tool-choice",
    "--tool-call-parser",
    "hermes",
    "--reasoning-parser",
    "qwen3",
    "--enable-prefix-caching",
)
# Set by `up` itself: a second copy among the pass-through flags would break the wiring.
RESERVED_FLAGS = ("--host", "--port", "--served-model-name")
MAX_NUM_SEQS = "--max-num-seqs"
MAIN_PREFIX = "engine"
REHEARSAL_PREFIX = "rehearsal"


class UsageError(Exception):
    """A flag, a missing vLLM or a gateway setting that makes starting pointless."""


@dataclass(frozen=True)
class EngineSet:
    """The engines ``up`` starts for one set: a GPU (or None) and a loopback port each.

    ``prefix`` names them (``engine0``, ``rehearsal0``, …) in the gateway's metrics, in the
    logs and in the log files' names.
    """

    prefix: str
    gpus: tuple[str | None, ...]
    ports: tuple[int, ...]

    @property
    def names(self) -> list[str]:
        return [f"{self.prefix}{index}" for index in range(len(self.gpus))]

    def specs(self, model: str, slots: int | None) -> list[str]:
        """The gateway's entries for these engines (``--engine`` or ``--rehearsal-engine``)."""
        from .processes import engine_url

        cap = "" if slots is None else f",max_concurrency={slots}"
        return [
            f"{engine_url(port)},name={name},model={model}{cap}"
            for name, port in zip(self.names, self.ports, strict=True)
        ]

    def plans(self, argv_for: dict[int, tuple[str, ...]], log_dir: Path) -> list[EnginePlan]:
        """One `EnginePlan` per engine; ``argv_for`` maps each port to its command line."""
        from .processes import EnginePlan

        return [
            EnginePlan(name, port, gpu, argv_for[port], log_dir / f"{name}.log")
            for name, port, gpu in zip(self.names, self.ports, self.gpus, strict=True)
        ]


def _gpu_ids(gpus: str, flag: str) -> list[str]:
    ids = [item.strip() for item in gpus.split(",")]
    if not all(ids) or len(set(ids)) != len(ids):
        raise UsageError(f"{flag} takes distinct ids separated by commas, got {gpus!r}")
    return ids


def engine_gpus(engines: int | None, gpus: str | None) -> list[str | None]:
    """The main set: one entry per engine, the GPU it gets, or None without ``--gpus``."""
    ids = None if gpus is None else _gpu_ids(gpus, "--gpus")
    count = (1 if ids is None else len(ids)) if engines is None else engines
    if count < 1:
        raise UsageError(f"--engines must be at least 1, got {count}")
    if ids is None:
        return [None] * count
    if count > len(ids):
        raise UsageError(f"{count} engines need {count} GPUs, --gpus lists {len(ids)}")
    return list(ids[:count])


def rehearsal_gpus(
    engines: int | None, gpus: str | None, main: list[str | None]
) -> list[str | None]:
    """The rehearsal set: one entry per engine (none by default), on GPUs the main set lacks."""
    ids = None if gpus is None else _gpu_ids(gpus, "--rehearsal-gpus")
    count = (0 if ids is None else len(ids)) if engines is None else engines
    if count < 0:
        raise UsageError(f"--rehearsal-engines must be at least 0, got {count}")
    if count == 0:
        return []
    main_has_gpus = main[0] is not None
    if ids is None:
        if main_has_gpus:
            raise UsageError(
                "--rehearsal-engines with --gpus needs --rehearsal-gpus: one GPU per engine, "
                "none shared with the main set"
            )
        return [None] * count
    if not main_has_gpus:
        raise UsageError(
            "--rehearsal-gpus needs --gpus: without it the main engines would load onto "
            "every GPU, the rehearsal engines' too"
        )
    if count > len(ids):
        raise UsageError(
            f"{count} rehearsal engines need {count} GPUs, --rehearsal-gpus lists {len(ids)}"
        )
    shared = sorted(set(ids[:count]) & set(main))
    if shared:
        raise UsageError(
            f"GPU {','.join(shared)} is given to both sets (--gpus and --rehearsal-gpus): "
            "one engine per GPU"
        )
    return list(ids[:count])


def extra_vllm_args(args: argparse.Namespace) -> list[str]:
    """The user's flags for every engine (``--vllm-arg`` and after ``--``), none of ``up``'s."""
    extra = [*args.vllm_arg, *args.vllm_args]
    for arg in extra:
        for flag in RESERVED_FLAGS:
            if arg == flag or arg.startswith(flag + "="):
                hint = " (use up's own --served-model-name)" if flag == RESERVED_FLAGS[2] else ""
                raise UsageError(f"{flag} is set by up for each engine{hint}")
    return extra


def batch_slots(extra: list[str], default: int, workers: int = 1) -> tuple[int, tuple[str, ...]]:
    """Each gateway worker's slots per engine, and the vLLM flags (none when the user set them).

    The workers' slots per engine (``max_concurrency`` each) must add up to vLLM's
    ``--max-num-seqs`` for ``RGW_REHEARSAL_ENGINE_SHARE`` to be a share of the engine's batch: a
    ``--max-num-seqs`` among the vLLM arguments is split between the workers, else vLLM is given
    the workers' ``RGW_ENGINE_MAX_CONCURRENCY`` (``default``) each. The gateway never has more
    calls than that in flight on one engine, so a larger vLLM batch would stay unused.
    """
    for index, arg in enumerate(extra):
        value = None
        if arg == MAX_NUM_SEQS:
            value = extra[index + 1] if index + 1 < len(extra) else ""
        elif arg.startswith(MAX_NUM_SEQS + "="):
            value = arg.split("=", 1)[1]
        if value is not None:
            if not value.isdigit() or int(value) < 1:
                raise UsageError(f"{MAX_NUM_SEQS} must be a positive integer, got {value!r}")
            return max(1, int(value) // workers), ()
    return default, (MAX_NUM_SEQS, str(default * workers))


def vllm_argv(
    args: argparse.Namespace,
    vllm: str,
    port: int,
    extra: list[str],
    scheduling: str,
    batch: tuple[str, ...],
) -> tuple[str, ...]:
    """One engine's ``vllm serve`` command line (the same for both sets but for the port)."""
    from .processes import ENGINE_HOST

    # The gateway's RGW_ENGINE_SCHEDULING says how the engines schedule: they must agree.
    policy = ("--scheduling-policy", "priority") if scheduling == "priority" else ()
    return (vllm, "serve", args.model, "--host", ENGINE_HOST, "--port", str(port),
            "--served-model-name", args.served_model_name, *batch, *ENVACE_FLAGS, *policy,
            *extra)  # fmt: skip
