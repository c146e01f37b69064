"""Keyset pages of the management API's model list (``after=<model name>``)
and the cap of ``limit``: every order walked forwards through ``next`` and
backwards through ``previous``, against the order computed here in Python
(nulls first by team, last by -team; names break ties)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from urllib.parse import parse_qs, urlsplit

import pytest
from django.test import Client

from models_store.accounts import services as accounts
from models_store.models import ModelVersion, RegisteredModel, Team
from models_store.web.pagination import MAX_LIMIT
from tests.support.store import person

pytestmark = [pytest.mark.db, pytest.mark.django_db(transaction=True)]

STATES = ModelVersion.State
START = datetime(2026, 1, 1, tzinfo=UTC)


def _registry(count: int) -> list[dict]:
    """``count`` models k000...: teams ml, vision and none (operator-owned) in
    turn, every third version FAILED, updated at one of seven instants (ties)."""
    teams = {name: Team.objects.get_or_create(name=name)[0] for name in ("ml", "vision")}
    rows = []
    for i in range(count):
        team = (None, "ml", "vision")[i % 3]
        rows.append({
            "name": f"k{i:03d}", "team": team, "state": STATES.FAILED if i % 4 == 0 else STATES.READY,
            "updated": START + timedelta(minutes=(i * 5) % 7),
        })  # fmt: skip
    models = RegisteredModel.objects.bulk_create(
        RegisteredModel(name=r["name"], team=teams.get(r["team"])) for r in rows
    )
    ModelVersion.objects.bulk_create(
        ModelVersion(model=m, number=1, artifact="x", sha256=f"{m.pk:064x}", size=1, state=r["state"])
        for m, r in zip(models, rows, strict=True)
    )
    for r in rows:  # QuerySet.update leaves auto_now alone
        RegisteredModel.objects.filter(name=r["name"]).update(updated_at=r["updated"])
    return rows


ORDERS = {
    "name": lambda r: r["name"],
    "-name": None,  # the reverse of name
    "team": lambda r: (r["team"] is not None, r["team"] or "", r["name"]),
    "-team": lambda r: (r["team"] is None, _negated(r["team"] or ""), r["name"]),
    "updated": lambda r: (r["updated"], r["name"]),
    "-updated": lambda r: (-r["updated"].timestamp(), r["name"]),
}


def _negated(text: str) -> tuple:
    return (*(-ord(c) for c in text), 1)  # a prefix sorts after the longer name in descending order


def _expected(rows: list[dict], order: str, keep=lambda r: True) -> list[str]:
    kept = [r for r in rows if keep(r)]
    if order == "-name":
        return sorted((r["name"] for r in kept), reverse=True)
    return [r["name"] for r in sorted(kept, key=ORDERS[order])]


@pytest.fixture
def api():
    user = person("root", superuser=True)
    return Client(HTTP_AUTHORIZATION=f"Bearer {accounts.token_create(user=user, name='script')[1]}")


def _page(api, url: str) -> dict:
    response = api.get(url)
    assert response.status_code == 200, response.content
    return response.json()


def _walk(api, url: str, link: str) -> tuple[list[list[str]], list[dict], list[str]]:
    """The pages from ``url`` following ``link`` (next or previous): names, answers, URLs."""
    pages, answers, urls = [], [], []
    while url:
        page = _page(api, url)
        urls.append(url)
        answers.append(page)
        pages.append([m["name"] for m in page["results"]])
        url = page[link]
    return pages, answers, urls


@pytest.mark.parametrize("order", list(ORDERS))
@pytest.mark.parametrize(
    ("query", "keep"),
    [("", lambda r: True), ("&state=READY&team=ml", lambda r: r["team"] == "ml" and r["state"] == "READY")],
)
def test_keyset_pages_walk_every_order_both_ways(api, order, query, keep):
    rows = _registry(40)
    expected = _expected(rows, order, keep)
    first = expected[0]
    start = f"/api/models/?order={order}&limit=7{query}"
    head = _page(api, start)
    # The first page by offset, the rest by keyset from the next link on (after= the first page's last model).
    url = f"{start}&after={head['results'][-1]['name']}"
    pages, answers, _ = _walk(api, url, "next")
    walked = [m["name"] for m in head["results"]] + [name for page in pages for name in page]
    assert walked == expected and walked[0] == first
    assert all(a["count"] == len(expected) for a in answers)
    assert all(len(page) == 7 for page in pages[:-1]) and answers[-1]["next"] is None
    assert all("after=" in a["next"] and "offset" not in a["next"] for a in answers[:-1])
    # Backwards from the last page through previous: the same pages, in reverse, down to the first (no after).
    back, answered, urls = _walk(api, answers[-1]["previous"], "previous")
    assert [name for page in reversed(back) for name in page] + pages[-1] == expected
    assert back[-1] == [m["name"] for m in head["results"]] and answered[-1]["previous"] is None
    assert "after" not in parse_qs(urlsplit(urls[-1]).query)  # the first page's link: no cursor
    assert all(len(page) == 7 for page in back)


def test_a_keyset_page_from_a_model_the_filter_leaves_out(api):
    """The cursor marks a place in the order even when its model is not listed (filtered out, or changed since)."""
    rows = _registry(20)
    failed = [r["name"] for r in rows if r["state"] == STATES.FAILED]
    page = _page(api, f"/api/models/?state=READY&after={failed[1]}&limit=3")
    ready_after = [r["name"] for r in rows if r["state"] == STATES.READY and r["name"] > failed[1]]
    assert [m["name"] for m in page["results"]] == ready_after[:3]
    before = [r["name"] for r in rows if r["state"] == STATES.READY and r["name"] < failed[1]]
    assert page["count"] == 15 and len(before) <= 3 and "after" not in parse_qs(urlsplit(page["previous"]).query)


def test_keyset_page_at_the_end_and_its_previous_link(api):
    _registry(10)
    page = _page(api, "/api/models/?after=k009&limit=4")
    assert page["results"] == [] and page["next"] is None and page["count"] == 10
    previous = _page(api, page["previous"])
    assert [m["name"] for m in previous["results"]] == ["k006", "k007", "k008", "k009"]
    assert parse_qs(urlsplit(page["previous"]).query)["after"] == ["k005"]


def test_limit_is_capped_at_its_documented_maximum(api):
    _registry(MAX_LIMIT + 30)
    for url in (f"/api/models/?limit={MAX_LIMIT * 5}", f"/api/models/?limit={MAX_LIMIT + 1}&after=k000"):
        page = _page(api, url)
        assert len(page["results"]) == MAX_LIMIT and page["count"] == MAX_LIMIT + 30
        assert parse_qs(urlsplit(page["next"]).query)["limit"] == [str(MAX_LIMIT)]  # the next page: as capped
    page = _page(api, f"/api/models/?limit={MAX_LIMIT * 5}&offset={MAX_LIMIT}")
    assert [m["name"] for m in page["results"]] == [f"k{i:03d}" for i in range(MAX_LIMIT, MAX_LIMIT + 30)]


def test_an_after_naming_no_model_is_a_404(api):
    _registry(3)
    response = api.get("/api/models/?after=nobody")
    assert response.status_code == 404, response.content
    assert response.json() == {"error": "'after' names no item of this list: 'nobody'"}


def test_offset_skips_past_the_cursor_and_an_empty_after_is_the_first_page(api):
    _registry(12)
    page = _page(api, "/api/models/?after=k001&offset=5&limit=3")
    assert [m["name"] for m in page["results"]] == ["k007", "k008", "k009"]
    query = parse_qs(urlsplit(page["next"]).query)
    assert query["after"] == ["k009"] and "offset" not in query
    back = _page(api, page["previous"])
    assert [m["name"] for m in back["results"]] == ["k004", "k005", "k006"]
    first = _page(api, "/api/models/?after=&offset=0&limit=2")
    assert [m["name"] for m in first["results"]] == ["k000", "k001"]


@pytest.mark.parametrize(
    ("url", "words"),
    [
        ("/api/models/?after=k001&after=k002", "'after' is given 2 times"),
        ("/api/models/k001/versions/?after=1", "this list has no 'after'"),
        ("/api/models/?limit=0", "'limit' must be at least 1"),
    ],
)
def test_bad_keyset_parameters_are_a_400_naming_them(api, url, words):
    _registry(3)
    response = api.get(url)
    assert response.status_code == 400 and words in response.json()["error"], response.content
