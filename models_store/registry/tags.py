"""Tags of models and versions (as MLflow's registry has them): free
``key -> value`` strings that people set to find models by (``owner:
fraud-team``, ``dataset: iris-2024``), next to a free-text description.

A key is 1 to :data:`MAX_KEY` characters of letters, digits and ``_ . - / :``,
starting with a letter, digit or ``_``; a value is a string of at most
:data:`MAX_VALUE` characters (may be empty); a model or version carries at
most :data:`MAX_TAGS` tags. :func:`validate` raises RegistryError (400)
naming the first tag it refuses. The web UI edits tags as text, one
``key=value`` a line (:func:`parse_text`, :func:`as_text`); lists filter by
``tag=key`` (has the tag) or ``tag=key=value`` (:func:`parse_filter`).
"""

from __future__ import annotations

import re

from models_store.errors import RegistryError

MAX_TAGS = 50
MAX_KEY = 64
MAX_VALUE = 256
MAX_DESCRIPTION = 5000  # characters of a version's description
KEY_RE = re.compile(r"\A[A-Za-z0-9_][A-Za-z0-9_.\-/:]{0," + str(MAX_KEY - 1) + r"}\Z")
KEY_RULE = f"a tag key is 1 to {MAX_KEY} letters, digits, '_', '.', '-', '/' or ':' (not starting with a symbol)"


def validate(tags) -> dict[str, str]:
    """``tags`` (a dict of str -> str) checked and returned sorted by key;
    RegistryError naming the first key or value refused."""
    if not isinstance(tags, dict):
        raise RegistryError("tags are an object of key -> value strings")
    if len(tags) > MAX_TAGS:
        raise RegistryError(f"at most {MAX_TAGS} tags (got {len(tags)})")
    for key, value in tags.items():
        if not isinstance(key, str) or not KEY_RE.match(key):
            raise RegistryError(f"tag key {key!r}: {KEY_RULE}")
        if not isinstance(value, str):
            raise RegistryError(f"tag '{key}': the value is a string")
        if len(value) > MAX_VALUE or "\x00" in value or "\n" in value:
            raise RegistryError(f"tag '{key}': the value is one line of at most {MAX_VALUE} characters")
    return {key: tags[key] for key in sorted(tags)}


def parse_text(text: str) -> dict[str, str]:
    """``"owner=ml\\ndataset = iris"`` -> ``{"owner": "ml", "dataset": "iris"}``
    (one ``key=value`` a line, blank lines skipped, a line without ``=`` is a
    key with an empty value), checked by :func:`validate`; RegistryError
    naming the line refused (a key twice, or what :func:`validate` refuses)."""
    tags: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        key, _, value = line.partition("=")
        key, value = key.strip(), value.strip()
        if key in tags:
            raise RegistryError(f"line {number}: tag '{key}' is given twice")
        tags[key] = value
    return validate(tags)


def as_text(tags: dict[str, str]) -> str:
    """The text :func:`parse_text` reads back into ``tags``."""
    return "\n".join(f"{key}={value}" if value else key for key, value in sorted((tags or {}).items()))


def parse_filter(text: str) -> tuple[str, str | None]:
    """A list's ``tag`` filter: ``"key"`` -> ``("key", None)`` (has the tag),
    ``"key=value"`` -> ``("key", "value")`` (that value exactly). ValueError
    for a malformed key."""
    key, sep, value = text.strip().partition("=")
    key = key.strip()
    if not KEY_RE.match(key):
        raise ValueError(f"tag filter {text!r}: {KEY_RULE}; key=value filters by value")
    return key, (value.strip() if sep else None)


def check_description(text: str) -> str:
    """A version's description as given; RegistryError beyond :data:`MAX_DESCRIPTION` characters or with NUL."""
    if len(text) > MAX_DESCRIPTION or "\x00" in text:
        raise RegistryError(f"a description is at most {MAX_DESCRIPTION} characters of text")
    return text
