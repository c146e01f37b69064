"""JSON of any nesting depth, parsed without recursion.

orjson refuses documents nested more than 1024 levels deep; Triton's HTTP
front end (RapidJSON) parses them and then judges the values, so a deeply
nested value where a boolean belongs is "Invalid value for 'ready': expected
a boolean" there (server qa/L0_http ``test_repository_index_deeply_nested_json``).
:func:`loads` is the fallback for such bodies, used only where a body's
values are judged after parsing (the repository index). Strings and numbers
are read with the standard library's scanners (RFC 8259).
"""

from __future__ import annotations

import re
from json.decoder import scanstring
from typing import Any

_SPACE = re.compile(r"[ \t\n\r]*")
_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?")
_LITERALS = {"true": True, "false": False, "null": None}


class DeepJSONError(ValueError):
    """Malformed JSON (the message says where)."""


def _fail(what: str, pos: int) -> DeepJSONError:
    return DeepJSONError(f"{what} at character {pos}")


def _scalar(text: str, pos: int) -> tuple[Any, int]:
    if text.startswith('"', pos):
        try:
            return scanstring(text, pos + 1, True)
        except ValueError as exc:
            raise DeepJSONError(str(exc)) from None
    for word, value in _LITERALS.items():
        if text.startswith(word, pos):
            return value, pos + len(word)
    match = _NUMBER.match(text, pos)
    if match is None or match.end() == pos:
        raise _fail("expected a value", pos)
    number = match.group()
    return (float(number) if match.group(1) or match.group(2) else int(number)), match.end()


def _key(text: str, pos: int) -> tuple[str, int]:
    """An object's key and the position after its colon."""
    pos = _SPACE.match(text, pos).end()
    if not text.startswith('"', pos):
        raise _fail("expected a string key", pos)
    key, pos = _scalar(text, pos)
    pos = _SPACE.match(text, pos).end()
    if not text.startswith(":", pos):
        raise _fail("expected ':'", pos)
    return key, pos + 1


def loads(text: str) -> Any:
    """The value of the JSON document ``text``; raises DeepJSONError."""
    stack: list[tuple[list | dict, str | None]] = []  # open containers, and an object's pending key
    pos = 0
    while True:
        pos = _SPACE.match(text, pos).end()
        char = text[pos : pos + 1]
        if char in ("[", "{"):  # open a container; an empty one is a finished value
            container: list | dict = [] if char == "[" else {}
            pos = _SPACE.match(text, pos + 1).end()
            closer = "]" if char == "[" else "}"
            if not text.startswith(closer, pos):
                key = None
                if char == "{":
                    key, pos = _key(text, pos)
                stack.append((container, key))
                continue
            value, pos = container, pos + 1
        else:
            value, pos = _scalar(text, pos)
        while True:  # a finished value: into its container; close what ends here
            if not stack:
                if _SPACE.match(text, pos).end() != len(text):
                    raise _fail("extra data", pos)
                return value
            container, key = stack[-1]
            if isinstance(container, list):
                container.append(value)
            else:
                container[key] = value
            pos = _SPACE.match(text, pos).end()
            char = text[pos : pos + 1]
            if char == ",":
                pos += 1
                if isinstance(container, dict):
                    key, pos = _key(text, pos)
                    stack[-1] = (container, key)
                break
            if char == ("]" if isinstance(container, list) else "}"):
                stack.pop()
                value, pos = container, pos + 1
                continue
            raise _fail("expected ',' or the end of the container", pos)
