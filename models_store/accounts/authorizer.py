"""The inference token checker: who may call, load, unload which model.

:class:`StoreAuthorizer` is the serving side's authorizer
(:class:`inference.ports.Authorizer`, installed by the composition root):
the inference transports ask it on every request while
``INFERENCE_REQUIRE_TOKEN`` is on, and on every repository load/unload. It
answers from memory: a
:class:`TokenCache` holds every active token's scope and every model's team,
rebuilt (off the request path) each time the registry's change stamp moves
(token and membership changes bump it), and at the latest every
``INFERENCE_TOKEN_CACHE_SECONDS`` as a backstop for changes made behind the
services' back. A token the snapshot does not know (perhaps created a moment
ago through another process, before this one noticed) reloads the scopes
when the snapshot is over a second old, else when the registry's change
stamp moved since it was loaded; made-up tokens cost at most one stamp read
per ``MISS_STAMP_SECONDS`` and one reload per second, per process. A model the
snapshot does not know costs one stamp read: if the registry changed since
the snapshot was loaded (the model was uploaded a moment ago through another
process), the scopes are reloaded at once, so a new model is callable with a
token as soon as its upload has answered.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from django.conf import settings

from inference.observability.outage import DependencyWatch
from inference.ports import ANONYMOUS, Caller, Principal
from inference.protocol.errors import DependencyUnavailable, PermissionDenied, Unauthenticated
from models_store import outages
from models_store.accounts import permissions, selectors
from models_store.accounts.tokens import hash_token
from models_store.registry import selectors as registry
from models_store.stamp import stamp_get

logger = logging.getLogger(__name__)

#: A token the checker does not know reloads the scopes at most this often (per process), in seconds.
MISS_RELOAD_SECONDS = 1.0
#: ... and, within that second, reads the registry's change stamp at most this often (per process), in seconds:
#: a token created since the snapshot (the stamp moved) is known at once; made-up ones cost at most these reads.
MISS_STAMP_SECONDS = 0.05

#: A token's stored form, computed once per token a process sees (the checks of
#: one request ask for it three or four times: inference, principal, regions).
token_key = functools.lru_cache(maxsize=4096)(hash_token)


def _known(cache, token: str) -> tuple[Scopes, TokenScope | None, str]:
    """(the scopes, ``token``'s scope or None, its key): from the current
    snapshot; for a token it does not know, perhaps created a moment ago,
    reloaded when older than MISS_RELOAD_SECONDS, else when the registry
    changed since (a stamp read, at most every MISS_STAMP_SECONDS per
    process)."""
    key = token_key(token)
    scopes = cache.get()
    if key not in scopes.tokens:
        known = scopes
        scopes = cache.reload_if_older(MISS_RELOAD_SECONDS)
        if scopes is known:  # not reloaded just now (which read the stamp): has the registry changed since?
            scopes = cache.catch_up_every(MISS_STAMP_SECONDS)
    return scopes, scopes.tokens.get(key), key


@dataclass(frozen=True)
class TokenScope:
    """Which models one token may call: every model, or those of ``team_ids``;
    until ``expires_at`` (seconds since the epoch; None: no expiry)."""

    label: str  # e.g. "API token 'ci' of alice"
    all_models: bool
    team_ids: frozenset[int]
    user_id: int | None = None
    expires_at: float | None = None
    user_name: str = ""
    control_team_ids: frozenset[int] = frozenset()  # teams whose models it may load and unload

    def expired(self, now: float) -> bool:
        return self.expires_at is not None and now >= self.expires_at

    def allows(self, team_id: int | None) -> bool:
        """Whether the token may call models of team ``team_id`` (``model.call``)."""
        return self.all_models or (team_id is not None and team_id in self.team_ids)

    def may_control(self, team_id: int | None) -> bool:
        """Whether the token may load and unload models of team ``team_id`` (``model.load``)."""
        return self.all_models or (team_id is not None and team_id in self.control_team_ids)


@dataclass(frozen=True)
class Scopes:
    """Everything the checker needs, loaded in one go."""

    tokens: dict[str, TokenScope]  # key hash -> scope
    model_teams: dict[str, int | None]  # model name -> team id (None: operator-owned)
    team_names: dict[int, str]
    loaded_at: float
    stamp: int = -1  # the registry's change stamp read before loading
    team_quotas: dict = field(default_factory=dict)  # team id -> Principal.team_quota pairs

    def describe(self, scope: TokenScope) -> str:
        if scope.all_models:
            return "every model"
        names = sorted(self.team_names.get(t, str(t)) for t in scope.team_ids)
        return f"models of team {', '.join(names)}" if names else "no model (its user is in no team)"


def load_scopes() -> Scopes:
    """Read token scopes and model teams from the database (six queries).
    A token reaches the models of the teams where its level
    (:mod:`models_store.accounts.permissions`: its user's role, capped by the
    token's team and role) allows ``model.call``; it loads and unloads those
    where it allows ``model.load``; an operator's token with neither team nor
    role reaches every model."""
    stamp = stamp_get()  # first: a change made while loading is seen later
    access = selectors.inference_access()
    tokens = {}
    call, control = permissions.needs("model.call"), permissions.needs("model.load")
    for token in access.tokens:
        if token.user.is_superuser and token.team_id is None and not token.role:
            allowed = controlled = frozenset()
            all_models = True
        else:
            user_levels = access.levels.get(token.user_id, {})
            if token.user.is_superuser:  # an operator's token limited to a team or a role
                user_levels = {team: permissions.Level.OPERATOR for team in access.team_names}
            levels = {
                team: permissions.cap(base, token.team_id, token.role, team) for team, base in user_levels.items()
            }
            allowed = frozenset(team for team, level in levels.items() if level >= call)
            controlled = frozenset(team for team, level in levels.items() if level >= control)
            all_models = False
        user_name = token.user.get_username()
        label = f"API token '{token.name}' of {user_name}"
        expires_at = token.expires_at.timestamp() if token.expires_at else None
        tokens[token.key_hash] = TokenScope(
            label, all_models, allowed, token.user_id, expires_at, user_name, controlled
        )
    quotas = {}
    for team_id, (rate, burst, in_flight) in access.team_limits.items():
        pairs = (("rate", rate), ("burst", burst), ("in_flight", in_flight))
        quotas[team_id] = tuple((name, value) for name, value in pairs if value is not None)
    return Scopes(tokens, registry.model_teams(), access.team_names, time.monotonic(), stamp, quotas)


def _registry_stamp() -> int:
    return stamp_get()


class TokenCache:
    """The current :class:`Scopes`, reloaded by :meth:`refresh` (on registry
    changes) or when older than ``ttl`` seconds. Requests never wait for a
    reload another thread is doing once a first snapshot exists."""

    def __init__(
        self, loader: Callable[[], Scopes] = load_scopes, ttl: float = 30.0, stamp: Callable[[], int] = _registry_stamp
    ):
        self._loader = loader
        self._stamp_reader = stamp
        self._ttl = ttl
        self._scopes: Scopes | None = None
        self._lock = threading.Lock()
        self._stamp_read_at = float("-inf")  # time.monotonic() of the last stamp read for a miss
        self.database = DependencyWatch("the database (API token scopes)", logger)

    def refresh(self) -> Scopes:
        with self._lock:
            self._scopes = self._loader()
            return self._scopes

    def on_registry_change(self, *_args) -> None:
        """Registry listener: reload now, in the thread that noticed the change."""
        try:
            self.refresh()
        except Exception as exc:
            self.database.failed(exc, "token scopes are reloaded on the next request")
            self._scopes = None
        else:
            self.database.ok()

    def get(self) -> Scopes:
        """The current scopes, reloaded first when older than the TTL."""
        if self._scopes is None:
            return self.refresh()
        return self.reload_if_older(self._ttl)

    def answers_now(self, key: str, model_name: str) -> bool:
        """Whether a check of the token hashed ``key`` for ``model_name``
        answers from the snapshot without reloading it (see :meth:`get`)."""
        scopes = self._scopes
        if scopes is None or time.monotonic() - scopes.loaded_at >= self._ttl:
            return False
        scope = scopes.tokens.get(key)
        return scope is not None and (scope.all_models or model_name in scopes.model_teams)

    def reload_if_older(self, seconds: float) -> Scopes:
        """Reload unless the snapshot is younger than ``seconds``. One thread
        reloads; the others keep answering from the current snapshot, which
        also stays when the reload fails. The checker calls it with a short
        age for a token it does not know (perhaps created a moment ago): at
        most one reload per that many seconds and process, so made-up tokens
        cannot turn into one query each."""
        scopes = self._scopes or self.refresh()
        if time.monotonic() - scopes.loaded_at >= seconds and self._lock.acquire(blocking=False):
            try:
                self._scopes = scopes = self._loader()
            except Exception as exc:
                self.database.failed(exc, "answering from the token scopes loaded before")
            else:
                self.database.ok()
            finally:
                self._lock.release()
        return scopes

    def catch_up_every(self, seconds: float) -> Scopes:
        """:meth:`catch_up` unless it ran for this reason less than ``seconds``
        ago (then the current scopes): what a token the snapshot does not know
        costs within a second of the last reload."""
        now = time.monotonic()
        if now - self._stamp_read_at < seconds:
            return self._scopes or self.refresh()
        self._stamp_read_at = now
        return self.catch_up()

    def catch_up(self) -> Scopes:
        """The scopes, reloaded first if the registry's change stamp moved since
        they were loaded (one stamp read). The current scopes answer when the
        stamp cannot be read."""
        scopes = self._scopes or self.refresh()
        try:
            moved = self._stamp_reader() != scopes.stamp
        except Exception as exc:
            self.database.failed(exc, "answering from the token scopes loaded before")
            return scopes
        if not moved:
            return scopes
        with self._lock:
            if self._scopes is scopes:  # no other thread reloaded meanwhile
                self._scopes = self._loader()
            return self._scopes


class InferenceTokenChecker:
    """``(token, model_name) -> None``; raises Unauthenticated (no, unknown,
    revoked or expired token; an inactive user) or PermissionDenied (the token may
    not call this model, or the model does not exist: the two answers are the
    same, so a team token cannot probe other teams' model names; a token
    that reaches every model gets the data plane's 404 instead)."""

    def __init__(self, cache: TokenCache):
        self.cache = cache

    def __call__(self, token: str | None, model_name: str) -> None:
        if not token:
            raise Unauthenticated(
                "inference requires an API token: send 'Authorization: Bearer <token>' "
                "(gRPC: metadata 'authorization: Bearer <token>')"
            )
        scopes, scope, key = _known(self.cache, token)
        if scope is not None and not scope.all_models and model_name not in scopes.model_teams:
            scopes = self.cache.catch_up()  # the model was perhaps uploaded a moment ago
            scope = scopes.tokens.get(key)
        if scope is None:
            raise Unauthenticated("invalid or revoked API token")
        if scope.expired(time.time()):  # no reload needed: the snapshot holds the expiry
            raise Unauthenticated(f"{scope.label} expired")
        if scope.all_models:
            return
        if model_name not in scopes.model_teams or not scope.allows(scopes.model_teams[model_name]):
            raise PermissionDenied(
                f"{scope.label} may not call model '{model_name}'; it may call {scopes.describe(scope)}"
            )


class StoreAuthorizer:
    """:class:`inference.ports.Authorizer` over API tokens (one
    :class:`TokenCache`, which the composition root also makes a registry
    listener)."""

    def __init__(self, cache: TokenCache):
        self.cache = cache
        self.check_inference = InferenceTokenChecker(cache)

    def answers_now(self, token: str, model_name: str) -> bool:
        """Whether the checks of ``token`` for ``model_name`` answer from the
        current snapshot (loaded, younger than its TTL, knows the token and
        the model): no query to wait for."""
        return self.cache.answers_now(token_key(token), model_name)

    def _scope(self, token: str | None, what: str) -> tuple[Scopes, TokenScope]:
        if not token:
            raise Unauthenticated(
                f"{what} requires an API token: send 'Authorization: Bearer <token>' "
                "(gRPC: metadata 'authorization: Bearer <token>')"
            )
        scopes, scope, _key = _known(self.cache, token)
        if scope is None:
            raise Unauthenticated("invalid or revoked API token")
        if scope.expired(time.time()):
            raise Unauthenticated(f"{scope.label} expired")
        return scopes, scope

    def check_control(self, token: str | None, model_name: str) -> Caller:
        """Loading and unloading a model (Triton's repository extension) needs
        a token whose level in the model's team allows ``model.load``
        (maintainer), or an operator's (every model); always,
        whether or not inference needs tokens. The audit log names its user."""
        scopes, scope = self._scope(token, "loading or unloading a model")
        if not scope.all_models:
            if model_name not in scopes.model_teams:
                scopes = self.cache.catch_up()
                if model_name not in scopes.model_teams and self.cache.database.down:
                    raise DependencyUnavailable(
                        f"the database is unavailable: cannot tell whether {scope.label} may change model "
                        f"'{model_name}'; try again in {outages.RETRY_AFTER_SECONDS} s",
                        outages.RETRY_AFTER_SECONDS,
                    )
            team = scopes.model_teams.get(model_name)
            if model_name not in scopes.model_teams or not scope.may_control(team):
                raise PermissionDenied(
                    f"{scope.label} may not load or unload model '{model_name}'; it may change {scopes.describe(scope)}"
                )
        with outages.as_unavailable():
            return Caller(scope.label, selectors.user_get(scope.user_id))

    def visible_models(self, token: str | None):
        """With tokens required, the models of the token's teams (all for an
        operator's unlimited token); None (everything) otherwise."""
        if not settings.INFERENCE_REQUIRE_TOKEN:
            return None
        scopes, scope = self._scope(token, "listing models")
        if scope.all_models:
            return None
        teams = scopes.model_teams
        return lambda name: name in teams and scope.allows(teams[name])

    def check_operator(self, token: str | None) -> Caller:
        """Trace and log settings (Triton's trace and logging extensions) need
        an operator's token: a superuser's, not limited to a team."""
        _scopes, scope = self._scope(token, "changing trace or log settings")
        if not scope.all_models:
            raise PermissionDenied(f"{scope.label} is not an operator's token (a superuser's, not limited to a team)")
        return Caller(scope.label, selectors.user_get(scope.user_id))

    @staticmethod
    def _owner(scopes: Scopes, scope: TokenScope) -> str:
        if not scope.all_models and len(scope.team_ids) == 1:
            (team_id,) = scope.team_ids
            return f"team:{scopes.team_names.get(team_id, team_id)}"
        return f"user:{scope.user_id}"

    def region_owner(self, token: str) -> str:
        """Who owns the caller's shared-memory regions (Triton's system
        shared-memory extension): the token's team when it has exactly one,
        else its user; "" for an unknown, revoked or expired token."""
        scopes, scope, _key = _known(self.cache, token)
        if scope is None or scope.expired(time.time()):
            return ""
        return self._owner(scopes, scope)

    def check_regions(self, token: str) -> tuple[str, Caller]:
        """(owner, caller) to register, list or unregister shared-memory
        regions; the audit log names the token's user."""
        scopes, scope = self._scope(token, "shared memory")
        return self._owner(scopes, scope), Caller(scope.label, selectors.user_get(scope.user_id))

    def principal(self, token: str | None, model_name: str) -> Principal:
        """Who a call is charged to for rate limits: the token and its team
        (the model's team when the token reaches it, else the token's only
        team); a token with no team to charge (its user is in no team, or in
        several and none owns the model; an operator's token on an
        operator-owned model) is charged to its user's own bucket instead;
        anonymous for no, an unknown, revoked or expired token. Answers from
        memory like the inference check."""
        if not token:
            return ANONYMOUS
        scopes, scope, key = _known(self.cache, token)
        if scope is None or scope.expired(time.time()):
            return ANONYMOUS
        team_id = scopes.model_teams.get(model_name)
        if team_id is None or team_id not in scope.team_ids:
            team_id = next(iter(scope.team_ids)) if len(scope.team_ids) == 1 else None
        if team_id is None:
            return Principal("", key[:16], user=str(scope.user_id), user_name=scope.user_name)
        return Principal(scopes.team_names.get(team_id, str(team_id)), key[:16], scopes.team_quotas.get(team_id, ()))
