"""API tokens: their format, generation, hashing and lifetimes.

A token is ``mh_`` plus 43 URL-safe characters (256 random bits). Only its
sha256 is stored, so a leaked database does not leak usable tokens; since
tokens are random, a plain sha256 (no slow hash) is enough. Who may use one
for what: :mod:`models_store.accounts.authorizer` (inference) and
:mod:`models_store.web.authentication` (the management API).
"""

from __future__ import annotations

import hashlib
import re
import secrets
from datetime import timedelta

TOKEN_PREFIX = "mh_"
DISPLAY_CHARS = 10


def generate() -> str:
    """A new random token (shown once to its owner, never stored)."""
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def hash_token(token: str) -> str:
    """The stored form of a token: sha256, hex."""
    return hashlib.sha256(token.encode("utf-8", "surrogateescape")).hexdigest()


def display_prefix(token: str) -> str:
    """The first characters of a token, kept to recognise it in lists."""
    return token[:DISPLAY_CHARS]


_UNITS = {"d": "days", "h": "hours", "m": "minutes", "s": "seconds"}


def parse_lifetime(text: str) -> timedelta:
    """A token lifetime: ``90d``, ``12h``, ``30m``, ``45s`` -> timedelta.
    Raises ValueError for anything else (or zero)."""
    match = re.fullmatch(r"\s*(\d+)\s*([dhms])\s*", text)
    if match is None or int(match[1]) == 0:
        raise ValueError(f"a token lifetime is a positive number and a unit d, h, m or s (e.g. 90d), not {text!r}")
    return timedelta(**{_UNITS[match[2]]: int(match[1])})
