"""Admission of a caller to run inferences of one model: its token checked
(:mod:`inference.admission.auth`), its call counted in its rate limits and in-flight
caps (:mod:`inference.admission.ratelimit`). :meth:`inference.dataplane.DataPlane.infer`
takes the :class:`Admission`, so that no adapter runs an inference (or
decodes a request's tensors) before the caller is admitted.

Errors: Unauthenticated (HTTP 401, gRPC UNAUTHENTICATED), PermissionDenied
(403, PERMISSION_DENIED), RateLimited (429 with Retry-After,
RESOURCE_EXHAUSTED).
"""

from __future__ import annotations

import asyncio

from inference.admission import auth, fair_share, ratelimit
from inference.protocol.errors import PermissionDenied
from inference.protocol.types import InferenceRequest
from inference.runtime.sequences import policy as sequences


class Admission:
    """A caller admitted to run an inference of ``model_name``. Leaving its
    ``with`` block (``async with`` on an event loop) frees its in-flight
    slots. ``owner``: whose sequences its requests continue
    (:func:`inference.runtime.sequences.policy.owner_of`); ``regions``: whose
    shared-memory regions they may use (:func:`inference.admission.auth.region_owner`);
    ``flow``: the queue its requests wait in for model instances
    (:func:`inference.admission.fair_share.flow_of`); ``done``: called
    (no arguments) when its block is left (the data plane counts the
    requests under way in its process: shadow copies wait for none)."""

    __slots__ = ("_blocking", "_slots", "done", "flow", "model_name", "owner", "regions")

    def __init__(
        self, model_name: str, slots: ratelimit.Admission, blocking: bool, owner: str = "", regions: str = "",
        flow: str = fair_share.ANONYMOUS_FLOW,
    ):  # fmt: skip
        self.model_name = model_name
        self._slots = slots
        self._blocking = blocking  # releasing its slots talks to a shared store
        self.owner = owner
        self.regions = regions
        self.flow = flow
        self.done = None

    @property
    def limits(self) -> ratelimit.Admission:
        """The call's place in its rate limits (:meth:`inference.admission.ratelimit.Admission.charge`
        charges it more: an ensemble's further steps)."""
        return self._slots

    def __enter__(self) -> Admission:
        return self

    def __exit__(self, *exc) -> None:
        self._slots.release()
        if self.done is not None:
            self.done()

    async def __aenter__(self) -> Admission:
        return self

    async def __aexit__(self, *exc) -> None:
        if self._blocking and self._slots.holds:
            await asyncio.to_thread(self._slots.release)
        else:
            self._slots.release()
        if self.done is not None:
            self.done()

    def check(self, request: InferenceRequest) -> None:
        """Raise PermissionDenied unless ``request`` is for the admitted model."""
        if self.model_name != request.model_name:
            raise PermissionDenied(
                f"the caller was admitted to model '{self.model_name}', not to '{request.model_name}'"
            )


def admit(registry, limiter: ratelimit.RateLimiter, token: str | None, name: str) -> Admission:
    """Admit ``token``'s caller to ``name``: the token may run inference on it
    (a no-op while tokens are not required), then its rate limits and
    in-flight caps. ``registry``: the serving registry, read first so that
    the token scopes (a registry listener) follow its change beacon. Raises
    Unauthenticated, PermissionDenied, RateLimited."""
    registry.models  # noqa: B018  (follows the change beacon: token scopes are a registry listener)
    auth.authorize(token, name)
    principal = auth.principal(token, name)
    slots = limiter.admit(principal)
    owner = sequences.owner_of(principal)
    return Admission(name, slots, limiter.blocking, owner, auth.region_owner(token), fair_share.flow_of(principal))


def may_block(limiter: ratelimit.RateLimiter, token: str | None, name: str) -> bool:
    """Whether :func:`admit` may block (a token the authorizer cannot answer
    for from memory, a shared rate limit to ask): an event loop then admits
    in a thread. A known token's caller is admitted inline, so that admitting
    a flood of calls is not a queue of thread hand-offs in front of everyone
    else's."""
    if token is not None:
        if not auth.answers_now(token, name):
            return True
        return limiter.blocking and limiter.blocks_for(auth.principal(token, name))
    return auth.tokens_required() or limiter.blocks_for(auth.ANONYMOUS)
