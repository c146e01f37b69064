"""Triton's model repository extension: the index, load and unload
(https://github.com/triton-inference-server/server/blob/main/docs/protocol/extension_model_repository.md).
Loading and unloading change every server process before they return;
the model control mode (``serve --model-control-mode``, Triton's) refuses
them in ``none`` and ``poll``, as Triton does."""

from __future__ import annotations

import base64
import binascii
import threading
from dataclasses import dataclass

from inference.admission import auth
from inference.extensions.common import follow_scopes
from inference.protocol import triton_texts
from inference.protocol.errors import InvalidInput, ModelControlDisabled, ModelNotFound
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


#: The model control modes in which the repository's load and unload are refused (Triton's).
CONTROL_REFUSED = ("none", "poll")
#: Triton's answer to a load or unload in those modes (core model_repository_manager.cc, LoadUnloadModel).
CONTROL_REFUSED_TEXT = "explicit model load / unload is not allowed if polling is enabled"


class EncodedIndex:
    """An adapter's encoding of the repository index (a JSON body, a
    protobuf message), made once per shared index: :meth:`encoded` answers
    ``encode(entries)``, kept while :meth:`RepositoryExtension.index` answers
    the same tuple (every caller who may see every model, until the registry
    changes); one caller's part of it (a list) is encoded each time."""

    __slots__ = ("_cached",)

    def __init__(self):
        self._cached: tuple = (None, None)  # (the shared index, its encoding): one attribute, read whole

    def encoded(self, entries, encode):
        cached = self._cached
        if cached[0] is entries:
            return cached[1]
        value = encode(entries)
        if isinstance(entries, tuple):
            self._cached = (entries, value)
        return value


class RepositoryExtension:
    """The model repository: its index, load and unload, over the
    ``registry``; ``control_mode``: the model control mode ("none", "poll",
    "explicit"; "": not given, load and unload allowed as in "explicit")."""

    def __init__(self, registry: ModelRegistry, control_mode: str = ""):
        self.registry = registry
        self.control_mode = control_mode
        self._built: tuple = (None, (), ())  # (the snapshot, its index, its READY entries)
        self._lock = threading.Lock()

    def _refuse_in_control_mode(self) -> None:
        """Raise ModelControlDisabled (503 / UNAVAILABLE, Triton's text) in the
        ``none`` and ``poll`` modes, before any credential is looked at:
        nobody may load or unload then."""
        if self.control_mode in CONTROL_REFUSED:
            raise ModelControlDisabled(CONTROL_REFUSED_TEXT)

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
        load does; the registry source checks and applies it) and, with it,
        one ``file:<version>/model.onnx`` (base64 over HTTP, bytes over
        gRPC, as Triton's): the model's next version, registered and
        validated like an upload (the registry numbers it; the directory's
        number is not kept), audited as the caller's upload; a version that
        fails validation fails the load. Needs a token of the model's team
        or an operator's (audited as its user; the level that may upload
        versions). Raises ModelControlDisabled first in the ``none`` and
        ``poll`` control modes; then InvalidInput for a name Triton refuses
        (empty, only whitespace, ``..`` or a ``/``: Triton's texts);
        Unauthenticated, PermissionDenied; ModelNotFound, InvalidInput with
        Triton's "failed to load '<name>', " before the reason."""
        self._refuse_in_control_mode()
        triton_texts.check_model_name(name)
        follow_scopes(self.registry)
        registry = self.registry
        caller = auth.authorize_control(token, name)
        try:
            try:
                registry.model(name)
            except ModelNotFound as exc:  # Triton: "failed to load '<m>', failed to poll from model repository"
                raise ModelNotFound(f"failed to poll from model repository: {exc.message}") from None
            config, files = _load_parameters(parameters or {})
            if files:
                ((path, content),) = files.items()
                number, state, reason = registry.add_version(name, content, config, f"load: file:{path}", caller.actor)
                if state == "FAILED":
                    raise InvalidInput(f"version {number} (file:{path}) failed validation: {reason}")
            elif config is not None:
                registry.set_config(name, config, actor=caller.actor)
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
        Raises ModelControlDisabled (as :func:`load`), Unauthenticated,
        PermissionDenied, ModelNotFound, InvalidInput, InUse."""
        self._refuse_in_control_mode()
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


def _load_parameters(parameters: dict) -> tuple[str | None, dict[str, bytes]]:
    """A load's ``config`` (None when absent) and its ``file:`` parameters as
    {"<version>/model.onnx": contents}: at most one, and only with a config
    (Triton: "config" must be provided with an override model directory)."""
    config, files = None, {}
    for key, value in parameters.items():
        if key == "config":
            if not isinstance(value, str):
                raise InvalidInput("Config parameter 'config' must have string type for its value")
            config = value
        elif key.startswith("file:"):
            files[key.removeprefix("file:")] = _file_contents(key, value)
        else:
            raise InvalidInput(f"Unrecognized load parameter '{key}'")
    if files and config is None:
        raise InvalidInput("file: parameters need the 'config' parameter (the model's configuration), as in Triton")
    if len(files) > 1:
        raise InvalidInput(
            f"give one file: parameter, the model file, not {len(files)}: the registry keeps one ONNX file per version"
        )
    for path in files:
        version, _, filename = path.partition("/")
        if not (version.isdigit() and int(version) > 0 and filename == "model.onnx"):
            shown = path if len(path) <= 80 else path[:80] + "..."
            raise InvalidInput(f"file parameter 'file:{shown}' must name '<version>/model.onnx' (an ONNX model file)")
    return config, files


def _file_contents(key: str, value) -> bytes:
    """A ``file:`` parameter's bytes: gRPC's bytes_param as they are, REST's base64 string decoded."""
    if isinstance(value, bytes):
        return value
    if not isinstance(value, str):
        raise InvalidInput(f"parameter '{key}' must be the file's contents in base64")
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise InvalidInput(f"parameter '{key}' is not valid base64") from None
