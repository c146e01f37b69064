"""Teams, permissions, API tokens and the inference token checker (SQLite and PostgreSQL)."""

from __future__ import annotations

import dataclasses
import hashlib
import time

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from inference.protocol.errors import PermissionDenied, Unauthenticated
from models_store import errors
from models_store.accounts import authorizer as token_authorizer
from models_store.accounts import selectors as account_selectors
from models_store.accounts import services as accounts
from models_store.accounts import tokens
from models_store.models import ApiToken, AuditEvent, RegisteredModel, RegistryStamp, Team, TeamMembership
from models_store.registry.services import models as model_services
from tests.support.store import person

pytestmark = [pytest.mark.db, pytest.mark.django_db]


@pytest.fixture
def world():
    """Teams ml and vision, a model of each and an operator-owned one; alice
    (ml), bob (vision), carol (ml and vision), root (superuser, no team)."""
    people = {
        "alice": person("alice", "ml"),
        "bob": person("bob", "vision"),
        "carol": person("carol", "ml", "vision"),
        "root": person("root", superuser=True),
    }
    teams = {t.name: t for t in Team.objects.all()}
    RegisteredModel.objects.create(name="iris", team=teams["ml"])
    RegisteredModel.objects.create(name="resnet", team=teams["vision"])
    RegisteredModel.objects.create(name="legacy", team=None)
    return people, teams


def _model(name):
    return RegisteredModel.objects.get(name=name)


def test_change_rights_follow_team_membership(world):
    people, _teams = world
    rights = {
        (user, model): account_selectors.can_change_model(people[user], _model(model))
        for user in people
        for model in ("iris", "resnet", "legacy")
    }
    assert rights == {
        ("alice", "iris"): True, ("alice", "resnet"): False, ("alice", "legacy"): False,
        ("bob", "iris"): False, ("bob", "resnet"): True, ("bob", "legacy"): False,
        ("carol", "iris"): True, ("carol", "resnet"): True, ("carol", "legacy"): False,
        ("root", "iris"): True, ("root", "resnet"): True, ("root", "legacy"): True,
    }  # fmt: skip
    with pytest.raises(errors.AccessDenied, match="belongs to team ml; only its members may change it"):
        account_selectors.require_change_model(people["bob"], _model("iris"))
    with pytest.raises(errors.AccessDenied, match="operator-owned"):
        account_selectors.require_change_model(people["alice"], _model("legacy"))
    people["alice"].is_active = False
    assert not account_selectors.can_change_model(people["alice"], _model("iris"))


def test_a_team_token_limits_its_user(world):
    people, teams = world
    token, _ = accounts.token_create(user=people["carol"], name="ci", team=teams["vision"])
    assert account_selectors.can_change_model(people["carol"], _model("resnet"), token)
    assert not account_selectors.can_change_model(people["carol"], _model("iris"), token)
    with pytest.raises(errors.AccessDenied, match="limited to another team"):
        account_selectors.require_change_model(people["carol"], _model("iris"), token)
    with pytest.raises(errors.RegistryError, match="not a member of team vision"):
        accounts.token_create(user=people["alice"], name="x", team=teams["vision"])
    with pytest.raises(errors.RegistryError, match="give the token a name"):
        accounts.token_create(user=people["alice"], name="  ")


def test_tokens_are_stored_as_hashes_only(world):
    people, _ = world
    token, plain = accounts.token_create(user=people["alice"], name="nightly")
    assert plain.startswith("mh_") and len(plain) == 46
    row = ApiToken.objects.get(pk=token.pk)
    assert row.key_hash == hashlib.sha256(plain.encode()).hexdigest()
    assert row.prefix == plain[:10]
    assert plain not in str(list(ApiToken.objects.values()))  # nowhere in the row
    assert account_selectors.token_by_hash(tokens.hash_token(plain)) == token
    accounts.token_revoke(token=token, actor=people["alice"])
    assert account_selectors.token_by_hash(tokens.hash_token(plain)) is None
    actions = list(
        AuditEvent.objects.filter(action__startswith="token.").order_by("id").values_list("action", "actor_name")
    )
    assert actions == [("token.create", "alice"), ("token.revoke", "alice")]


