"""Triton's trace and logging extensions: settings for every process of the
machine; the trace settings read by anyone (as Triton's), changed by
operators only; the log settings (which name the log file) operators' only
(https://github.com/triton-inference-server/server/blob/main/docs/protocol/extension_trace.md,
https://github.com/triton-inference-server/server/blob/main/docs/protocol/extension_logging.md)."""

from __future__ import annotations

from inference import runtime_settings
from inference.admission import auth
from inference.extensions.common import audit, follow_scopes
from inference.serving.registry import ModelRegistry


class SettingsExtension:
    """Trace and log settings of the machine; the ``registry`` names the models."""

    def __init__(self, registry: ModelRegistry):
        self.registry = registry

    def trace_settings(self, token: str | None, model: str | None = None, update: dict | None = None) -> dict:
        """Triton's trace settings, global or a model's (its own over the global
        ones), changed by ``update`` when given (``None`` values clear a
        model's own); for every process of the machine before this returns
        (inference/runtime_settings.py). Reading needs no credential (as
        Triton's, like the model configuration); a change, an operator's
        (audited). An empty ``update`` changes nothing and is a read (Triton's
        clients send one: ``update_trace_settings()``; gRPC's empty request
        is the same). Raises Unauthenticated, PermissionDenied (a change),
        ModelNotFound, InvalidInput."""
        follow_scopes(self.registry)
        update = update or None
        caller = auth.authorize_operator(token) if update is not None else None
        if model:
            self.registry.model(model)
        settings = runtime_settings.runtime_settings()
        settings.follow()  # another process (REST or gRPC) may have changed them since this one's last inference
        if update is None:
            return settings.trace(model)
        clean = runtime_settings.clean_trace_settings(update, per_model=bool(model))  # bounded: audited as applied
        result = settings.update_trace(clean, model)
        audit(caller, "trace.settings", model or "", settings=clean)
        return result

    def log_settings(self, token: str | None, update: dict | None = None) -> dict:
        """Triton's log settings, changed by ``update`` when given, in every
        process of the machine. Operators only (audited): they name the log
        file, a path on the server. Raises Unauthenticated, PermissionDenied,
        InvalidInput."""
        follow_scopes(self.registry)
        caller = auth.authorize_operator(token)
        settings = runtime_settings.runtime_settings()
        settings.follow()
        if update is None:
            return settings.log()
        clean = runtime_settings.clean_log_settings(update)
        result = settings.update_log(clean)
        audit(caller, "log.settings", "", settings=clean)
        return result
