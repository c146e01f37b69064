"""Where a webhook may be sent, and the one HTTP request of an attempt.

A target URL is ``http`` or ``https`` with a host name or address
(:data:`URL_PATTERN`, which the management API's schema states). Its host
is resolved and every address it resolves to must be global: a private
(10/8, 172.16/12, 192.168/16, fc00::/7), loopback, link-local (169.254/16,
with the clouds' metadata services; fe80::/10), shared (100.64/10),
multicast, reserved or unspecified address is refused (server-side request
forgery), unless WEBHOOK_ALLOWED_HOSTS lists the URL's host or the
address. The check runs when a subscription is created and again before
every attempt, and the attempt connects to the address that was checked
(a name that resolves elsewhere a moment later is not followed). Redirects
are not followed (a 3xx answer is a failed attempt).
"""

from __future__ import annotations

import http.client
import ipaddress
import re
import socket
import ssl
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

from django.conf import settings

_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_H16 = r"[0-9A-Fa-f]{1,4}"
_IPV6 = "|".join(
    (
        rf"(?:{_H16}:){{7}}{_H16}",
        rf"(?:{_H16}:){{1,7}}:",
        *(rf"(?:{_H16}:){{1,{6 - n}}}(?::{_H16}){{1,{n + 1}}}" for n in range(6)),
        rf":(?:(?::{_H16}){{1,7}}|:)",
    )
)
_PORT = r"(?:6553[0-5]|655[0-2][0-9]|65[0-4][0-9]{2}|6[0-4][0-9]{3}|[1-5][0-9]{4}|[0-9]{1,4})"
#: A character of a path, query or fragment: none of the spaces or control characters (spelled out, not
#: ``\s``, whose meaning differs between ECMA's and Python's regular expressions).
_PATH_CHAR = r"[^\x00-\x20\x7f-\x9f\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff]"
#: What a webhook URL looks like (the management API's schema says it as its ``pattern``, the same
#: text in ECMA and Python regular expressions): http or https; a host name of labels of at most 63
#: letters, digits and hyphens (RFC 1123), an IPv4 address, or an IPv6 address in brackets; an
#: optional port up to 65535; an optional path, query and fragment without spaces or control characters.
URL_PATTERN = rf"^https?://(?:{_LABEL}(?:\.{_LABEL})*\.?|\[(?:{_IPV6})\])(?::{_PORT})?(?:[/?#]{_PATH_CHAR}*)?$"
_URL = re.compile(URL_PATTERN)
URL_SHAPE = (
    "a webhook URL is http:// or https:// with a host name (labels of at most 63 letters, digits or hyphens), "
    "an IP address (IPv6 in brackets), an optional port and a path without spaces"
)


def well_formed(url: str) -> bool:
    """Whether ``url`` has the shape of :data:`URL_PATTERN` (all of it)."""
    return _URL.fullmatch(url) is not None


class TargetRefused(ValueError):
    """The URL may not be a webhook target; the message says why."""


@dataclass(frozen=True)
class Target:
    """A checked target: ``address`` is the IP address the attempt connects to."""

    scheme: str
    host: str
    port: int
    path: str
    address: str


@dataclass(frozen=True)
class Answer:
    """A target's answer: HTTP ``status``, the first bytes of its body
    (decoded as UTF-8, undecodable bytes replaced) and the time it took (ms)."""

    status: int
    body: str
    duration_ms: float


def _allowed(host: str, address: str) -> bool:
    allowed = {name.strip().lower().strip("[]") for name in settings.WEBHOOK_ALLOWED_HOSTS}
    return host.lower() in allowed or address in allowed


def _refused_kind(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> str | None:
    """Why ``ip`` is not a public address (None: it is)."""
    mapped = getattr(ip, "ipv4_mapped", None)
    if mapped is not None:
        ip = mapped
    for kind in ("loopback", "link_local", "private", "multicast", "reserved", "unspecified"):
        if getattr(ip, f"is_{kind}"):
            return kind.replace("_", "-")
    if not ip.is_global:
        return "non-global"
    return None


def check(url: str) -> Target:
    """Resolve ``url``'s host and check every address it has (see the module
    doc). Returns the target with the first address; raises TargetRefused
    for a URL not of :data:`URL_PATTERN`'s shape, a host that does not resolve,
    or one with an address that is not public (and not allowed)."""
    if not well_formed(url):
        raise TargetRefused(URL_SHAPE)
    try:
        parts = urlsplit(url)
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError as exc:
        raise TargetRefused(f"not a URL: {exc}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise TargetRefused(URL_SHAPE)
    host = parts.hostname
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as exc:
        raise TargetRefused(f"the host {host!r} does not resolve ({exc})") from None
    addresses = list(dict.fromkeys(info[4][0] for info in infos))
    if not addresses:
        raise TargetRefused(f"the host {host!r} has no address")
    for address in addresses:
        kind = _refused_kind(ipaddress.ip_address(address.split("%")[0]))
        if kind is not None and not _allowed(host, address):
            raise TargetRefused(
                f"the host {host!r} resolves to {address}, a {kind} address: webhooks may only target public "
                "addresses unless WEBHOOK_ALLOWED_HOSTS lists the host"
            )
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return Target(parts.scheme, host, port, path, addresses[0])


def post(target: Target, body: bytes, headers: dict[str, str], timeout: float, keep_bytes: int) -> Answer:
    """POST ``body`` to ``target``, connecting to its checked address (TLS
    verified against the host name for https). Raises OSError (refused,
    unreachable, timed out after ``timeout`` s, TLS errors) or
    http.client.HTTPException (a malformed answer)."""
    if target.scheme == "https":
        context = ssl.create_default_context()
        conn = http.client.HTTPSConnection(target.host, target.port, timeout=timeout, context=context)
    else:
        conn = http.client.HTTPConnection(target.host, target.port, timeout=timeout)
    address = target.address

    def connect_to_checked(_where, *args, **kwargs):
        return socket.create_connection((address, target.port), *args, **kwargs)

    conn._create_connection = connect_to_checked  # the checked address, not a fresh lookup
    started = time.perf_counter()
    try:
        conn.request("POST", target.path, body=body, headers={**headers, "Content-Type": "application/json"})
        response = conn.getresponse()
        data = response.read(keep_bytes)
        return Answer(response.status, data.decode("utf-8", "replace"), (time.perf_counter() - started) * 1000)
    finally:
        conn.close()
