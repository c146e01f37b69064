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
- server ``src/grpc/infer_handler.cc`` (``InferGRPCToInput``);
- core ``src/infer_request.cc`` and ``src/model.cc`` (a request against its
  model: duplicate inputs and outputs, unknown ones, input counts, datatype,
  byte sizes, BYTES element counts, the raw binary request), which Triton's
  own QA tests match (server ``qa/L0_input_validation``, ``qa/L0_http``);
- core ``ValidateModelName`` (a name to load: no traversal, not empty).

The status codes stay ours (404 / NOT_FOUND for an unknown model or
version, 503 / UNAVAILABLE for one that does not serve; Triton answers 400
for some of them): only the texts follow Triton.
"""

from __future__ import annotations

from inference.protocol.errors import DataMismatch, InvalidInput, ModelNotFound, ModelNotReady

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


# -- a request against its model (core src/infer_request.cc, src/model.cc) -----------------


def duplicate_input(name: str) -> InvalidInput:
    """An input given twice (``AddOriginalInput``)."""
    return InvalidInput(f"input '{name}' already exists in request")


def duplicate_output(name: str) -> InvalidInput:
    """An output requested twice (``AddOriginalRequestedOutput``)."""
    return InvalidInput(f"output '{name}' already exists in request")


def unexpected_input(name: str, model: str, known: list[str]) -> InvalidInput:
    """An input the model does not have (``Model::GetInput``); ``known``: its inputs."""
    return InvalidInput(f"unexpected inference input '{name}' for model '{model}' (inputs: {', '.join(known)})")


def unexpected_output(name: str, model: str, known: list[str]) -> InvalidInput:
    """An output the model does not have (``Model::GetOutput``); ``known``: its outputs."""
    return InvalidInput(f"unexpected inference output '{name}' for model '{model}' (outputs: {', '.join(known)})")


def datatype_mismatch(name: str, given: str, model: str, expected: str) -> InvalidInput:
    """An input of another datatype than the model's (``Normalize``)."""
    return InvalidInput(f"inference input '{name}' data-type is '{given}', but model '{model}' expects '{expected}'")


def _names(names: list[str]) -> str:
    return "[" + ",".join(f"'{n}'" for n in names) + "]"


def input_count(model: str, given: list[str], inputs: list[str], optional: frozenset | set) -> InvalidInput:
    """Fewer inputs than the model requires or more than it has
    (``ValidateRequestInputs``): ``given`` in the request's order, ``inputs``
    the model's in its order, ``optional`` the ones it may go without."""
    missing = [n for n in inputs if n not in optional and n not in given]
    required = len(inputs) - len([n for n in inputs if n in optional])
    if required == len(inputs):
        expected = f"expected {len(inputs)} inputs"
    else:
        expected = f"expected number of inputs between {required} and {len(inputs)}"
    return InvalidInput(
        f"{expected} but got {len(given)} inputs for model '{model}'. Got input(s) {_names(given)}, "
        f"but missing required input(s) {_names(missing)}. Please provide all required input(s)."
    )


def byte_size_mismatch(where: str, expected: int, got: int) -> DataMismatch:
    """A numeric tensor's bytes do not fill its shape; ``where``: "input 'x' for model 'm'"."""
    return DataMismatch(f"input byte size mismatch for {where}. Expected {expected}, got {got}")


def too_few_strings(where: str, expected: int, got: int) -> DataMismatch:
    """A BYTES tensor's data holds fewer elements than its shape (``ValidateBytesInputs``)."""
    return DataMismatch(f"expected {expected} string elements for inference {where}, got {got}")


def too_many_strings(where: str, expected: int) -> DataMismatch:
    """A BYTES tensor's data holds more elements than its shape: Triton
    stops at the first one too many (``ValidateBytesInputs``)."""
    return DataMismatch(
        f"unexpected number of string elements {expected + 1} for inference {where}, expecting {expected}"
    )


#: Triton's HTTP front end's limit on the nesting of a tensor's JSON ``data`` (server src/http_server.cc).
MAX_JSON_NESTING = 100


def json_nesting(where: str, depth: int) -> InvalidInput:
    """A tensor's JSON ``data`` nested ``depth`` >= MAX_JSON_NESTING lists deep."""
    return InvalidInput(
        f"JSON nesting depth exceeds maximum allowed limit ({MAX_JSON_NESTING}): {where}: 'data' is nested "
        f"at least {depth} lists deep"
    )


# -- the repository extension (core src/model_repository_manager/model_repository_manager.cc) --


def check_model_name(name: str) -> None:
    """Raise InvalidInput unless ``name`` may name a model to load
    (``ValidateModelName``: not empty or only whitespace; neither ``..``
    nor a ``/`` once trimmed)."""
    trimmed = name.strip(" \t\n\r\f\v")
    if not trimmed:
        raise InvalidInput("Model name cannot be empty. Please enter a valid name to deploy.")
    if trimmed == ".." or "/" in trimmed:
        raise InvalidInput(f"invalid model name '{name}', model name must not contain path traversal characters")
