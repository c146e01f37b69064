"""Triton's extensions beside inference, over the data plane: the model
repository (:mod:`.repository`), model configuration (:mod:`.configuration`),
statistics (:mod:`.statistics`), system and CUDA shared memory
(:mod:`.shared_memory`), trace and logging settings (:mod:`.settings`).

Each function takes the process's :class:`~inference.dataplane.DataPlane`
first (its registry, executor, statistics and regions) and raises only
protocol errors; the REST and gRPC adapters make one call per endpoint and
encode what it returns. Calls that change state need a credential and are
audited with their actor.

Spec: https://github.com/triton-inference-server/server/blob/main/docs/protocol/extension_<name>.md
"""

from __future__ import annotations

from inference.ports import container


def follow_scopes(plane) -> None:
    """Bring the registry (and the token scopes, a registry listener) up to
    date before a credential is checked: reading ``registry.models`` follows
    the change beacon."""
    plane.registry.models  # noqa: B018


def audit(caller, action: str, model_name: str, **detail) -> None:
    """Record ``action`` by ``caller.actor`` in the installed audit log (none: nothing)."""
    if container.audit_log is not None:
        container.audit_log.record(caller.actor, action, model_name, **detail)
