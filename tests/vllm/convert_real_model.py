"""Turn the real model's GGUF into a checkpoint vLLM's CPU build serves: fp32 safetensors.

Run by scripts/real_model.sh with .venv-vllm's interpreter (transformers, torch) plus ``gguf``
and ``accelerate`` from .cache/real-model-convert. transformers reads the Q4_K_M GGUF and
dequantizes it; the tokenizer and its chat template come from the same file, so the checkpoint
speaks exactly the format the weights were trained on.

Usage: ``python convert_real_model.py MODEL.gguf OUT_DIR``
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer


def convert(gguf: Path, out: Path) -> None:
    """Dequantize ``gguf`` into ``out`` (config, fp32 safetensors, tokenizer, chat template)."""
    folder, name = str(gguf.parent), gguf.name
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    # The weights are plain fp32 tensors now, but the model still carries the GGUF quantizer and
    # its config entry; save_pretrained refuses such a model, and vLLM would try to load the
    # checkpoint as GGUF-quantized. Both go: what is written is an ordinary fp32 checkpoint.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    if not tokenizer.chat_template:
        raise SystemExit(f"{gguf} carries no chat template: refusing a checkpoint without one")
    config = json.loads((out / "config.json").read_text())
    if "quantization_config" in config:
        raise SystemExit("the written config still names a quantization: refusing it")
    print(
        f"wrote {out}: {config.get('model_type')}, {config.get('num_hidden_layers')} layers, "
        f"{sum(p.numel() for p in model.parameters()):,} parameters, vocabulary {len(tokenizer):,}"
    )


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    convert(Path(sys.argv[1]), Path(sys.argv[2]))
