"""The bare-JSON rewriting behind the ``bare_json`` tool-parser plugin, whole texts and prefixes."""

from __future__ import annotations

import itertools
import json

import pytest

from tests.vllm.bare_json import CLOSE, OPEN, read

NAMES = {"get_weather", "get_time"}
CALL = '{"name": "get_weather", "arguments": {"city": "Paris"}}'
TAGGED = f"{OPEN}\n{CALL}\n{CLOSE}"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param(CALL, TAGGED, id="bare"),
        pytest.param(f"\n  {CALL}\n", f"\n  {TAGGED}\n", id="bare-with-whitespace"),
        pytest.param(f"```json\n{CALL}\n```", TAGGED, id="fenced"),
        pytest.param(f"```\n{CALL}\n```\nDone.", f"{TAGGED}\nDone.", id="fenced-no-language"),
        pytest.param(f"Sure:\n```json\n{CALL}\n```", f"Sure:\n{TAGGED}", id="prose-then-fence"),
        pytest.param(TAGGED, TAGGED, id="already-tagged"),
        pytest.param("It is sunny.", "It is sunny.", id="prose"),
        pytest.param('{"city": "Paris"}', '{"city": "Paris"}', id="json-but-no-name"),
        pytest.param(
            '{"name": "delete_all", "arguments": {}}',
            '{"name": "delete_all", "arguments": {}}',
            id="names-no-requested-tool",
        ),
        pytest.param(
            '{"name": "get_weather", "arguments": "Paris"}',
            '{"name": "get_weather", "arguments": "Paris"}',
            id="arguments-not-an-object",
        ),
        pytest.param(
            "```python\nprint(1)\n```", "```python\nprint(1)\n```", id="fence-of-another-language"
        ),
        pytest.param("```json\nnot json\n```", "```json\nnot json\n```", id="fence-not-json"),
    ],
)
def test_whole_texts(text: str, expected: str) -> None:
    """A complete call to a requested tool is tagged in place; anything else is left as it is."""
    reading = read(text, NAMES)
    assert reading.text == expected
    assert not reading.undecided


def test_parameters_and_lists_become_one_block_per_call() -> None:
    """``parameters`` is read as ``arguments``; a list of calls becomes one block per call."""
    text = json.dumps(
        [
            {"name": "get_weather", "parameters": {"city": "Oslo"}},
            {"name": "get_time", "arguments": {"zone": "CET"}},
        ]
    )
    blocks = read(text, NAMES).text.split(CLOSE)
    assert [json.loads(b.split(OPEN)[1]) for b in blocks[:-1]] == [
        {"name": "get_weather", "arguments": {"city": "Oslo"}},
        {"name": "get_time", "arguments": {"zone": "CET"}},
    ]


def test_no_requested_tools_leaves_text_alone() -> None:
    """Without tools in the request there is nothing to call, so nothing is rewritten."""
    assert read(CALL, set()).text == CALL


@pytest.mark.parametrize(
    ("prefix", "shown"),
    [
        pytest.param("Sure:\n``", "Sure:\n", id="maybe-a-fence"),
        pytest.param("Sure:\n```js", "Sure:\n", id="fence-header-not-finished"),
        pytest.param("Sure:\n```json\n", "Sure:\n", id="fence-body-not-started"),
        pytest.param('{"city": "Pa', "", id="unnamed-object"),
        pytest.param('{"name": "get_wea', "", id="name-not-finished"),
        pytest.param(
            '{"name": "get_weather", "arguments": {"ci',
            f'{OPEN}\n{{"name": "get_weather", "arguments": {{"ci',
            id="named-call-streams-as-an-open-block",
        ),
    ],
)
def test_prefixes_are_held_back_until_decided(prefix: str, shown: str) -> None:
    """While a prefix could still become a call, only what is certain is shown."""
    reading = read(prefix, NAMES)
    assert reading.undecided
    assert reading.text == shown


def test_every_prefix_of_a_call_extends_what_was_shown() -> None:
    """Streamed token by token, the shown text only grows, ending with the tagged call."""
    text = f"```json\n{CALL}\n```"
    shown = [read(text[:end], NAMES).text for end in range(1, len(text) + 1)]
    for before, after in itertools.pairwise(shown):
        assert after.startswith(before), (before, after)
    assert shown[-1] == TAGGED