def test_teams_for_user(world):
    people, _ = world
    assert list(account_selectors.teams_for_user(people["carol"]).values_list("name", flat=True)) == ["ml", "vision"]
    assert list(account_selectors.teams_for_user(people["alice"]).values_list("name", flat=True)) == ["ml"]
    assert list(account_selectors.teams_for_user(people["root"]).values_list("name", flat=True)) == ["ml", "vision"]


# -- the inference token checker ---------------------------------------------------
@pytest.fixture
def checker():
    return token_authorizer.InferenceTokenChecker(token_authorizer.TokenCache(ttl=3600))


def test_checker_scopes(world, checker):
    people, teams = world
    _, alice = accounts.token_create(user=people["alice"], name="a")
    _, carol_vision = accounts.token_create(user=people["carol"], name="cv", team=teams["vision"])
    _, root = accounts.token_create(user=people["root"], name="r")
    _, root_ml = accounts.token_create(user=people["root"], name="rm", team=teams["ml"])
    checker.cache.refresh()
    allowed = {}
    for label, token in (("alice", alice), ("carol_vision", carol_vision), ("root", root), ("root_ml", root_ml)):
        for model in ("iris", "resnet", "legacy", "nope"):
            try:
                checker(token, model)
                allowed[label, model] = True
            except PermissionDenied:
                allowed[label, model] = False
    assert allowed == {
        ("alice", "iris"): True, ("alice", "resnet"): False, ("alice", "legacy"): False, ("alice", "nope"): False,
        ("carol_vision", "iris"): False, ("carol_vision", "resnet"): True, ("carol_vision", "legacy"): False,
        ("carol_vision", "nope"): False,
        ("root", "iris"): True, ("root", "resnet"): True, ("root", "legacy"): True, ("root", "nope"): True,
        ("root_ml", "iris"): True, ("root_ml", "resnet"): False, ("root_ml", "legacy"): False,
        ("root_ml", "nope"): False,
    }  # fmt: skip


def test_checker_messages(world, checker):
    people, _ = world
    _, plain = accounts.token_create(user=people["alice"], name="a")
    checker.cache.refresh()
    with pytest.raises(Unauthenticated, match="inference requires an API token"):
        checker(None, "iris")
    with pytest.raises(Unauthenticated, match="invalid or revoked API token"):
        checker("mh_not-a-token", "iris")
    with pytest.raises(PermissionDenied) as denied:
        checker(plain, "resnet")
    assert str(denied.value) == "API token 'a' of alice may not call model 'resnet'; it may call models of team ml"
    with pytest.raises(PermissionDenied) as unknown:
        checker(plain, "does-not-exist")
    assert "may not call model 'does-not-exist'" in str(unknown.value)  # the same answer: no probing of names


