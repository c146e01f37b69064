"""Lists in pages: the management API's limit/offset pages with their total
(models, versions, audit log), and the web UI's models list (pages, filters
by name, team and version state, sorting)."""

from __future__ import annotations

import re

import pytest
from django.test import Client

from models_store.accounts import services as accounts
from models_store.models import AuditEvent, ModelVersion, RegisteredModel, Team
from tests.support.store import PASSWORD, person

pytestmark = [pytest.mark.db, pytest.mark.django_db(transaction=True)]

STATES = ModelVersion.State


def _registry(count: int) -> list[tuple[str, str, str]]:
    """``count`` models (name, team, state of their one version) written as rows:
    m000..m{count-1}, teams ml and vision taking turns (every fifth operator-owned),
    every third version FAILED, the others READY."""
    teams = {name: Team.objects.get_or_create(name=name)[0] for name in ("ml", "vision")}
    expected = []
    for i in range(count):
        team = None if i % 5 == 4 else ("ml", "vision")[i % 2]
        state = STATES.FAILED if i % 3 == 0 else STATES.READY
        model = RegisteredModel.objects.create(name=f"m{i:03d}", team=teams.get(team))
        ModelVersion.objects.create(
            model=model, number=1, artifact=f"m{i:03d}/1/model.onnx", sha256=f"{i:064x}", size=100 + i, state=state
        )
        expected.append((model.name, team or "-", state))
    return expected


@pytest.fixture
def root_api():
    user = person("root", superuser=True)
    return Client(HTTP_AUTHORIZATION=f"Bearer {accounts.token_create(user=user, name='script')[1]}")


def _names(response) -> list[str]:
    assert response.status_code == 200, response.content
    return [model["name"] for model in response.json()["results"]]


def test_the_model_list_comes_in_pages_with_its_total(root_api):
    expected = _registry(23)
    first = root_api.get("/api/models/?limit=10").json()
    assert first["count"] == 23 and first["previous"] is None
    assert [m["name"] for m in first["results"]] == [name for name, _, _ in expected[:10]]
    walked, url = [], "/api/models/?limit=10"
    while url:
        page = root_api.get(url).json()
        walked += [m["name"] for m in page["results"]]
        url = page["next"]
    assert walked == sorted(name for name, _, _ in expected)
    last = root_api.get("/api/models/?limit=10&offset=20").json()
    assert [m["name"] for m in last["results"]] == ["m020", "m021", "m022"] and last["next"] is None
    assert "offset=10" in last["previous"]
    # Without limit: the default page (50); above the maximum: 1,000.
    assert len(root_api.get("/api/models/").json()["results"]) == 23
    assert root_api.get("/api/models/?limit=5000").json()["count"] == 23


@pytest.mark.parametrize(
    ("query", "selects"),
    [
        ("name=M01", lambda name, team, state: "m01" in name),
        ("team=vision", lambda name, team, state: team == "vision"),
        ("team=-", lambda name, team, state: team == "-"),
        ("state=failed", lambda name, team, state: state == STATES.FAILED),
        ("team=ml&state=READY", lambda name, team, state: team == "ml" and state == STATES.READY),
    ],
)
def test_the_model_list_filters(root_api, query, selects):
    expected = _registry(30)
    page = root_api.get(f"/api/models/?{query}&limit=1000").json()
    wanted = [name for name, team, state in expected if selects(name, team, state)]
    assert wanted and [m["name"] for m in page["results"]] == wanted and page["count"] == len(wanted)


def test_the_model_list_sorts(root_api):
    expected = _registry(12)
    assert _names(root_api.get("/api/models/?order=-name")) == sorted((n for n, _, _ in expected), reverse=True)
    team_of = {name: team for name, team, _ in expected}
    owned = [n for n in _names(root_api.get("/api/models/?order=team")) if team_of[n] != "-"]  # NULLs: per database
    assert owned == sorted(owned, key=lambda n: (team_of[n], n)) and len(owned) == 10
    owned = [n for n in _names(root_api.get("/api/models/?order=-team")) if team_of[n] != "-"]
    assert owned == sorted(owned, key=lambda n: (team_of[n] == "ml", n))  # vision first, names ascending
    RegisteredModel.objects.get(name="m005").save()  # auto_now: the newest change
    assert _names(root_api.get("/api/models/?order=-updated"))[0] == "m005"


