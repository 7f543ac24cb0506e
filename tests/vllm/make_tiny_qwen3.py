"""Make a tiny, randomly initialised Qwen3 checkpoint that a real vLLM can serve on CPU.

The weights are noise; what matters is that the checkpoint is shaped like Qwen3 everywhere the
serving stack looks: a byte-level BPE tokenizer (trained here on text already on this machine)
with Qwen3's special and added tokens, a chat template that renders tools, hermes ``<tool_call>``
blocks, ``<tool_response>`` turns and ``enable_thinking``, and a ``Qwen3Config`` small enough to
load in a second. Nothing is downloaded.

Run with the vLLM environment's interpreter (it has torch, transformers and tokenizers)::

    .venv-vllm/bin/python tests/vllm/make_tiny_qwen3.py .cache/tiny-qwen3
"""

from __future__ import annotations

import argparse
import inspect
import json
import sys
from pathlib import Path

# Qwen3's control tokens: special ones are stripped from decoded text ...
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
# ... while these are ordinary added tokens, so they survive `skip_special_tokens=True` and the
# hermes tool parser and the qwen3 reasoning parser can find them in the output.
MARKUP_TOKENS = [
    "<tool_call>",
    "</tool_call>",
    "<think>",
    "</think>",
    "<tool_response>",
    "</tool_response>",
]
VOCAB_SIZE = 2048

# A compact Qwen3-style template. System prompt and tool signatures first; assistant turns
# re-render their tool calls as hermes blocks; consecutive tool results share one user turn;
# `enable_thinking=false` pre-fills an empty think block, as Qwen3's own template does.
CHAT_TEMPLATE = r"""
{%- set has_system = messages and messages[0].role == 'system' -%}
{%- if tools -%}
    {{- '<|im_start|>system\n' -}}
    {%- if has_system -%}{{- messages[0].content + '\n\n' -}}{%- endif -%}
    {{- '# Tools\n\nYou may call one or more functions to assist with the user query.\n\n' -}}
    {{- 'You are provided with function signatures within <tools></tools> XML tags:\n<tools>' -}}
    {%- for tool in tools -%}{{- '\n' + (tool | tojson) -}}{%- endfor -%}
    {{- '\n</tools>\n\nFor each function call, return a json object with function name and '
        'arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{"name": '
        '<function-name>, "arguments": <args-json-object>}\n</tool_call><|im_end|>\n' -}}
{%- elif has_system -%}
    {{- '<|im_start|>system\n' + messages[0].content + '<|im_end|>\n' -}}
{%- endif -%}
{%- for message in messages -%}
    {%- set text = message.content if message.content is string else '' -%}
    {%- if message.role == 'user' or (message.role == 'system' and not loop.first) -%}
        {{- '<|im_start|>' + message.role + '\n' + text + '<|im_end|>\n' -}}
    {%- elif message.role == 'assistant' -%}
        {{- '<|im_start|>assistant\n' + text -}}
        {%- for call in message.tool_calls or [] -%}
            {%- set fn = call.function if call.function is defined else call -%}
            {%- if text or not loop.first -%}{{- '\n' -}}{%- endif -%}
            {%- set args = fn.arguments if fn.arguments is string else fn.arguments | tojson -%}
            {{- '<tool_call>\n{"name": "' + fn.name + '", "arguments": ' -}}
            {{- args + '}\n</tool_call>' -}}
        {%- endfor -%}
        {{- '<|im_end|>\n' -}}
    {%- elif message.role == 'tool' -%}
        {%- if loop.first or messages[loop.index0 - 1].role != 'tool' -%}
            {{- '<|im_start|>user' -}}
        {%- endif -%}
        {{- '\n<tool_response>\n' + text + '\n</tool_response>' -}}
        {%- if loop.last or messages[loop.index0 + 1].role != 'tool' -%}
            {{- '<|im_end|>\n' -}}
        {%- endif -%}
    {%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{- '<|im_start|>assistant\n' -}}
    {%- if enable_thinking is defined and enable_thinking is false -%}
        {{- '<think>\n\n</think>\n\n' -}}
    {%- endif -%}
{%- endif -%}
"""


