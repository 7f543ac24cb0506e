"""The twin's settings: one frozen value built from the CLI (and its environment defaults)."""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_MODEL = "EnvACE-Qwen3-8B"
MAX_MODEL_LEN = 40960  # Qwen3-8B's context, advertised in /v1/models and enforced on max_tokens
# The vLLM release whose wire format the twin follows (tests/contract holds the two together);
# it appears in ``system_fingerprint`` the way vLLM writes its own.
VLLM_VERSION = "0.32.0"


@dataclass(frozen=True)
class TwinSettings:
    """Everything that shapes the twin's behaviour; printed at start-up."""

    world: str = "auto"  # auto | airline | retail | bank
    skill: float = 0.7
    fidelity: float = 0.9
    grounding_gain: float = 0.5  # drift chance multiplier per real example of the tool
    latency: str = "zero"  # zero | h100 | path to a JSON profile
    latency_scale: float = 1.0
    seed: int = 0
    served_model_name: str = DEFAULT_MODEL
    cache_blocks: int = 16384

    @property
    def model_names(self) -> list[str]:
        return [name.strip() for name in self.served_model_name.split(",") if name.strip()]

    def describe(self) -> str:
        return (
            "ENGINE TWIN — a SIMULATION of vLLM serving EnvACE-Qwen3-8B (no model runs here)\n"
            f"  served model name : {', '.join(self.model_names)}\n"
            f"  world             : {self.world}\n"
            f"  skill (acting)    : {self.skill}\n"
            f"  fidelity (rehearse): {self.fidelity} (schema vetoes drift too)\n"
            f"  grounding gain    : {self.grounding_gain} (k real examples of a tool in the prompt:"
            f" fidelity 1-(1-f)*{self.grounding_gain}^k)\n"
            f"  latency profile   : {self.latency} x{self.latency_scale}\n"
            f"  seed              : {self.seed}\n"
            f"  prefix cache      : {self.cache_blocks} blocks of 16 tokens"
        )