def test_bad_list_parameters_are_a_400_naming_them(root_api):
    for query, word in (("order=size", "unknown order 'size'"), ("state=GONE", "unknown state 'GONE'")):
        response = root_api.get(f"/api/models/?{query}")
        assert response.status_code == 400 and word in response.json()["error"], response.content


def test_versions_and_the_audit_log_come_in_pages(root_api):
    model = RegisteredModel.objects.create(name="many")
    for number in range(1, 8):
        ModelVersion.objects.create(
            model=model, number=number, artifact="x", sha256=f"{number:064x}", size=1, state=STATES.READY
        )
    for i in range(150):
        AuditEvent.objects.create(model=model, model_name="many", action="model.update", detail={"i": i})
    versions = root_api.get("/api/models/many/versions/?limit=3&offset=3").json()
    assert versions["count"] == 7 and [v["number"] for v in versions["results"]] == [4, 3, 2]
    audit = root_api.get("/api/models/many/audit/").json()
    assert audit["count"] == 150 and len(audit["results"]) == 50  # the default page
    assert [e["detail"]["i"] for e in audit["results"][:3]] == [149, 148, 147]  # newest first
    rest = root_api.get(audit["next"]).json()
    assert [e["detail"]["i"] for e in rest["results"]] == list(range(99, 49, -1))


def test_a_team_counts_only_its_own_models(settings):
    settings.INFERENCE_REQUIRE_TOKEN = True
    expected = _registry(10)
    alice = person("alice", "ml")
    api = Client(HTTP_AUTHORIZATION=f"Bearer {accounts.token_create(user=alice, name='script')[1]}")
    page = api.get("/api/models/?limit=2").json()
    mine = [name for name, team, _ in expected if team == "ml"]
    assert page["count"] == len(mine) and [m["name"] for m in page["results"]] == mine[:2]
    assert api.get("/api/models/?team=vision").json() == {"count": 0, "next": None, "previous": None, "results": []}


# -- the web UI's models list ----------------------------------------------------
@pytest.fixture
def browser():
    person("alice", "ml")
    client = Client()
    assert client.login(username="alice", password=PASSWORD)
    return client


def _rows(response) -> list[str]:
    assert response.status_code == 200
    return re.findall(r'<tr data-model="([^"]+)"', response.content.decode())


def test_the_models_page_pages_filters_and_sorts(browser):
    expected = _registry(120)
    names = [name for name, _, _ in expected]
    first = browser.get("/models/")
    assert _rows(first) == names[:50]
    assert "page 1 of 3" in first.content.decode() and "120 models" in first.content.decode()
    assert _rows(browser.get("/models/?page=3")) == names[100:]
    assert _rows(browser.get("/models/?page=99")) == names[100:]  # past the end: the last page
    failed_vision = [n for n, t, s in expected if t == "vision" and s == STATES.FAILED]
    page = browser.get("/models/?team=vision&state=FAILED")
    assert _rows(page) == failed_vision and f"{len(failed_vision)} models" in page.content.decode()
    assert _rows(browser.get("/models/?name=m11")) == [n for n in names if "m11" in n]
    descending = browser.get("/models/?order=-name&page=2")
    assert _rows(descending) == sorted(names, reverse=True)[50:100]
    # The page links keep the filters; the name header flips the order.
    html = browser.get("/models/?state=READY&order=name").content.decode()  # 80 models: two pages
    assert re.search(r'rel="next" href="\?[^"]*state=READY[^"]*page=2"', html)
    assert re.search(r'data-sort="name" href="\?[^"]*order=-name', html)


def test_the_models_page_refuses_an_unknown_order(browser):
    response = browser.get("/models/?order=bogus")
    assert response.status_code == 400 and "unknown order &#x27;bogus&#x27;" in response.content.decode()
