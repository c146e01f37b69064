"""Triton's system and CUDA shared-memory extensions: the caller's regions
(https://github.com/triton-inference-server/server/blob/main/docs/protocol/extension_shared_memory.md).
Regions belong to their owner (:func:`inference.admission.auth.region_owner`) and are
registered for every process of the machine (inference/shared_memory/regions.py);
CUDA shared memory is not supported."""

from __future__ import annotations

from inference.admission import auth
from inference.extensions.common import audit, follow_scopes
from inference.protocol.errors import InvalidInput
from inference.serving.registry import ModelRegistry
from inference.shared_memory import regions as shm


class SharedMemoryExtension:
    """The callers' system shared-memory ``regions`` (the machine's); the
    ``registry`` is followed before a credential is checked."""

    def __init__(self, registry: ModelRegistry, regions: shm.RegionRegistry):
        self.registry = registry
        self.regions = regions

    def _caller(self, token: str | None):
        follow_scopes(self.registry)
        return auth.authorize_regions(token)

    def status(self, token: str | None, name: str | None = None) -> list[shm.Region]:
        """The caller's registered system shared-memory regions (``name``:
        that one; raises RegionNotFound). Raises Unauthenticated (no token
        while tokens are required, an unknown one)."""
        owner = self._caller(token)[0]
        return self.regions.status(owner, name)

    def register(self, token: str | None, name: str, key: str, offset: int, byte_size: int) -> None:
        """Register ``byte_size`` bytes of the shared-memory object ``key``
        from ``offset`` as the caller's region ``name``, for every process of
        the machine (audited). Raises Unauthenticated, InvalidInput (see
        :meth:`inference.shared_memory.regions.RegionRegistry.register`)."""
        owner, caller = self._caller(token)
        self.regions.register(owner, name, key, offset, byte_size)
        audit(caller, "shared_memory.register", "", name=name, key=key, offset=offset, byte_size=byte_size,
              owner=owner, by=caller.label)  # fmt: skip

    def unregister(self, token: str | None, name: str | None = None) -> None:
        """Unregister the caller's region ``name``, or all of its regions
        (``name`` empty); requests using one keep it until they finish
        (audited when something was unregistered). Raises Unauthenticated."""
        owner, caller = self._caller(token)
        gone = self.regions.unregister(owner, name)
        if gone:
            names = [r.name for r in gone]
            audit(caller, "shared_memory.unregister", "", names=names, owner=owner, by=caller.label)

    def cuda_status(self, token: str | None, name: str | None = None) -> list:
        """CUDA shared memory is not supported: no region (``name``: RegionNotFound)."""
        self._caller(token)
        if name:
            raise shm.RegionNotFound(f"Unable to find cuda shared memory region: '{name}'")
        return []

    def cuda_register(self, token: str | None, name: str) -> None:
        """Always InvalidInput: CUDA shared memory is not supported."""
        self._caller(token)
        raise InvalidInput(shm.CUDA_UNSUPPORTED)

    def cuda_unregister(self, token: str | None, name: str | None = None) -> None:
        """Nothing to unregister (CUDA shared memory is not supported)."""
        self._caller(token)
