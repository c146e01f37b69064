"""Triton's model repository extension: the index, load and unload
(https://github.com/triton-inference-server/server/blob/main/docs/protocol/extension_model_repository.md).
Loading and unloading change every server process before they return."""

from __future__ import annotations

import threading
from dataclasses import dataclass

from inference.admission import auth
from inference.extensions.common import follow_scopes
from inference.protocol import triton_texts
from inference.protocol.errors import InvalidInput, ModelNotFound
from inference.serving.registry import ModelRegistry


@dataclass(frozen=True, slots=True)
class IndexEntry:
    """One row of the model repository index (Triton's ``ModelIndex``)."""

    name: str
    version: str
    state: str  # READY, UNAVAILABLE, LOADING
    reason: str


def _entries(models: dict):
    """The index entries of a snapshot (model name -> entry), in order."""
    for name in sorted(models):
        model = models[name]
        for number in sorted(model.versions):
            version = model.versions[number]
            if version.serving:
                state, reason = "READY", ""
            elif version.state in ("UPLOADED", "VALIDATING", "LOADING"):
                state, reason = "LOADING", version.state.lower()
            else:
                state, reason = "UNAVAILABLE", version.reason or version.state
            yield IndexEntry(name, version.version, state, reason)


class RepositoryExtension:
    """The model repository: its index, load and unload, over the ``registry``."""

    def __init__(self, registry: ModelRegistry):
        self.registry = registry
        self._built: tuple = (None, (), ())  # (the snapshot, its index, its READY entries)
        self._lock = threading.Lock()

    def index(self, ready_only: bool = False, token: str | None = None) -> tuple[IndexEntry, ...] | list[IndexEntry]:
        """Every model version with its state (READY, UNAVAILABLE, LOADING)
        and the reason it does not serve, by model name and version number;
        only READY ones with ``ready_only``. While tokens are required, only
        the models the token may see. Built once per registry snapshot: the
        same tuple answers every caller who may see every model until the
        registry changes (adapters may cache its encoding by its identity)."""
        models = self.registry.models  # first: token scopes follow the registry
        visible = auth.visible_models(token)
        entries = self._index(models)[1 if ready_only else 0]
        if visible is None:
            return entries
        return [entry for entry in entries if visible(entry.name)]

    def _index(self, models: dict) -> tuple[tuple[IndexEntry, ...], tuple[IndexEntry, ...]]:
        built = self._built
        if built[0] is models:
            return built[1], built[2]
        with self._lock:
            if self._built[0] is not models:
                everything = tuple(_entries(models))
                self._built = (models, everything, tuple(e for e in everything if e.state == "READY"))
            return self._built[1], self._built[2]

    def load(self, name: str, parameters: dict | None = None, token: str | None = None) -> None:
        """Load ``name`` in every server process (its policy's READY versions
        serve again) before returning. Parameters: ``config`` (a JSON string:
        the model's whole Triton configuration, replacing its own as Triton's
        load does; the registry source checks and applies it). Needs a token
        of the model's team or an operator's (audited as its user). Raises
        InvalidInput first for a name Triton refuses (empty, only whitespace,
        ``..`` or a ``/``: Triton's texts); Unauthenticated,
        PermissionDenied; ModelNotFound, InvalidInput with Triton's "failed to
        load '<name>', " before the reason."""
        triton_texts.check_model_name(name)
        follow_scopes(self.registry)
        registry = self.registry
        caller = auth.authorize_control(token, name)
        try:
            registry.model(name)
            for key, value in (parameters or {}).items():
                if key == "config":
                    if not isinstance(value, str):
                        raise InvalidInput("Config parameter 'config' must have string type for its value")
                    registry.set_config(name, value, actor=caller.actor)
                elif key.startswith("file:"):
                    raise InvalidInput("file: parameters are not supported; upload new versions to the model store")
                else:
                    raise InvalidInput(f"Unrecognized load parameter '{key}'")
        except (ModelNotFound, InvalidInput) as exc:
            raise type(exc)(triton_texts.load_failed(name, exc.message)) from None
        registry.set_loaded(name, True, caller.actor)

    def unload(self, name: str, parameters: dict | None = None, token: str | None = None) -> None:
        """Unload ``name`` in every server process before returning; stored
        versions stay. ``unload_dependents: true`` on an ensemble also unloads
        the models it runs (those no other loaded ensemble runs), as Triton does;
        a model that a READY ensemble runs is not unloaded (InUse, HTTP 409,
        naming the ensemble: unload the ensemble first). Needs a token like :func:`load`; an unknown
        model is NOT_FOUND only for callers that could change it (operators).
        Raises Unauthenticated, PermissionDenied, ModelNotFound, InvalidInput, InUse."""
        follow_scopes(self.registry)
        caller = auth.authorize_control(token, name)
        self.registry.model(name)
        dependents = False
        for key, value in (parameters or {}).items():
            if key != "unload_dependents":
                raise InvalidInput(f"unrecognized unload parameter '{key}'")
            if not isinstance(value, bool):
                raise InvalidInput("parameter 'unload_dependents' must be a boolean")
            dependents = value
        self.registry.set_loaded(name, False, caller.actor, dependents)
