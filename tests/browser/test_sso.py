"""Single sign-on through a real OpenID Connect provider in its own process
(oidc-provider-mock, demanding PKCE: tests/support/oidc_provider.py), from
headless Chromium: sign-in through the provider's page, the groups claim
mapped to teams and roles, a group removed at the provider taken away at the
next sign-in (audited), sign-out at the provider too; and the management API
taking the provider's signed tokens (audience checked) beside API tokens."""

from __future__ import annotations

import base64
import hashlib
import json
import re
import secrets
import urllib.error
import urllib.parse
import urllib.request

import pytest

from tests.support import onnx_models as m
from tests.support.browser import csp_violations, new_page
from tests.support.live import manage
from tests.support.oidc_provider import Provider
from tests.support.server import LiveServer

CLIENT_ID = "modelhost"
GROUP_MAP = "ml-devs=ml:maintainer,ml-leads=ml:owner,vision-readers=vision:viewer,platform-admins=operator"


@pytest.fixture(scope="module")
def provider():
    started = Provider().start()
    yield started
    started.stop()


@pytest.fixture(scope="module")
def sso_server(provider, tmp_path_factory):
    """``serve`` signing in through the provider (client modelhost), with an empty model repository."""
    repository = tmp_path_factory.mktemp("sso-repository")
    m.write_model(repository, "iris", m.affine(1.0, 0.0))
    server = LiveServer(
        repository,
        tmp_path_factory.mktemp("sso-live"),
        extra_env={
            "OIDC_ISSUER": provider.issuer,
            "OIDC_CLIENT_ID": CLIENT_ID,
            "OIDC_CLIENT_SECRET": secrets.token_urlsafe(16),
            "OIDC_SCOPES": "openid profile email",
            "OIDC_GROUP_MAP": GROUP_MAP,
            "REGISTRY_POLL_SECONDS": "0.2",
        },
    )
    server.start()
    yield server
    assert server.stop() == 0, server.log()


def _rows(page, table: str) -> dict[str, str]:
    """{first cell: the role cell} of a table's rows."""
    found = {}
    for row in page.locator(f"#{table} tbody tr").all():
        cells = row.locator("td").all_inner_texts()
        if len(cells) > 1:
            found[cells[0].strip()] = row.locator("td.role").inner_text().strip()
    return found


def _sign_in_through_the_provider(page, sub: str) -> str:
    """From a signed-out page: the provider's page, its subject field, back signed in; the authorize URL."""
    page.goto("/models/")
    page.wait_for_url("**/accounts/login/?next=/models/")
    page.click("#sso-sign-in")
    page.wait_for_url(re.compile(r".*/oauth2/authorize\?.*"))
    authorize_url = page.url
    page.fill("input[name=sub]", sub)
    page.click("form:has(input[name=sub]) button[type=submit]")
    page.wait_for_url("**/models/")
    return authorize_url


def _audit(server) -> list[tuple]:
    code = (
        "import json; from models_store.models import AuditEvent; "
        "print(json.dumps([[e.action, e.actor_name, e.detail] for e in AuditEvent.objects.order_by('id')]))"
    )
    return [(e[0], e[1], e[2]) for e in json.loads(manage(server, "shell", "-c", code).strip().splitlines()[-1])]


def test_sign_in_groups_to_roles_group_removed_and_sign_out(browser, provider, sso_server, shots):
    provider.set_user("ana", {"preferred_username": "ana", "email": "ana@example.com",
                              "groups": ["ml-devs", "vision-readers", "unmapped"]})  # fmt: skip
    page = new_page(browser, sso_server)
    authorize_url = _sign_in_through_the_provider(page, "ana")
    query = urllib.parse.parse_qs(urllib.parse.urlsplit(authorize_url).query)
    assert query["code_challenge_method"] == ["S256"] and len(query["code_challenge"][0]) == 43
    assert query["client_id"] == [CLIENT_ID] and query["nonce"] and query["state"]
    assert page.locator("header.top").inner_text().count("ana") == 1
    page.goto("/teams/")
    assert _rows(page, "teams") == {"ml": "maintainer", "vision": "viewer"}
    shots.take(page, "sso-teams")
    page.goto("/teams/ml/")
    assert _rows(page, "members") == {"ana": "maintainer"}
    assert page.locator("#member-form").count() == 0  # a maintainer does not manage members

    # the provider takes ana out of ml-devs and into ml-leads's stead: nothing in ml; vision stays
    provider.set_user("ana", {"preferred_username": "ana", "groups": ["vision-readers"]})
    page.goto("/teams/")
    assert _rows(page, "teams") == {"ml": "maintainer", "vision": "viewer"}  # until the next sign-in
    page.click("header.top button[type=submit]")  # Sign out: here, then at the provider
    page.wait_for_url(re.compile(r".*/oauth2/end_session\?.*"))
    ended = urllib.parse.parse_qs(urllib.parse.urlsplit(page.url).query)
    assert ended["client_id"] == [CLIENT_ID] and ended["id_token_hint"][0].count(".") == 2
    assert ended["post_logout_redirect_uri"] == [f"http://{sso_server.http_url}/accounts/login/"]
    page.click("button[type=submit]")  # the provider's "End session"
    page.wait_for_url("**/accounts/login/")
    page.goto("/teams/")
    page.wait_for_url("**/accounts/login/?next=/teams/")  # signed out here

    _sign_in_through_the_provider(page, "ana")
    page.goto("/teams/")
    assert _rows(page, "teams") == {"vision": "viewer"}
    assert page.goto("/teams/ml/").status == 403  # no longer a member of ml
    assert csp_violations(page) == []
    page.context.close()

    joins = [(a, who, d["team"], d.get("role")) for a, who, d in _audit(sso_server) if a.startswith("team.")]
    assert joins == [
        ("team.create", "ana", "ml", None),
        ("team.join", "ana", "ml", "maintainer"),
        ("team.create", "ana", "vision", None),
        ("team.join", "ana", "vision", "viewer"),
        ("team.leave", "ana", "ml", "maintainer"),
    ]


