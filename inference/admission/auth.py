"""Access control of the serving side, shared by every transport.

Adapters pass the bearer token they received (REST ``Authorization: Bearer
<token>``; gRPC metadata key ``authorization`` with the same value) to the
DataPlane, which asks the installed :class:`~inference.ports.Authorizer`
(the model store's API tokens):

- inference: only while ``INFERENCE_REQUIRE_TOKEN`` is on;
- loading and unloading models (Triton's repository extension): always, a
  token of the model's team or an operator's;
- listing models (repository index, statistics): filtered to the token's
  teams while ``INFERENCE_REQUIRE_TOKEN`` is on;
- rate limits: who a call is charged to (:func:`principal`: the token's
  team, or its user's own bucket when it has no team to charge, and the
  token; or anonymous), whether or not tokens are required;
- trace and log settings (Triton's trace and logging extensions): always an
  operator's token (:func:`authorize_operator`);
- shared-memory regions (Triton's system shared-memory extension): owned by
  the caller's team (:func:`region_owner`); registering, listing and
  unregistering them needs a token, or none where anonymous inference is
  allowed (:func:`authorize_regions`).

Without an installed authorizer every check that needs one refuses.
"""

from __future__ import annotations

from django.conf import settings

from inference.ports import ANONYMOUS, ANONYMOUS_REGIONS, Caller, Principal, container
from inference.protocol.errors import Unauthenticated


def bearer_token(header: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` value, or None."""
    if not header:
        return None
    scheme, _, token = header.strip().partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


def tokens_required() -> bool:
    return settings.INFERENCE_REQUIRE_TOKEN


def _authorizer():
    if container.authorizer is None:
        raise Unauthenticated("this call requires an API token, but no authorizer is installed")
    return container.authorizer


def authorize(token: str | None, model_name: str) -> None:
    """Raise Unauthenticated / PermissionDenied unless ``token`` may call
    ``model_name``; a no-op while INFERENCE_REQUIRE_TOKEN is off."""
    if settings.INFERENCE_REQUIRE_TOKEN:
        _authorizer().check_inference(token, model_name)


def answers_now(token: str, model_name: str) -> bool:
    """Whether admitting ``token``'s call of ``model_name`` needs no query
    (the authorizer answers from memory), so an event loop may do it inline."""
    return container.authorizer is not None and container.authorizer.answers_now(token, model_name)


def authorize_control(token: str | None, model_name: str) -> Caller:
    """The caller if ``token`` may load/unload ``model_name``; raises
    Unauthenticated / PermissionDenied."""
    return _authorizer().check_control(token, model_name)


def visible_models(token: str | None):
    """A predicate on model names the caller may see listed, or None (all)."""
    if not settings.INFERENCE_REQUIRE_TOKEN:
        return None
    return _authorizer().visible_models(token)


def principal(token: str | None, model_name: str) -> Principal:
    """Who a call of ``model_name`` with ``token`` is charged to for rate
    limits: anonymous without a token, an installed authorizer, or a token
    it does not know."""
    if not token or container.authorizer is None:
        return ANONYMOUS
    return container.authorizer.principal(token, model_name)


def authorize_operator(token: str | None) -> Caller:
    """The caller if ``token`` is an operator's (a superuser's unlimited
    token); raises Unauthenticated / PermissionDenied."""
    return _authorizer().check_operator(token)


def region_owner(token: str | None) -> str:
    """Who owns the shared-memory regions a caller with ``token`` may use:
    ``team:<name>`` (a token of one team), ``user:<id>`` (any other token),
    :data:`~inference.ports.ANONYMOUS_REGIONS` without a token; "" (no
    region) for a token the authorizer does not know. Answers from memory."""
    if not token:
        return ANONYMOUS_REGIONS
    if container.authorizer is None:
        return ""
    return container.authorizer.region_owner(token)


def authorize_regions(token: str | None) -> tuple[str, Caller]:
    """(owner, caller) for registering, listing or unregistering shared-memory
    regions: a known token's owner (:func:`region_owner`), or the anonymous
    callers' while tokens are not required. Raises Unauthenticated."""
    if not token:
        if settings.INFERENCE_REQUIRE_TOKEN:
            raise Unauthenticated(
                "shared memory requires an API token: send 'Authorization: Bearer <token>' "
                "(gRPC: metadata 'authorization: Bearer <token>')"
            )
        return ANONYMOUS_REGIONS, Caller("anonymous caller")
    return _authorizer().check_regions(token)
