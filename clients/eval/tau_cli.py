"""The ``tau2`` and ``paper`` suites' arguments, and the checks made before they run.

``--domain`` picks the τ² domain, ``--solo`` telecom's solo mode, ``--trials k`` runs every task
k times (seeds 0…k−1) for pass^k, and ``--user-url``/``--user-model`` name the simulated user's
OpenAI-compatible endpoint (default: the agent's own gateway and model, rehearsal off). A wrong
domain and a user endpoint that does not answer are ``UsageError`` s (exit 2, one line), found
before anything starts.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from . import UsageError


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The τ² and paper suites' options (ignored by the other suites)."""
    p.add_argument("--domain", default="retail", help="tau2 suite: airline, retail or telecom")
    p.add_argument("--solo", action="store_true", help="tau2 telecom: the agent alone, a ticket")
    p.add_argument(
        "--trials", type=int, metavar="K",
        help="run each task K times (seeds 0..K-1): pass^1..pass^K (default: once)",
    )  # fmt: skip
    p.add_argument("--user-url", metavar="URL", help="the simulated user's OpenAI-compatible "
                   "endpoint (default: the agent's gateway, rehearsal off)")  # fmt: skip
    p.add_argument(
        "--user-model", help="the simulated user's model (default: the endpoint's first)"
    )
    p.add_argument("--user-api-key", help="the user endpoint's API key (default: none)")


def trial_seeds(args: argparse.Namespace, seeds: list[int]) -> list[int]:
    """``--trials K`` as seeds 0…K−1; refused beside a ``--seeds`` of its own."""
    if args.trials is None:
        return seeds
    if args.trials < 1:
        raise UsageError("--trials must be at least 1")
    if args.seeds != "0":
        raise UsageError("--trials K runs seeds 0..K-1: give --trials or --seeds, not both")
    return list(range(args.trials))


def user_endpoint(args: argparse.Namespace) -> Any:
    """The simulated user's endpoint, checked now when it is a URL of its own."""
    from .conversation import UserEndpoint

    if args.user_url is None:
        if args.user_api_key is not None:
            raise UsageError("--user-api-key needs --user-url")
        return UserEndpoint(model=args.user_model)
    base = args.user_url.rstrip("/").removesuffix("/v1")
    models = served_models(base, args.user_api_key, "the user simulator")
    model = args.user_model or (models[0] if models else None)
    if model is None:
        raise UsageError(f"{base}/v1/models lists no model: pass --user-model")
    if args.user_model and models and args.user_model not in models:
        raise UsageError(
            f"--user-model {args.user_model!r} is not served at {base} ({', '.join(models)})"
        )
    return UserEndpoint(url=base + "/v1", model=model, api_key=args.user_api_key)


def served_models(base: str, api_key: str | None, what: str) -> list[str]:
    """An OpenAI-compatible server's model ids; ``UsageError`` when it does not answer."""
    import httpx

    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        response = httpx.get(f"{base}/v1/models", headers=headers, timeout=5.0)
    except httpx.HTTPError as exc:
        raise UsageError(
            f"cannot reach {what} at {base} ({type(exc).__name__}): start it, or leave out "
            "--user-url to let the agent's gateway and model play the user"
        ) from None
    if response.status_code != 200:
        raise UsageError(f"{what} at {base}: /v1/models answered HTTP {response.status_code}")
    return [str(m.get("id")) for m in response.json().get("data", [])]


def build_suite(args: argparse.Namespace, workdir: Path) -> Any:
    """The ``tau2`` or ``paper`` suite the arguments ask for."""
    from .bfcl import SuiteUnavailable
    from .tau import DOMAINS

    if args.suite == "tau2" and args.domain not in DOMAINS:
        raise UsageError(f"--domain {args.domain!r}: choose from {', '.join(DOMAINS)}")
    user = user_endpoint(args)
    try:
        if args.suite == "paper":
            from .paper import PaperSuite

            return PaperSuite(workdir, user=user, limit=args.limit)
        from .tau import TauSuite

        return TauSuite(args.domain, solo=args.solo, user=user)
    except (SuiteUnavailable, ValueError) as exc:
        raise UsageError(str(exc)) from None


def check_engine(base: str, api_key: str | None) -> None:
    """The gateway's engines answer (``/ready``); a gateway without one is a ``UsageError``."""
    import httpx

    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        response = httpx.get(f"{base}/ready", headers=headers, timeout=5.0)
    except httpx.HTTPError as exc:
        raise UsageError(f"cannot reach the gateway at {base} ({type(exc).__name__})") from None
    if response.status_code != 200:
        raise UsageError(
            f"the gateway at {base} answers but is not ready (/ready: HTTP "
            f"{response.status_code}): is its engine up?"
        )
