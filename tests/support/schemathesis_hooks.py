"""Schemathesis hooks for the management API's contract test
(``hooks = "tests.support.schemathesis_hooks"`` in tests/interop/schemathesis.toml).

- The schema can say that an upload's ``file`` is binary, not that it must be
  an ONNX model: schema-valid uploads carry small real ONNX models
  (``y = a*x + b``, built in code), so that the uploads the fuzzer means to be
  valid are valid and the operations behind them (versions, labels) are
  reached.
- Likewise an upload's ``config`` is a string the server parses as a
  config.pbtxt (its schema's format ``triton-config``): schema-valid uploads
  carry configurations an affine model takes, or (the schema's other
  ``oneOf`` branch: no file) an ensemble's whose one step is the test's model
  ``steps`` (team ml); a refusal of any other string as a config (400
  "config.pbtxt: ...", what no schema can say) is not reported as a
  schema-valid request rejected; nor is the refusal of ``data`` files the
  model does not reference by name, or of two under one name. An upload
  without a file and without an ensemble's config is schema-violating (the
  schema's ``oneOf``): its 400 is nobody's exemption.
- A "schema-valid request rejected" of a multipart upload is judged as sent
  too: a body that the schema refuses (the coverage phase sends a file with
  an ensemble's config, which matches both of the upload's ``oneOf``
  branches, as positive) was no schema-valid request, and its 400 stays out.
- Schemathesis 4.32 judges a form body "as sent" (a multipart text part is
  text: the integer 12 it meant to send as ``team`` arrives as the valid team
  name "12"), but not when the body also holds a file: its JSON Schema
  validator refuses the file's bytes, so it reports the body as a
  schema-violating request accepted. :func:`keep_failure` drops exactly those
  reports, after judging the body as sent itself with the file part read as
  the string it is; every other failure stays (the CLI lists dropped ones).
- A webhook's ``url`` (format ``uri`` and the pattern the server checks:
  http(s), host labels of at most 63 characters, ...) must also resolve to
  an address the server may send to (WEBHOOK_ALLOWED_HOSTS lists 127.0.0.1
  in the test): schema-valid URLs are ones on 127.0.0.1, and a refusal of
  another one for what its host resolves to (or does not), which no schema
  can say, is not reported as a schema-valid request rejected. A URL of
  another shape is schema-violating: its 400 is nobody's exemption.
"""

from __future__ import annotations

import json
from email.parser import BytesParser
from email.policy import HTTP

import jsonschema
import schemathesis
from hypothesis import strategies as st

from tests.support import onnx_models

#: Small ONNX models: distinct (scale, offset) pairs give distinct bytes.
onnx_files = st.builds(onnx_models.affine, st.integers(-1000, 1000), st.integers(-1000, 1000))

schemathesis.openapi.format("binary", onnx_files)

#: The model the test uploads (team ml) for the ensembles' one step: y = a*x + b, x and y FP32 [N, 4].
STEP_MODEL = "steps"
#: Ensembles' config.pbtxt texts (uploaded alone: the schema's second ``oneOf`` branch) over it.
ENSEMBLES = [
    f'platform: "ensemble"\nmax_batch_size: {batch}\n'
    f'input [ {{ name: "{name}" data_type: TYPE_FP32 dims: [ -1 ] }} ]\n'
    f'output [ {{ name: "OUT" data_type: TYPE_FP32 dims: [ -1 ] }} ]\n'
    f'ensemble_scheduling {{ step [ {{ model_name: "{STEP_MODEL}" model_version: -1 '
    f'input_map {{ key: "x" value: "{name}" }} output_map {{ key: "y" value: "OUT" }} }} ] }}'
    for batch, name in ((8, "X"), (4, "IN"))
]
#: config.pbtxt texts that the affine models above take, and the ensembles'.
configs = st.sampled_from(
    [
        "",
        "max_batch_size: 8",
        "max_batch_size: 4\ndynamic_batching { max_queue_delay_microseconds: 100 }",
        'input [ { name: "x" data_type: TYPE_FP32 } ]\nparameters { key: "k" value: { string_value: "v" } }',
        *ENSEMBLES,
    ]
)
schemathesis.openapi.format("triton-config", configs)

