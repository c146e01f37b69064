"""Error messages that begin with Triton's own wording, where Triton's
clients match it, followed by ours.

Triton's example clients (triton-inference-server/client,
``src/python/examples``) check error texts: ``simple_http_infer_client.py``
and ``simple_http_aio_infer_client.py`` that a wrong model name gives a
message starting with "Request for unknown model", the explicit-content gRPC
clients that a wrong version gives "failed to get model version from
specified version string '...'" (and that raw plus typed contents give
"contents field must not be specified when using raw_input_contents for
'<input>' for model '<model>'"), the model-control clients that a failed
load says "failed to load". The wording comes from Triton's sources:

- core ``src/model_repository_manager/model_repository_manager.cc``
  (``FindModelIdentifier``: "Request for unknown model: '<m>' is not found";
  ``GetModel`` prefixes "Request for unknown model: " to the life cycle's
  message; ``LoadUnloadModel``: "failed to load '<m>', ...");
- core ``src/model_repository_manager/model_lifecycle.cc`` (``GetModel``:
  "'<m>' version <v> is not found", "'<m>' has no available versions",
  "'<m>' version <v> is not at ready state");
- server ``src/common.cc`` (``GetModelVersionFromString``: "failed to get
  model version from specified version string '<v>'", "invalid model
  version specified '<v>'");
- server ``src/grpc/infer_handler.cc`` (``InferGRPCToInput``).

The status codes stay ours (404 / NOT_FOUND for an unknown model or
version, 503 / UNAVAILABLE for one that does not serve; Triton answers 400
for some of them): only the texts follow Triton.
"""

from __future__ import annotations

from inference.protocol.errors import InvalidInput, ModelNotFound, ModelNotReady

UNKNOWN_MODEL = "Request for unknown model: "


def unknown_model(name: str) -> ModelNotFound:
    """No model of this name (404 / NOT_FOUND)."""
    return ModelNotFound(f"{UNKNOWN_MODEL}'{name}' is not found")


def unknown_version(name: str, number: int, known: list[int]) -> ModelNotFound:
    """The model has no version ``number`` (404 / NOT_FOUND); ``known``: its versions."""
    listed = ", ".join(map(str, sorted(known))) or "none"
    return ModelNotFound(f"{UNKNOWN_MODEL}'{name}' version {number} is not found (versions of the model: {listed})")


def no_available_versions(name: str, why: str) -> ModelNotReady:
    """A request naming no version, and no version serves (503 / UNAVAILABLE)."""
    return ModelNotReady(f"{UNKNOWN_MODEL}'{name}' has no available versions: no version is ready to serve{why}")


def version_not_ready(name: str, number: int, state: str, reason: str) -> ModelNotReady:
    """The named version exists but does not serve (503 / UNAVAILABLE)."""
    detail = f": {reason}" if reason else ""
    return ModelNotReady(f"{UNKNOWN_MODEL}'{name}' version {number} is not at ready state ({state}){detail}")


def bad_version_string(version: str) -> ModelNotFound:
    """A version that is not a whole number (404 / NOT_FOUND: no version has such a name)."""
    if version.startswith("-") and version[1:].isdigit():
        return ModelNotFound(f"invalid model version specified '{version}' , version should be an integral value > 0")
    return ModelNotFound(
        f"failed to get model version from specified version string '{version}': versions are positive integers"
    )


def contents_with_raw(input_name: str, model_name: str) -> InvalidInput:
    """A gRPC input with typed contents in a request that uses raw_input_contents."""
    return InvalidInput(
        f"contents field must not be specified when using raw_input_contents for '{input_name}' "
        f"for model '{model_name}': send every input in raw_input_contents, or each in its typed contents"
    )


def load_failed(name: str, reason: str) -> str:
    """The message of a failed repository load (the caller picks the error class)."""
    return f"failed to load '{name}', {reason}"
