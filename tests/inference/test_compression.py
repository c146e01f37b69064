import gzip
import zlib

import pytest

from inference.http.compression import UnsupportedEncoding, choose, compress, decompress
from inference.protocol.errors import InvalidInput, RequestTooLarge


@pytest.mark.parametrize(
    "header,expected",
    [
        (None, None),
        ("gzip", "gzip"),
        ("deflate", "deflate"),
        ("gzip;q=0.5, deflate;q=0.8", "deflate"),
        ("deflate, gzip", "deflate"),  # a tie goes to the first listed
        ("identity, gzip;q=0.5", None),
        ("gzip;q=0", None),
        ("br, *", None),
    ],
)
def test_choose(header, expected):
    assert choose(header) == expected


@pytest.mark.parametrize("coding", ["gzip", "deflate"])
def test_round_trip(coding):
    body = b'{"inputs": []}' * 100
    packed = compress(body, coding)
    assert packed[:2] == (b"\x1f\x8b" if coding == "gzip" else packed[:2]) and len(packed) < len(body)
    assert decompress(packed, coding, 10_000) == body
    # Either framing is accepted under either name, as Triton does.
    other = zlib.compress(body) if coding == "gzip" else gzip.compress(body)
    assert decompress(other, coding, 10_000) == body


def test_limits_and_errors():
    assert decompress(b"abc", None, 10) == b"abc"
    assert decompress(b"abc", "identity", 10) == b"abc"
    with pytest.raises(RequestTooLarge):
        decompress(gzip.compress(b"x" * 1000), "gzip", 999)
    assert decompress(gzip.compress(b"x" * 1000), "gzip", 1000) == b"x" * 1000
    with pytest.raises(InvalidInput, match="not valid gzip"):
        decompress(b"garbage", "gzip", 100)
    with pytest.raises(InvalidInput, match="truncated"):
        decompress(gzip.compress(b"x" * 100)[:-8], "gzip", 1000)
    with pytest.raises(UnsupportedEncoding):
        decompress(b"x", "br", 10)