def test_an_operator_group_and_a_deactivated_user(browser, provider, sso_server):
    provider.set_user("ops", {"preferred_username": "ops", "groups": ["platform-admins"]})
    page = new_page(browser, sso_server)
    _sign_in_through_the_provider(page, "ops")
    assert page.locator("header.top a[href='/admin/']").count() == 1  # an operator
    code = "from django.contrib.auth.models import User; User.objects.filter(username='ops').update(is_active=False)"
    manage(sso_server, "shell", "-c", code)
    page.goto("/models/")
    page.wait_for_url("**/accounts/login/?next=/models/")  # the deactivated person's session ended
    page.context.close()
    page = new_page(browser, sso_server)
    page.goto("/accounts/login/")
    page.click("#sso-sign-in")
    page.fill("input[name=sub]", "ops")
    page.click("form:has(input[name=sub]) button[type=submit]")
    page.wait_for_url("**/accounts/login/?sso=failed")
    assert page.locator("#sso-failed").is_visible()
    page.context.close()


# -- the management API with the provider's tokens ------------------------------------
def _provider_token(provider, sub: str, client_id: str) -> str:
    """A signed token of the provider for ``sub`` whose audience is ``client_id``
    (the ID token of a code flow with PKCE, as a workload identity would be)."""
    discovery = json.loads(urllib.request.urlopen(f"{provider.issuer}/.well-known/openid-configuration").read())
    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
    redirect = "http://127.0.0.1:9/callback"
    params = {"response_type": "code", "client_id": client_id, "redirect_uri": redirect, "scope": "openid profile",
              "state": "s", "nonce": "n", "code_challenge": challenge, "code_challenge_method": "S256"}  # fmt: skip

    class Stop(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args):
            return None

    opener = urllib.request.build_opener(Stop)
    url = f"{discovery['authorization_endpoint']}?{urllib.parse.urlencode(params)}"
    try:
        opener.open(urllib.request.Request(url, data=urllib.parse.urlencode({"sub": sub}).encode()))
    except urllib.error.HTTPError as redirected:
        location = redirected.headers["Location"]
    code = urllib.parse.parse_qs(urllib.parse.urlsplit(location).query)["code"][0]
    form = {"grant_type": "authorization_code", "code": code, "redirect_uri": redirect, "client_id": client_id,
            "client_secret": "any", "code_verifier": verifier}  # fmt: skip
    answer = urllib.request.urlopen(discovery["token_endpoint"], data=urllib.parse.urlencode(form).encode())
    return json.loads(answer.read())["id_token"]


def _api(server, path: str, token: str) -> int:
    request = urllib.request.Request(f"http://{server.http_url}{path}", headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status
    except urllib.error.HTTPError as refused:
        return refused.code


def test_the_api_takes_the_providers_tokens_for_its_audience_only(provider, sso_server):
    provider.set_user("ci-runner", {"preferred_username": "ci-runner", "groups": ["ml-leads"]})
    token = _provider_token(provider, "ci-runner", CLIENT_ID)
    assert _api(sso_server, "/api/teams/ml/members/", token) == 200
    assert _api(sso_server, "/api/teams/ml/service-accounts/", token) == 200  # owner, from ml-leads
    assert _api(sso_server, "/api/teams/vision/service-accounts/", token) in (403, 404)
    other_audience = _provider_token(provider, "ci-runner", "another-app")
    assert _api(sso_server, "/api/models/", other_audience) == 401
    head, body, signature = token.split(".")
    claims = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    claims["preferred_username"] = "root"
    forged = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()
    assert _api(sso_server, "/api/models/", f"{head}.{forged}.{signature}") == 401
    assert _api(sso_server, "/api/models/", "mh_not-a-token") == 401
