"""One serving state, four readers (inference/serving/state.py): on a live
server (in process, or through a worker with MODELHOST_TEST_EXECUTOR=workers)
the V2 protocol's readiness and metadata (real ``tritonclient``), the
management API (``GET /api/models/<m>/``) and the web UI's model page (signed
in through the sign-in form) say the same versions serve and the same
version is the default, through a version upload, a traffic split, a
repository unload and a load.
"""

from __future__ import annotations

import json
import re

import pytest
import tritonclient.http as httpclient

from tests.support import onnx_models as m
from tests.support.live import bearer, manage, request, upload, wait_for, web_session
from tests.support.server import LiveServer

pytestmark = pytest.mark.interop

MODEL = "agreed"
PASSWORD = "state-Secret-2468"

_USER_SCRIPT = f"""
from models_store.accounts import services as accounts
user = accounts.user_create(username="state_alice", password="{PASSWORD}", teams=["states"])
print(accounts.token_create(user=user, name="script")[1])
"""


@pytest.fixture(scope="module")
def alice(model_server):
    """The API token of state_alice (team "states"), who also signs in to the web UI."""
    return manage(model_server, "shell", "-c", _USER_SCRIPT).strip().splitlines()[-1]


@pytest.fixture(scope="module")
def session(model_server, alice) -> str:
    """The Cookie header of state_alice's web session, signed in through the form."""
    return web_session(model_server, "state_alice", PASSWORD)


@pytest.fixture(scope="module")
def client(model_server):
    with httpclient.InferenceServerClient(model_server.http_url) as c:
        yield c


def _api(server: LiveServer, token: str, method: str, path: str, body=None):
    data = json.dumps(body).encode() if body is not None else b""
    headers = {**bearer(token), **({"Content-Type": "application/json"} if body is not None else {})}
    status, answer = request(server, method, path, data, headers)
    assert status == 200, answer
    return answer


def protocol_view(client, token: str) -> tuple[list[int], int | None]:
    """(versions that serve, the default version) as the V2 protocol tells:
    model metadata lists the served versions; readiness of the model (no
    version named) is the default version's, which is the one ready version
    whose readiness agrees with every other lookup."""
    headers = bearer(token)
    if not client.is_model_ready(MODEL, headers=headers):
        return [], None
    served = sorted((int(v) for v in client.get_model_metadata(MODEL, headers=headers)["versions"]), reverse=True)
    ready = [n for n in (1, 2) if client.is_model_ready(MODEL, str(n), headers=headers)]
    assert sorted(ready, reverse=True) == served
    config = client.get_model_config(MODEL, headers=headers)
    return served, config_default(config, served)


def config_default(config: dict, served: list[int]) -> int:
    """The default version from the model configuration: the versions differ in
    their input's width (version n takes n + 1 values), and the configuration
    shows the default version's signature."""
    width = config["input"][0]["dims"][-1]
    assert width - 1 in served
    return width - 1


def api_view(server: LiveServer, token: str) -> tuple[list[int], int | None, bool]:
    model = _api(server, token, "GET", f"/api/models/{MODEL}/")
    versions = {v["number"]: v for v in _api(server, token, "GET", f"/api/models/{MODEL}/versions/")["results"]}
    serving = sorted((n for n, v in versions.items() if v["serving"]), reverse=True)
    assert serving == model["served_versions"]
    return model["served_versions"], model["default_version"], model["loaded"]


def page_view(server: LiveServer, cookie: str) -> tuple[list[int], int | None, str]:
    status, html = request(server, "GET", f"/models/{MODEL}/", headers={"Cookie": cookie})
    assert status == 200
    html = html.decode()
    serving = re.search(r'<dd id="serving">(.*?)</dd>', html, re.S).group(1)
    served = [int(n) for n in re.findall(r'<span class="badge serving">v(\d+)</span>', serving)]
    default = re.search(r'<span id="default-version">version (\d+)</span>', serving)
    rows = re.findall(r'<tr data-version="(\d+)">(.*?)</tr>', html, re.S)
    badges = sorted((int(n) for n, row in rows if 'badge serving">serving<' in row), reverse=True)
    assert badges == served
    return served, int(default.group(1)) if default else None, re.sub(r"<[^>]+>", "", serving)


def agree(server, client, token, cookie) -> tuple[list[int], int | None, bool, str]:
    """(served, default, loaded, the page's serving line) after checking the
    protocol, the management API and the model page agree."""
    served, default = protocol_view(client, token)
    api_served, api_default, loaded = api_view(server, token)
    page_served, page_default, line = page_view(server, cookie)
    assert served == api_served == page_served and default == api_default == page_default, (
        (served, default),
        (api_served, api_default),
        (page_served, page_default),
    )
    return served, default, loaded, line


