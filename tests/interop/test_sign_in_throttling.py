"""Sign-in throttling (django-axes) on a live ``serve``, driven like a
browser: the login form with its CSRF token and cookie, from several client
addresses (127.0.0.x: the loopback network answers them all)."""

from __future__ import annotations

import http.client
import re
import statistics
import time

import pytest

from tests.support.live import manage
from tests.support.server import LiveServer

pytestmark = pytest.mark.interop

LIMIT = 3
LOCKOUT_SECONDS = 6
PASSWORDS = {"alice": "alice-Secret-1234", "bob": "bob-Secret-5678"}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    from tests.support import onnx_models as m

    repository = tmp_path_factory.mktemp("throttle-repository")
    m.write_model(repository, "identity_fp32", m.identity("FP32"))
    env = {"SIGN_IN_FAILURE_LIMIT": str(LIMIT), "SIGN_IN_LOCKOUT_SECONDS": str(LOCKOUT_SECONDS)}
    live = LiveServer(repository, tmp_path_factory.mktemp("throttle-live"), extra_env=env)
    live.start()
    for user, password in PASSWORDS.items():
        manage(live, "create_user", user, "--team", "ml", "--password-from-env", env={"MODELHOST_PASSWORD": password})
    yield live
    assert live.stop() == 0, live.log()


def sign_in(server: LiveServer, username: str, password: str, address: str) -> tuple[int, str, float]:
    """Sign in through the form from client ``address``: (status of the POST,
    its page or redirect target, seconds the POST took)."""
    host, port = server.http_url.split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=30, source_address=(address, 0))
    try:
        conn.request("GET", "/accounts/login/")
        page = conn.getresponse()
        html = page.read().decode()
        cookie = re.search(r"csrftoken=([^;]+)", page.getheader("Set-Cookie")).group(1)
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', html).group(1)
        form = f"csrfmiddlewaretoken={token}&username={username}&password={password}&next=/models/"
        started = time.monotonic()
        conn.request(
            "POST",
            "/accounts/login/",
            body=form.encode(),
            headers={"Content-Type": "application/x-www-form-urlencoded", "Cookie": f"csrftoken={cookie}"},
        )
        answer = conn.getresponse()
        body = answer.read().decode()
        took = time.monotonic() - started
        return answer.status, answer.getheader("Location") or body, took
    finally:
        conn.close()


def _signed_in(result) -> bool:
    status, where, _ = result
    return status == 302 and where.endswith("/models/")


def _locked(result) -> bool:
    status, page, _ = result
    return status == 429 and 'id="locked-out"' in page


def test_an_account_is_locked_after_failures_from_anywhere(server):
    failures = [sign_in(server, "alice", "wrong", "127.0.0.2") for _ in range(LIMIT)]
    assert all(status == 200 and "did not match" in page for status, page, _ in failures[:-1]), failures
    assert _locked(sign_in(server, "alice", PASSWORDS["alice"], "127.0.0.3"))  # right password, other address
    assert _signed_in(sign_in(server, "bob", PASSWORDS["bob"], "127.0.0.3"))  # that address is fine


def test_an_address_is_locked_after_failures_for_any_account(server):
    for index in range(LIMIT):
        sign_in(server, f"nobody{index}", "guess", "127.0.0.4")
    assert _locked(sign_in(server, "bob", PASSWORDS["bob"], "127.0.0.4"))
    assert _signed_in(sign_in(server, "bob", PASSWORDS["bob"], "127.0.0.5"))


def test_a_locked_sign_in_is_refused_before_the_password_hash(server):
    """A refused attempt of a locked address costs no password hash: it
    answers many times faster than a wrong password does."""
    wrong = [sign_in(server, "bob", f"wrong{i}", "127.0.0.6")[2] for i in range(LIMIT - 1)]
    last = sign_in(server, "bob", "wrong", "127.0.0.6")
    locked = [sign_in(server, "bob", PASSWORDS["bob"], "127.0.0.6") for _ in range(3)]
    assert all(_locked(result) for result in locked), locked
    hashing = statistics.median([*wrong, last[2]])
    refusing = statistics.median(r[2] for r in locked)
    print(f"wrong password: {hashing * 1000:.0f} ms, locked out: {refusing * 1000:.0f} ms (medians)")
    assert refusing < hashing / 3, (hashing, [r[2] for r in locked])


def test_the_lockout_ends_after_the_cool_off(server):
    for _ in range(LIMIT):
        sign_in(server, "alice", "wrong", "127.0.0.7")
    assert _locked(sign_in(server, "alice", PASSWORDS["alice"], "127.0.0.7"))
    time.sleep(LOCKOUT_SECONDS + 0.5)
    assert _signed_in(sign_in(server, "alice", PASSWORDS["alice"], "127.0.0.7"))


def test_an_operator_lifts_a_lockout(server):
    for index in range(LIMIT):
        sign_in(server, f"nobody{index}", "guess", "127.0.0.8")
    assert _locked(sign_in(server, "bob", PASSWORDS["bob"], "127.0.0.8"))
    manage(server, "axes_reset")
    assert _signed_in(sign_in(server, "bob", PASSWORDS["bob"], "127.0.0.8"))