def test_every_token_is_charged_to_a_team_or_to_its_users_own_bucket(world):
    """Rate limits: a token is charged to the model's team when it reaches
    it, else to its only team; with no team to charge (a user in no team, or
    in several and none owns the model, an operator on an operator-owned
    model) to its user's own bucket, never to nothing."""
    people, teams = world
    dave = person("dave")  # in no team
    plain = {
        "alice": accounts.token_create(user=people["alice"], name="a")[1],
        "carol": accounts.token_create(user=people["carol"], name="c")[1],
        "carol_vision": accounts.token_create(user=people["carol"], name="cv", team=teams["vision"])[1],
        "dave": accounts.token_create(user=dave, name="d")[1],
        "root": accounts.token_create(user=people["root"], name="r")[1],
    }
    authorizer = token_authorizer.StoreAuthorizer(token_authorizer.TokenCache(ttl=3600))
    charged = {}
    for who, token in plain.items():
        for model in ("iris", "resnet", "legacy"):
            principal = authorizer.principal(token, model)
            assert principal.token == tokens.hash_token(token)[:16] and not principal.anonymous
            charged[who, model] = principal.team or f"user {principal.user_name}"
            assert bool(principal.team) != bool(principal.user)  # exactly one of the two
    ids = {"carol": str(people["carol"].pk), "dave": str(dave.pk), "root": str(people["root"].pk)}
    assert authorizer.principal(plain["dave"], "iris").user == ids["dave"]
    assert charged == {
        ("alice", "iris"): "ml", ("alice", "resnet"): "ml", ("alice", "legacy"): "ml",
        ("carol", "iris"): "ml", ("carol", "resnet"): "vision", ("carol", "legacy"): "user carol",
        ("carol_vision", "iris"): "vision", ("carol_vision", "resnet"): "vision", ("carol_vision", "legacy"): "vision",
        ("dave", "iris"): "user dave", ("dave", "resnet"): "user dave", ("dave", "legacy"): "user dave",
        ("root", "iris"): "user root", ("root", "resnet"): "user root", ("root", "legacy"): "user root",
    }  # fmt: skip
    assert authorizer.principal(None, "iris").anonymous and authorizer.principal("mh_unknown", "iris").anonymous


def test_checker_answers_from_memory(world, checker, monkeypatch):
    monkeypatch.setattr(token_authorizer, "MISS_RELOAD_SECONDS", 3600)
    monkeypatch.setattr(token_authorizer, "MISS_STAMP_SECONDS", 3600)
    people, _ = world
    _, plain = accounts.token_create(user=people["alice"], name="a")
    checker.cache.refresh()
    with CaptureQueriesContext(connection) as queries:
        for _ in range(50):
            checker(plain, "iris")
            with pytest.raises(Unauthenticated):
                checker("mh_random-guess", "iris")
            with pytest.raises(PermissionDenied):
                checker(plain, "resnet")
    assert len(queries) == 1 and "counter" in queries[0]["sql"]  # one stamp read for the made-up tokens


def test_a_new_token_works_at_once_and_unknown_ones_reload_at_most_once_a_second(world, checker):
    people, _ = world
    checker.cache.refresh()
    _, plain = accounts.token_create(user=people["alice"], name="new")  # after the snapshot was taken
    checker.cache._scopes = dataclasses.replace(checker.cache._scopes, loaded_at=time.monotonic() - 5)
    with CaptureQueriesContext(connection) as queries:
        checker(plain, "iris")
    assert len(queries) == 5  # one reload: the stamp and four queries
    checker.cache._scopes = dataclasses.replace(checker.cache._scopes, loaded_at=time.monotonic() - 5)
    with CaptureQueriesContext(connection) as queries:
        with pytest.raises(Unauthenticated):
            checker("mh_made-up-after-a-second", "iris")
    assert len(queries) == 5  # the reload, and no stamp read after it (the reload read it)
    with CaptureQueriesContext(connection) as queries:
        for _ in range(20):
            with pytest.raises(Unauthenticated):
                checker("mh_made-up", "iris")
    assert len(queries) <= 1  # the snapshot is younger than a second: one stamp read (per MISS_STAMP_SECONDS)


def test_a_token_created_within_a_second_of_a_reload_works_at_once(world, checker, monkeypatch):
    """Another process created the token after this one reloaded its scopes
    (for a made-up token, say) and before it noticed the change: the stamp
    moved, so the first call reloads; made-up tokens meanwhile cost one stamp
    read per MISS_STAMP_SECONDS, not a reload each."""
    monkeypatch.setattr(token_authorizer, "MISS_STAMP_SECONDS", 3600)
    people, _ = world
    checker.cache.refresh()  # loaded a moment ago
    with CaptureQueriesContext(connection) as queries:
        for _ in range(20):
            with pytest.raises(Unauthenticated):
                checker("mh_made-up", "iris")
    assert len(queries) == 1  # the stamp, which did not move
    _, plain = accounts.token_create(user=people["alice"], name="new")  # no listener here: as if elsewhere
    monkeypatch.setattr(token_authorizer, "MISS_STAMP_SECONDS", 0)
    with CaptureQueriesContext(connection) as queries:
        checker(plain, "iris")
        checker(plain, "iris")
    assert len(queries) == 6  # the stamp, then one reload (five queries); the second call answers from memory
    with pytest.raises(PermissionDenied):
        checker(plain, "resnet")  # known now, and held to its scope