@pytest.fixture(scope="module")
def agreed(model_server, alice):
    """Model "agreed" (team states): version n takes an FP32 input of n + 1 values
    (so the configuration tells the default version; version 2 is promoted
    and splits between them are forced past the signature guard)."""
    for number in (1, 2):
        status, answer = upload(model_server, alice, MODEL, m.identity("FP32", shape=("N", number + 1)), team="states")
        assert status in (201, 202) and answer["number"] == number, answer

    def both_ready() -> bool:  # worker mode validates them in parallel: version 2 may be READY first
        versions = _api(model_server, alice, "GET", f"/api/models/{MODEL}/")["versions"]
        return [v["state"] for v in versions] == ["READY", "READY"]

    assert wait_for(both_ready, 60)
    # Version 2 breaks version 1's callers, so it is held when version 1 was READY first: promote it.
    version = _api(model_server, alice, "GET", f"/api/models/{MODEL}/versions/2/")
    if version["held"]:
        _api(model_server, alice, "POST", f"/api/models/{MODEL}/versions/2/promote?force=true")
    return MODEL


def test_upload_split_unload_and_load_read_the_same_everywhere(model_server, client, alice, session, agreed):
    show = (model_server, client, alice, session)
    assert agree(*show)[:3] == ([2], 2, True)

    for label, number in (("stable", 1), ("canary", 2)):
        _api(model_server, alice, "PUT", f"/api/models/{MODEL}/labels/{label}/", {"version": number})
    _api(
        model_server,
        alice,
        "PUT",
        f"/api/models/{MODEL}/traffic/",
        {"weights": {"stable": 80, "canary": 20}, "force": True},
    )
    # The split keeps version 1 serving (the policy is latest 1); its heaviest route is the default.
    assert agree(*show)[:3] == ([2, 1], 1, True)

    client.unload_model(MODEL, headers=bearer(alice))
    served, default, loaded, line = agree(*show)
    assert (served, default, loaded) == ([], None, False) and "unloaded" in line
    entries = {e["version"]: e for e in client.get_model_repository_index(headers=bearer(alice)) if e["name"] == MODEL}
    assert {v: e["state"] for v, e in entries.items()} == {"1": "UNAVAILABLE", "2": "UNAVAILABLE"}
    status, page = request(model_server, "GET", f"/models/{MODEL}/versions/2/", headers={"Cookie": session})
    assert (
        status == 200 and "does not serve (the model is unloaded (repository API); load it to serve)" in page.decode()
    )

    client.load_model(MODEL, headers=bearer(alice))
    assert agree(*show)[:3] == ([2, 1], 1, True)

    _api(
        model_server,
        alice,
        "PUT",
        f"/api/models/{MODEL}/traffic/",
        {"weights": {"stable": 10, "canary": 90}, "force": True},
    )
    assert agree(*show)[:3] == ([2, 1], 2, True)
    _api(model_server, alice, "PUT", f"/api/models/{MODEL}/traffic/", {"weights": {}, "force": True})
    assert agree(*show)[:3] == ([2], 2, True)


def test_the_config_endpoint_reports_instance_groups_as_triton_normalizes_them(model_server, client, alice, agreed):
    """The management API shows the instance groups as stored (KIND_AUTO is
    the default everywhere); the configuration extension shows them as
    Triton reports them after its normalization: KIND_AUTO resolved to the
    device the server runs models on (the CPU here, in process and with the
    test's CPU worker), unnamed groups named, one group named after the
    model when there is none."""
    cpu = {"kind": "KIND_CPU", "gpus": [], "secondary_devices": [], "profile": [], "passive": False, "host_policy": ""}
    config = client.get_model_config(MODEL, headers=bearer(alice))
    assert config["instance_group"] == [{**cpu, "name": MODEL, "count": 1}]

    groups = [{"count": 2}, {"kind": "KIND_CPU"}]
    model = _api(model_server, alice, "PATCH", f"/api/models/{MODEL}/", {"instance_group": groups})
    assert model["instance_group"] == [
        {"name": "", "kind": "KIND_AUTO", "count": 2, "gpus": []},
        {"name": "", "kind": "KIND_CPU", "count": 1, "gpus": []},
    ]
    config = client.get_model_config(MODEL, headers=bearer(alice))
    assert config["instance_group"] == [
        {**cpu, "name": f"{MODEL}_0", "count": 2},
        {**cpu, "name": f"{MODEL}_1", "count": 1},
    ]
    _api(model_server, alice, "PATCH", f"/api/models/{MODEL}/", {"instance_group": []})