def training_text() -> list[str]:
    """Local text for the tokenizer: standard-library sources plus chat and tool-call phrases."""
    import argparse as _argparse
    import collections
    import json as _json
    import string
    import textwrap

    modules = (_argparse, collections, _json, string, textwrap)
    texts = [inspect.getsource(module) for module in modules]
    call = {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}
    texts.append(("<tool_call>\n" + json.dumps(call) + "\n</tool_call>\n") * 40)
    texts.append("You are a helpful assistant. Hello! The weather in Paris is sunny today.\n" * 40)
    return texts


def build_tokenizer(out: Path):  # type: ignore[no-untyped-def]
    """Train the BPE tokenizer, attach the template and save it in Hugging Face form."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    core.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        min_frequency=2,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    core.train_from_iterator(training_text(), trainer=trainer)
    core.add_tokens(MARKUP_TOKENS)

    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        model_max_length=2048,
        clean_up_tokenization_spaces=False,
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.save_pretrained(out)

    # Keep the template inside tokenizer_config.json too and name a class that every
    # transformers release knows, so vLLM loads the same tokenizer whatever version it pins.
    config_path = out / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config["chat_template"] = CHAT_TEMPLATE
    config["tokenizer_class"] = "PreTrainedTokenizerFast"
    config_path.write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n")
    return tokenizer


def build_model(out: Path, vocab: int, token_id: dict[str, int]) -> int:
    """Save a random bf16 Qwen3 sized for CPU serving; return its parameter count."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    config = Qwen3Config(
        vocab_size=(vocab + 63) // 64 * 64,  # padded, as real checkpoints are
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,  # vLLM's CPU attention has no kernel for head size 16
        max_position_embeddings=2048,
        rope_theta=1_000_000.0,
        tie_word_embeddings=True,
        bos_token_id=token_id["<|endoftext|>"],
        eos_token_id=token_id["<|im_end|>"],
        pad_token_id=token_id["<|endoftext|>"],
        torch_dtype="bfloat16",
    )
    torch.manual_seed(0)
    model = Qwen3ForCausalLM(config).to(torch.bfloat16)
    model.generation_config.eos_token_id = [token_id["<|im_end|>"], token_id["<|endoftext|>"]]
    model.generation_config.pad_token_id = token_id["<|endoftext|>"]
    model.save_pretrained(out, safe_serialization=True)
    return sum(p.numel() for p in model.parameters())


def check(out: Path) -> None:
    """Reload from disk and render a tool conversation; raise if anything is off."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(out)
    for token in SPECIAL_TOKENS + MARKUP_TOKENS:
        ids = tokenizer.encode(token, add_special_tokens=False)
        if len(ids) != 1:
            raise SystemExit(f"make_tiny_qwen3: {token!r} is not a single token: {ids}")
    tools = [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
            },
        }
    ]
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in Paris?"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": '{"sky": "sunny"}'},
    ]
    rendered = tokenizer.apply_chat_template(
        messages, tools=tools, tokenize=False, add_generation_prompt=True, enable_thinking=False
    )
    for needle in ("<tools>", "<tool_call>", "<tool_response>", "<think>\n\n</think>"):
        if needle not in rendered:
            raise SystemExit(f"make_tiny_qwen3: chat template lost {needle!r}:\n{rendered}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="directory to write the checkpoint into")
    args = parser.parse_args(argv)
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)

    print(f"make_tiny_qwen3: training a {VOCAB_SIZE}-entry byte-level BPE tokenizer", flush=True)
    tokenizer = build_tokenizer(out)
    token_id = {t: tokenizer.convert_tokens_to_ids(t) for t in SPECIAL_TOKENS + MARKUP_TOKENS}
    print(f"make_tiny_qwen3: vocab {len(tokenizer)}, control tokens {token_id}", flush=True)
    params = build_model(out, len(tokenizer), token_id)
    print(f"make_tiny_qwen3: random Qwen3 with {params:,} parameters saved", flush=True)
    check(out)
    print(f"make_tiny_qwen3: verified {out}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
