"""What a user's own sentence asks for, read the way a tool-calling model would read it.

When a conversation matches none of a world's scripted tasks, the acting policy still plans from
the user's words: ``Intent.of`` collects the ids (``W1001``, ``I1002``, ``HAT123``), e-mail
addresses, names and numbers in the text, each with the word before it ("order W1001"), and
``plan`` picks the offered tool whose name the sentence asks for ("exchange", "cancel", "where
is" for a ``get_…``), fills its arguments from those mentions (``order_id`` takes the id after
"order", ``new_item_id`` the second id after "item") and puts a read of the main object first
when the action writes (``get_order`` before ``exchange_item``), as the worlds' policies require.
A sentence with nothing to go on gives no plan, and the policy falls back to a made-up call.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from .schema import JsonObject
from .worlds.base import Call

_ID = re.compile(r"\b[A-Z]{1,4}-?\d{2,}[A-Z0-9]*\b")
_EMAIL = re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+")
_NAME = re.compile(r"\b(?:name is|I am|I'm)\s+([A-Z][a-z]+(?:\s+[A-Z][a-z]+)?)")
_NUMBER = re.compile(r"(?<![\w.])\d+(?:\.\d+)?(?![\w.])")
_WORD = re.compile(r"[a-z]+")
# Words a user says for what a tool name's verb means.
_SYNONYMS: dict[str, tuple[str, ...]] = {
    "get": ("where", "status", "show", "what", "look", "check", "see", "read", "details"),
    "find": ("find", "lookup", "who"),
    "search": ("search", "flights", "available"),
    "exchange": ("exchange", "swap", "replace"),
    "return": ("return", "refund", "send back"),
    "cancel": ("cancel", "stop", "drop"),
    "update": ("update", "change", "move", "set"),
    "transfer": ("transfer", "send", "move", "pay"),
    "block": ("block", "freeze", "lost", "stolen"),
    "book": ("book", "reserve"),
    "dispute": ("dispute", "charge", "fraud"),
}
_READ_VERBS = frozenset(("get", "find", "search", "list", "read", "lookup", "check"))
# "item I1 and I2": an id after one of these words is of the same kind as the id before it.
_CONNECTORS = frozenset(("and", "or", "plus", "also", "then"))


@dataclass(frozen=True, slots=True)
class Mention:
    """One value in the user's text and the word just before it (``order`` for "order W1")."""

    value: str
    before: str


