"""Reading Prometheus exposition text in tests."""

from __future__ import annotations


def samples(text: bytes) -> dict[str, float]:
    """{sample line's name and labels as written: value}."""
    out = {}
    for line in text.decode().splitlines():
        if line and not line.startswith("#"):
            key, number = line.rsplit(" ", 1)
            out[key] = float(number)
    return out
