"""Build an :class:`OnnxModel` for a registry version from settings."""

from __future__ import annotations

from django.conf import settings

from inference.runtime import onnx as onnx_runtime
from models_store import storage


def load_onnx_model(entry) -> onnx_runtime.OnnxModel:
    """Session for ``entry`` with the configured providers, device and threads.

    Raises ProviderError when a configured provider is missing, and ONNX
    Runtime's errors when the artifact cannot load.
    """
    options = onnx_runtime.session_options(
        settings.ORT_INTRA_OP_THREADS, settings.ORT_INTER_OP_THREADS, settings.ORT_GRAPH_OPTIMIZATION
    )
    providers = onnx_runtime.provider_list(settings.ORT_EXECUTION_PROVIDERS, settings.ORT_DEVICE_ID)
    session = onnx_runtime.create_session(storage.local_artifact(entry.artifact), options, providers)
    return onnx_runtime.OnnxModel(session)