@dataclass(frozen=True)
class Intent:
    """What a sentence names: ids, e-mail addresses, names, numbers and its words."""

    ids: tuple[Mention, ...]
    emails: tuple[str, ...]
    names: tuple[str, ...]
    numbers: tuple[float, ...]
    words: frozenset[str]
    text: str

    @classmethod
    def of(cls, text: str) -> Intent:
        ids: list[Mention] = []
        for match in _ID.finditer(text):
            words = _WORD.findall(text[: match.start()].lower())
            before = words[-1] if words else ""
            if ids and before in _CONNECTORS:
                before = ids[-1].before
            ids.append(Mention(match.group(0), before))
        spans = [m.span() for m in _ID.finditer(text)] + [m.span() for m in _EMAIL.finditer(text)]
        numbers = tuple(
            float(m.group(0))
            for m in _NUMBER.finditer(text)
            if not any(start <= m.start() < end for start, end in spans)
        )
        return cls(
            ids=tuple(ids),
            emails=tuple(_EMAIL.findall(text)),
            names=tuple(m.group(1) for m in _NAME.finditer(text)),
            numbers=numbers,
            words=frozenset(_WORD.findall(text.lower())),
            text=text.lower(),
        )

    @property
    def empty(self) -> bool:
        return not (self.ids or self.emails or self.names)

    def plan(self, tools: dict[str, JsonObject]) -> tuple[Call, ...]:
        """The calls this sentence asks for, in order; empty when it names nothing to use."""
        if self.empty:
            return ()
        scored = sorted(((self._score(name, tools[name]), name) for name in tools), reverse=True)
        best_score, best = scored[0]
        if best_score <= 0:
            return ()
        action = Call(best, self.arguments(tools[best]))
        lookup = self._lookup(best, action, tools)
        return (lookup, action) if lookup is not None else (action,)

    def _score(self, name: str, schema: JsonObject) -> float:
        parts = name.lower().split("_")
        verb, nouns = parts[0], parts[1:]
        said = _SYNONYMS.get(verb, (verb,))
        asked = any(word in self.words or (" " in word and word in self.text) for word in said)
        score = 3.0 if asked else 0.0
        score += sum(1.0 for noun in nouns if noun.rstrip("s") in self.words or noun in self.words)
        required = [str(k) for k in schema.get("required", [])]
        filled = self.arguments(schema)
        if required and all(key in filled for key in required):
            score += 1.5
        elif required:
            score -= 0.5 * sum(key not in filled for key in required)
        return score

    def arguments(self, schema: JsonObject) -> dict[str, Any]:
        """The arguments of a tool that the sentence supplies (absent ones are left out)."""
        properties: dict[str, Any] = schema.get("properties") or {}
        used: set[int] = set()
        numbers = list(self.numbers)
        filled: dict[str, Any] = {}
        for key, sub in properties.items():
            sub = sub if isinstance(sub, dict) else {}
            value = self._value(str(key), sub, used, numbers)
            if value is not None:
                filled[str(key)] = value
        # An id the text does not name by kind ("cancel W1003") fills a required id left open.
        nouns = {str(k).removesuffix("_ids").removesuffix("_id").split("_")[-1] for k in properties}
        loose = [i for i, m in enumerate(self.ids) if i not in used and m.before not in nouns]
        for key in schema.get("required", []):
            if str(key).endswith("_id") and key not in filled and loose:
                filled[str(key)] = self.ids[loose.pop(0)].value
        return filled

    def _value(self, key: str, schema: JsonObject, used: set[int], numbers: list[float]) -> Any:
        kind = schema.get("type")
        if key.endswith("_ids") or (kind == "array" and key.endswith("ids")):
            picked = self._ids_for(key.removesuffix("_ids"), used, every=True)
            return picked or None
        if key.endswith("_id") or key == "id":
            picked = self._ids_for(key.removesuffix("_id"), used, every=False)
            return picked[0] if picked else None
        if "email" in key and self.emails:
            return self.emails[0]
        if key.endswith("name") and self.names:
            return self.names[0]
        enum = schema.get("enum")
        if isinstance(enum, list):
            return next((option for option in enum if self._says(str(option))), None)
        if kind in ("integer", "number") and numbers:
            number = numbers.pop(0)
            return int(number) if kind == "integer" else number
        return None

    def _says(self, option: str) -> bool:
        """Whether the text says an enum value: each of its words begins a word of the text
        (four letters are enough: "no_longer_needed" is said by "I no longer need it")."""
        parts = [part[:4] for part in re.split(r"[_\W]+", option.lower()) if part]
        return bool(parts) and all(
            any(word.startswith(part) for word in self.words) for part in parts
        )

    def _ids_for(self, noun: str, used: set[int], *, every: bool) -> list[str]:
        words = [w for w in noun.lower().split("_") if w and w != "new"]
        matching = [
            i for i, m in enumerate(self.ids)
            if i not in used and words and m.before.rstrip("s") in words
        ]  # fmt: skip
        if not matching and not words:
            matching = [i for i in range(len(self.ids)) if i not in used]
        if not every:
            matching = matching[:1]
        used.update(matching)
        return [self.ids[i].value for i in matching]

    def _lookup(self, action_name: str, action: Call, tools: dict[str, JsonObject]) -> Call | None:
        """A read of the action's first id, when the action writes and such a read is offered."""
        verb = action_name.split("_")[0]
        if verb in _READ_VERBS:
            return None
        for key, value in action.arguments.items():
            if not key.endswith("_id") or not isinstance(value, str):
                continue
            noun = key.removesuffix("_id")
            reader = f"get_{noun}"
            schema = tools.get(reader)
            if schema is None or reader == action_name:
                continue
            properties = schema.get("properties") or {}
            if key in properties:
                return Call(reader, {key: value})
        return None
