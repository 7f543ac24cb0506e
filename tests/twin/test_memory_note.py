"""Reading the rehearsal-memory note of docs/formats.md."""

from __future__ import annotations

from rehearsal_gateway.twin.memory_note import parse_note, split_note

NOTE = """<rehearsal_memory>
Imagined outcomes of candidate actions, rehearsed privately before acting. They are predictions, not real tool results.
[1] outcome=ok score=1.00
action: get_order {"order_id":"W1001"}
imagined: {"order_id":"W1001","status":"pending"}
[2] outcome=veto:INVALID_PARAMETERS score=0.00
action: cancel_order {"order_id":"W1001","reason":"whim"}
imagined: {"error_tool_call":{"code":"INVALID_PARAMETERS","message":"..."}}
[3] outcome=ok score=0.30
action: get_user {"user_id":"U1"}
imagined: -
[4] outcome=answer score=1.00
action: answer
imagined: -
Commit one action now. Prefer actions rehearsed as ok; do not repeat actions marked veto or error; unparsed means nothing was learned.
</rehearsal_memory>"""  # noqa: E501


def test_note_marks_vetoed_and_low_scores_to_avoid() -> None:
    """Vetoed and low-scoring actions are avoided; clean ones are preferred."""
    note = parse_note(NOTE)
    assert note.avoid == {
        'cancel_order {"order_id":"W1001","reason":"whim"}',
        'get_user {"user_id":"U1"}',
    }
    assert 'get_order {"order_id":"W1001"}' in note.prefer


def test_split_note_removes_trailing_note_only() -> None:
    """The note is taken off the end of the conversation; other messages stay."""
    messages = [{"role": "user", "content": "hi"}, {"role": "user", "content": NOTE}]
    rest, note = split_note(messages)
    assert rest == messages[:1]
    assert note is not None
    assert split_note(messages[:1]) == (messages[:1], None)


def test_garbled_note_is_tolerated() -> None:
    """Lines that do not fit the layout are skipped, not fatal."""
    note = parse_note("<rehearsal_memory>\n[x] outcome=\naction: nope\n</rehearsal_memory>")
    assert note.avoid == frozenset()
