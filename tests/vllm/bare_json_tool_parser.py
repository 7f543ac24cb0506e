"""vLLM tool-parser plugin for models that write tool calls as bare or fenced JSON.

Qwen2.5-Coder-0.5B-Instruct (the real model of tests/vllm and benchmarks) writes the right call as
``{"name": ..., "arguments": {...}}``, often inside a ```json fence, and never inside hermes
``<tool_call>`` tags, so vLLM's ``hermes`` parser finds no call in its text. This plugin rewrites
such JSON — when it names a tool of the request — into the tagged form (``tests.vllm.bare_json``)
and hands the text over to vLLM's hermes parser, streamed too. Anything else passes through.

Test and benchmark support only: the gateway never imports it. vLLM loads it with
``--tool-parser-plugin tests/vllm/bare_json_tool_parser.py --tool-call-parser bare_json`` and the
repository root on ``PYTHONPATH`` (tests/support/vllm.py does both).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from vllm.tool_parsers.abstract_tool_parser import ToolParserManager
from vllm.tool_parsers.hermes_tool_parser import Hermes2ProToolParser

from tests.vllm.bare_json import PARSER_NAME, read


def _names(request: Any) -> set[str]:
    tools = getattr(request, "tools", None) or []
    found = set()
    for tool in tools:
        function = getattr(tool, "function", None)
        name = getattr(function, "name", None) or getattr(tool, "name", None)
        if isinstance(name, str):
            found.add(name)
    return found


@ToolParserManager.register_module(PARSER_NAME)
class BareJsonToolParser(Hermes2ProToolParser):
    """Hermes, after bare or ```json-fenced calls to requested tools are tagged."""

    def extract_tool_calls(self, model_output: str, request: Any) -> Any:
        reading = read(model_output, _names(request))
        # Whole text, nothing left to come: JSON still incomplete is no call (hermes sees it as is).
        return super().extract_tool_calls(
            model_output if reading.undecided else reading.text, request
        )

    def extract_tool_calls_streaming(
        self,
        previous_text: str,
        current_text: str,
        delta_text: str,
        previous_token_ids: Sequence[int],
        current_token_ids: Sequence[int],
        delta_token_ids: Sequence[int],
        request: Any,
    ) -> Any:
        # Hermes re-reads the whole text on every delta and diffs it against what it has sent,
        # so it is handed the rewritten text so far; what is still undecided is held back.
        names = _names(request)
        before = read(previous_text, names).text
        now = read(current_text, names).text
        return super().extract_tool_calls_streaming(
            before,
            now,
            now[len(before) :] if now.startswith(before) else now,
            previous_token_ids,
            current_token_ids,
            delta_token_ids,
            request,
        )