#: Webhook targets the test server allows (nothing listens there: attempts fail and are retried).
schemathesis.openapi.format(
    "uri", st.sampled_from(["http://127.0.0.1:9/hooks", "http://127.0.0.1:9/ci?team=ml", "http://127.0.0.1:1/"])
)

SCHEMA_VIOLATING_REQUEST_ACCEPTED = "ST201"
SCHEMA_VALID_REQUEST_REJECTED = "ST202"


def _sent_multipart_fields(response) -> dict[str, list[str | None]]:
    """The parts of the multipart body sent: text, or None for a file part."""
    content_type = response.request.headers.get("Content-Type", "")
    body = response.request.body or b""
    message = BytesParser(policy=HTTP).parsebytes(f"Content-Type: {content_type}\r\n\r\n".encode() + body)
    fields: dict[str, list[str | None]] = {}
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        text = None if part.get_filename() is not None else part.get_payload(decode=True).decode(errors="replace")
        fields.setdefault(name, []).append(text)
    return fields


def _readings(text: str) -> list:
    """How a server may read a form field: as text, or as the JSON value it spells."""
    try:
        return [text, json.loads(text)]
    except ValueError:
        return [text]


def multipart_body_valid_as_sent(case, response) -> bool:
    """Whether the multipart body actually sent satisfies the operation's
    request schema, each text part read as text (or the JSON value it
    spells, as schemathesis reads form text) and each file part as a string."""
    schema = next(item.optimized_schema for item in case.operation.body if item.media_type == case.media_type)
    validator = jsonschema.Draft4Validator(schema)
    sent: dict[str, object] = {}
    for name, texts in _sent_multipart_fields(response).items():
        if None in texts:
            sent[name] = "<file>"
            continue
        readings = [reading for text in texts for reading in _readings(text)]
        sent[name] = next(
            (r for r in readings if not any(e.path and e.path[0] == name for e in validator.iter_errors({name: r}))),
            readings[0],
        )
    return validator.is_valid(sent)


def _refused_config(response) -> bool:
    """A 400 that refuses the upload's config.pbtxt (the parser's answer)."""
    if getattr(response, "status_code", None) != 400:
        return False
    try:
        error = json.loads(response.content)["error"]
    except (ValueError, KeyError, TypeError):
        return False
    # The schema says an upload's ``data`` parts are files; not that their names are distinct and each one
    # a name the model references.
    return isinstance(error, str) and error.startswith(
        ("config.pbtxt", "the model does not reference the data file", "external data file")
    )


def _refused_webhook_url(case, response) -> bool:
    """A 400 that refuses a webhook's URL for what its host resolves to (or that it does not resolve)."""
    if getattr(response, "status_code", None) != 400 or not getattr(case.operation, "path", "").endswith("/webhooks/"):
        return False
    try:
        answer = json.loads(response.content)
    except ValueError:
        return False
    if not isinstance(answer, dict) or "fields" in answer:
        return False  # a field refused for its shape: the schema says the shape
    error = answer.get("error", "")
    return isinstance(error, str) and error.startswith("the host ") and (" resolve" in error or " address" in error)


@schemathesis.hook("filter_failure")
def keep_failure(context, failure, case, response) -> bool:
    """Keep every failure but "schema-violating request accepted" for a
    multipart upload whose only schema-violating part is its body, when that
    body, as sent, is valid, and "schema-valid request rejected" for an
    upload whose body, as sent, the schema refuses or that is refused for its
    config, or a webhook refused for what its host resolves to (see the
    module docstring)."""
    if failure.code == SCHEMA_VALID_REQUEST_REJECTED and _refused_webhook_url(case, response):
        return False
    if not (case.media_type or "").startswith("multipart/"):
        return True
    if failure.code == SCHEMA_VALID_REQUEST_REJECTED:
        # Judged as sent: a body the schema refuses (say a file with an ensemble's config, which matches
        # both of the upload's oneOf branches: the coverage phase sends it as positive) was no valid request.
        return multipart_body_valid_as_sent(case, response) and not _refused_config(response)
    if failure.code != SCHEMA_VIOLATING_REQUEST_ACCEPTED:
        return True
    components = case.meta.components if case.meta is not None else {}
    negative = {location.name for location, info in components.items() if info.mode.is_negative}
    if negative != {"BODY"}:
        return True
    return not multipart_body_valid_as_sent(case, response)