def test_a_model_created_after_the_snapshot_is_callable_at_once(world, checker):
    """A model the snapshot does not know costs one stamp read; when the
    stamp moved (another process created it), the scopes reload at once."""
    people, teams = world
    _, plain = accounts.token_create(user=people["alice"], name="a")
    checker.cache.refresh()
    with CaptureQueriesContext(connection) as queries:
        with pytest.raises(PermissionDenied):
            checker(plain, "fresh")
    assert len(queries) == 1  # the stamp, which did not move
    model_services.model_create(
        name="fresh", team=teams["ml"], actor=people["alice"]
    )  # no listener here: as if in another process
    with CaptureQueriesContext(connection) as queries:
        checker(plain, "fresh")
        checker(plain, "fresh")
    assert len(queries) == 6  # the stamp, then one reload (five queries); the second call answers from memory
    model_services.model_create(name="elsewhere", team=teams["vision"], actor=people["root"])
    with pytest.raises(PermissionDenied, match="may not call model 'elsewhere'"):
        checker(plain, "elsewhere")  # reloaded, and still not alice's team


def test_checker_follows_revocation_membership_and_deactivation(world, checker):
    people, teams = world
    token, plain = accounts.token_create(user=people["alice"], name="a")
    checker.cache.refresh()
    checker(plain, "iris")
    TeamMembership.objects.create(team=teams["vision"], user=people["alice"])
    checker.cache.on_registry_change()  # what the registry poller calls when the stamp moved
    checker(plain, "resnet")
    accounts.token_revoke(token=token, actor=people["alice"])
    checker(plain, "iris")  # the snapshot is unchanged until the stamp is seen to move
    checker.cache.on_registry_change()
    with pytest.raises(Unauthenticated):
        checker(plain, "iris")
    _, second = accounts.token_create(user=people["alice"], name="b")
    people["alice"].is_active = False
    people["alice"].save()
    checker.cache.on_registry_change()
    with pytest.raises(Unauthenticated):
        checker(second, "iris")


def test_access_changes_bump_the_stamp(world):
    people, teams = world
    counter = lambda: RegistryStamp.objects.get(pk=1).counter  # noqa: E731
    for change in (
        lambda: accounts.token_create(user=people["bob"], name="t"),
        lambda: TeamMembership.objects.create(team=teams["ml"], user=people["bob"]),
        lambda: TeamMembership.objects.filter(team=teams["ml"], user=people["bob"]).delete(),
        lambda: people["bob"].save(),
    ):
        before = counter()
        change()
        assert counter() > before
    before = counter()
    people["bob"].save(update_fields=["last_login"])  # a sign-in changes no rights
    assert counter() == before


def test_cache_ttl_reloads_and_keeps_the_old_snapshot_on_errors(world):
    calls = []

    def loader():
        calls.append(1)
        if len(calls) == 3:
            raise RuntimeError("database down")
        return token_authorizer.Scopes({}, {}, {}, loaded_at=-1e9 if len(calls) < 4 else 1e18)

    cache = token_authorizer.TokenCache(loader, ttl=10)
    first = cache.get()
    second = cache.get()  # expired (loaded_at far in the past): reloaded
    assert len(calls) == 2 and second is not first
    assert cache.get() is second  # the reload failed: the previous snapshot answers
    fresh = cache.get()
    assert len(calls) == 4 and cache.get() is fresh  # not expired: no reload
