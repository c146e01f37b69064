"""The transport-agnostic data plane of the Open Inference Protocol (V2).

REST, gRPC and TF Serving adapters decode their wire format into protocol
types, call a :class:`DataPlane` method, and encode what it returns. The data
plane checks requests against the model's signature, resolves versions
through the in-memory :class:`~inference.registry.ModelRegistry`, and runs
the model through an executor. It raises only protocol errors
(:mod:`inference.protocol.errors`).

Spec: seed 002 / 003, "Health", "Server Metadata", "Model Metadata",
"Inference".
"""

from __future__ import annotations

import threading

from inference.protocol.errors import InvalidInput
from inference.protocol.types import (
    InferenceRequest,
    InferenceResponse,
    ModelMetadata,
    ResponseOutput,
    ServerMetadata,
)
from inference.registry import ModelRegistry, VersionEntry

#: Extensions this server implements, as listed in server metadata.
EXTENSIONS = ("binary_tensor_data",)


class DataPlane:
    """Health, metadata and inference over a registry and an executor."""

    def __init__(self, registry: ModelRegistry, executor, server_name: str, server_version: str):
        self.registry = registry
        self.executor = executor
        self._metadata = ServerMetadata(server_name, server_version, EXTENSIONS)

    # -- health and metadata --------------------------------------------
    def live(self) -> bool:
        """True while the process can answer requests."""
        return True

    def ready(self) -> bool:
        """True once the registry snapshot is loaded. Models that failed do not
        make the server unready; ask :meth:`model_ready` about a model."""
        return self.registry.loaded

    def server_metadata(self) -> ServerMetadata:
        return self._metadata

    def model_ready(self, name: str, version: str | None = None) -> bool:
        """Whether the version (default: the default version) can serve.

        Raises ModelNotFound for an unknown model or version.
        """
        model = self.registry.model(name)
        if not version:
            return model.default is not None
        return self.registry.version(name, version).serving

    def model_metadata(self, name: str, version: str | None = None) -> ModelMetadata:
        """Metadata of a version (default: the default version); ``versions``
        lists the served versions. Raises ModelNotFound / ModelNotReady."""
        return self.registry.metadata(name, version)

    def version_for_label(self, name: str, label: str) -> str:
        """The version a version label points at; raises ModelNotFound."""
        return self.registry.label(name, label)

    def model_versions(self, name: str) -> list[VersionEntry]:
        """Every version of a model in the registry, highest first, whatever
        its state (for status endpoints). Raises ModelNotFound."""
        model = self.registry.model(name)
        return [model.versions[n] for n in sorted(model.versions, reverse=True)]

    def model_version(self, name: str, version: str | None = None) -> VersionEntry:
        """The version entry that would serve a request (for transport codecs
        that need the signature, e.g. the raw binary request)."""
        return self.registry.resolve(name, version)

    # -- inference -------------------------------------------------------
    def infer(self, request: InferenceRequest) -> InferenceResponse:
        """Run ``request`` on the resolved model version.

        Checks: every model input given once with the model's datatype and a
        compatible shape (fixed dimensions equal, batch at most
        ``max_batch_size``), no unknown inputs, requested outputs known.
        Raises InvalidInput, ModelNotFound or ModelNotReady.
        """
        entry = self.registry.resolve(request.model_name, request.model_version)
        feeds = self._check_inputs(entry, request)
        if request.outputs is None:
            names = entry.output_names
        else:
            names = []
            for output in request.outputs:
                if output.name not in entry.output_types:
                    raise InvalidInput(
                        f"unknown output '{output.name}' for model '{entry.model_name}' "
                        f"(outputs: {', '.join(entry.output_names)})"
                    )
                if output.name in names:
                    raise InvalidInput(f"output '{output.name}' is requested twice")
                names.append(output.name)
        arrays = self.executor.run(entry, feeds, names)
        types = entry.output_types
        outputs = [ResponseOutput(name, types[name], array.shape, array) for name, array in zip(names, arrays)]
        return InferenceResponse(
            model_name=entry.model_name,
            model_version=str(entry.number),
            outputs=outputs,
            id=request.id,
        )

    @staticmethod
    def _check_inputs(entry: VersionEntry, request: InferenceRequest) -> dict:
        specs = entry.input_specs
        feeds = {}
        batch = None
        for tensor in request.inputs:
            spec = specs.get(tensor.name)
            if spec is None:
                raise InvalidInput(
                    f"unknown input '{tensor.name}' for model '{entry.model_name}' (inputs: {', '.join(specs)})"
                )
            if tensor.name in feeds:
                raise InvalidInput(f"input '{tensor.name}' is given twice")
            if tensor.datatype != spec.datatype.name:
                raise InvalidInput(
                    f"input '{tensor.name}' has datatype {tensor.datatype}, "
                    f"but model '{entry.model_name}' expects {spec.datatype.name}"
                )
            shape = tensor.shape
            expected = spec.shape
            if len(shape) != len(expected) or any(e >= 0 and e != s for s, e in zip(shape, expected)):
                raise InvalidInput(
                    f"input '{tensor.name}' has shape {list(shape)}, but model '{entry.model_name}' "
                    f"expects {list(expected)} (-1: any size)"
                )
            if entry.max_batch_size > 0:
                if shape[0] > entry.max_batch_size:
                    raise InvalidInput(
                        f"input '{tensor.name}' has batch size {shape[0]}, more than the model's "
                        f"max_batch_size {entry.max_batch_size}"
                    )
                if batch is not None and shape[0] != batch:
                    raise InvalidInput(f"inputs disagree on the batch size ({batch} and {shape[0]})")
                batch = shape[0]
            feeds[tensor.name] = tensor.data
        if len(feeds) != len(specs):
            missing = [name for name in specs if name not in feeds]
            raise InvalidInput(f"model '{entry.model_name}' needs input(s) {', '.join(missing)}, not given")
        return feeds


_dataplane: DataPlane | None = None
_dataplane_lock = threading.Lock()


def get_dataplane() -> DataPlane:
    """The process-wide DataPlane built from settings (created on first use,
    so that each server process, after a fork, starts its own poller)."""
    global _dataplane
    if _dataplane is None:
        with _dataplane_lock:
            if _dataplane is None:
                _dataplane = build_dataplane()
    return _dataplane


def build_dataplane() -> DataPlane:
    from django.conf import settings

    import hosting
    from inference.runtime.executors import InProcessExecutor, SessionCache
    from inference.runtime.loader import load_onnx_model

    registry = ModelRegistry(poll_seconds=settings.REGISTRY_POLL_SECONDS)
    executor = InProcessExecutor(SessionCache(load_onnx_model))
    registry.add_listener(executor.on_snapshot)
    registry.start()
    return DataPlane(registry, executor, hosting.SERVER_NAME, hosting.__version__)
