"""The model-name switch: ``MODEL@parallel-4`` asks for ``MODEL`` rehearsed in parallel, K=4.

For clients that can choose a model name but can set neither body fields nor headers (a chat UI,
a framework with a fixed request shape), as optillm chooses its technique by a name prefix. It is
opt-in: the operator lists the suffixes offered (``RGW_MODEL_SWITCH=parallel-4,sequential-2``),
each ``MODE`` or ``MODE-BUDGET`` (``parallel-auto``: the learned budget, under the anchored rule
it needs); ``/v1/models`` lists every served model and alias with each of
them. A switched name becomes the knobs ``X-Rehearsal-Mode``/``X-Rehearsal-Budget`` would set,
below the request's own headers and ``rehearsal`` object, and the engine sees the plain name.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ..errors import ModelNotFound

SEPARATOR = "@"


@dataclass(frozen=True, slots=True)
class ModelSwitch:
    """The suffixes offered, each with the knob headers it stands for."""

    knobs: Mapping[str, Mapping[str, str]]

    @classmethod
    def of(cls, suffixes: Iterable[str]) -> ModelSwitch:
        knobs: dict[str, dict[str, str]] = {}
        for suffix in suffixes:
            mode, _, budget = suffix.partition("-")
            knobs[suffix] = {"x-rehearsal-mode": mode}
            if budget:
                knobs[suffix]["x-rehearsal-budget"] = budget
            if budget == "auto":
                knobs[suffix]["x-rehearsal-commit"] = "anchored"
        return cls(knobs)

    @property
    def enabled(self) -> bool:
        return bool(self.knobs)

    def names(self, model: str) -> list[str]:
        """The switched names of ``model`` that ``/v1/models`` lists."""
        return [f"{model}{SEPARATOR}{suffix}" for suffix in self.knobs]

    def split(self, model: str) -> tuple[str, Mapping[str, str]] | None:
        """``(plain model, knob headers)`` for a switched name; ``None`` for a plain one.

        A name with a suffix that is not offered is a 404 naming the ones that are, rather than a
        model the engines would not know either.
        """
        if not self.knobs or SEPARATOR not in model:
            return None
        plain, _, suffix = model.rpartition(SEPARATOR)
        knobs = self.knobs.get(suffix)
        if knobs is None or not plain:
            offered = ", ".join(SEPARATOR + name for name in self.knobs)
            raise ModelNotFound(
                f"the model '{model}' does not exist; this gateway's switches are {offered}",
                param="model",
            )
        return plain, knobs
