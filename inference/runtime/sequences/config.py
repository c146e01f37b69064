"""Reading ``sequence_batching`` from a model configuration's JSON (as
protobuf's ``MessageToDict`` writes it), checked with Triton's rules and
messages (triton-inference-server/core ``src/model_config_utils.cc``
``GetBooleanSequenceControlProperties``, ``GetTypedSequenceControlProperties``,
``ValidateModelConfig``; ``src/sequence_batch_scheduler/sequence_batch_scheduler.cc``
``GenerateInitialStateData``: https://github.com/triton-inference-server/core).
The policy built from it is :class:`inference.runtime.sequences.policy.SequencePolicy`.
"""

from __future__ import annotations

from dataclasses import dataclass

from inference.protocol.datatypes import BY_TRITON

START, END, READY, CORRID = (
    "CONTROL_SEQUENCE_START",
    "CONTROL_SEQUENCE_END",
    "CONTROL_SEQUENCE_READY",
    "CONTROL_SEQUENCE_CORRID",
)
_BOOLEAN_FIELDS = {"int32_false_true": "INT32", "fp32_false_true": "FP32", "bool_false_true": "BOOL"}
_CORRID_TYPES = ("TYPE_UINT64", "TYPE_INT64", "TYPE_UINT32", "TYPE_INT32", "TYPE_STRING")
#: Triton's default ``max_sequence_idle_microseconds`` (core ``src/constants.h``).
IDLE_DEFAULT_US = 1_000_000
#: One past the largest uint64 (correlation IDs, uint64 fields).
UINT64_END = 1 << 64


class SequenceConfigError(ValueError):
    """A ``sequence_batching`` configuration Triton (or this server) refuses."""


@dataclass(frozen=True)
class Control:
    """One control of a control input: ``kind`` (``CONTROL_SEQUENCE_*``), the
    values the boolean kinds send (``false_true``, from ``field``:
    ``int32_false_true``, ``fp32_false_true`` or ``bool_false_true``) or the
    CORRID's ``data_type`` (``TYPE_*``)."""

    kind: str
    field: str = ""
    false_true: tuple = ()
    data_type: str = "TYPE_INVALID"

    @property
    def datatype(self) -> str:
        """The tensor's OIP datatype (INT32, FP32, BOOL; the CORRID's own)."""
        return _BOOLEAN_FIELDS[self.field] if self.field else _oip(self.data_type)


@dataclass(frozen=True)
class InitialState:
    """``initial_state``: zeros of ``dims`` (``zero_data``; ``data_file`` is refused)."""

    data_type: str
    dims: tuple[int, ...]
    name: str


@dataclass(frozen=True)
class State:
    """One implicit state: the model reads ``input_name`` and writes
    ``output_name`` (``data_type``, ``dims`` without the batch dimension)."""

    input_name: str
    output_name: str
    data_type: str
    dims: tuple[int, ...]
    initial: InitialState | None = None
    same_buffer: bool = False

    @property
    def datatype(self) -> str:
        return _oip(self.data_type)


def _oip(triton_type: str) -> str:
    datatype = BY_TRITON.get(triton_type)
    if datatype is None:
        raise SequenceConfigError(f"unknown data type {triton_type}")
    return datatype.name


def _uint(value) -> int:
    """A uint64 field (protobuf's JSON writes 64-bit integers as strings)."""
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise SequenceConfigError(f"expected an unsigned integer, got {value!r}") from None
    if not 0 <= number < UINT64_END:
        raise SequenceConfigError(f"expected an unsigned integer, got {value!r}")
    return number


def _control_inputs(items: list, model: str) -> tuple:
    """The control inputs, checked as Triton's ValidateModelConfig checks them."""
    seen_names: set[str] = set()
    seen_kinds: set[str] = set()
    out = []
    for item in items:
        name = item.get("name", "")
        if not name:
            raise SequenceConfigError(f"sequence batching control tensor must have a name for {model}")
        if name in seen_names:
            raise SequenceConfigError(
                f"sequence batching control tensor '{name}' is specified for multiple control kinds for {model}"
            )
        seen_names.add(name)
        controls = []
        for raw in item.get("control") or []:
            kind = raw.get("kind", START)
            if kind in seen_kinds:
                raise SequenceConfigError(f"sequence batching specifies multiple {kind} tensors for {model}")
            seen_kinds.add(kind)
            given = [f for f in _BOOLEAN_FIELDS if raw.get(f)]
            if kind == CORRID:
                if given:
                    raise SequenceConfigError(
                        "sequence batching must not specify either 'int32_false_true', 'fp32_false_true' or "
                        f"'bool_false_true' for {kind} for {model}"
                    )
                data_type = raw.get("data_type", "TYPE_INVALID")
                if data_type not in _CORRID_TYPES:
                    raise SequenceConfigError(
                        f"unexpected data type for control {CORRID} for {model}. Allowed data types are "
                        "TYPE_UINT64, TYPE_INT64, TYPE_UINT32, TYPE_INT32 and TYPE_STRING"
                    )
                controls.append(Control(kind, data_type=data_type))
                continue
            if not given:
                raise SequenceConfigError(
                    "sequence batching must specify either 'int32_false_true', 'fp32_false_true' or "
                    f"'bool_false_true' for {kind} for {model}"
                )
            if len(given) > 1:
                raise SequenceConfigError(
                    "sequence batching specifies more than one from 'int32_false_true', 'fp32_false_true' and "
                    f"'bool_false_true' for {kind} for {model}"
                )
            values = raw[given[0]]
            if len(values) != 2:
                raise SequenceConfigError(
                    f"sequence batching control '{given[0]}' must have exactly 2 entries for {kind} for {model}"
                )
            cast = {"int32_false_true": int, "fp32_false_true": float, "bool_false_true": bool}[given[0]]
            controls.append(
                Control(kind, given[0], tuple(cast(v) for v in values), raw.get("data_type", "TYPE_INVALID"))
            )
        out.append((name, tuple(controls)))
    return tuple(out)


def _state(item: dict, model: str) -> State:
    """One ``state`` entry, checked as Triton's GenerateInitialStateData checks it."""
    input_name, output_name = item.get("input_name", ""), item.get("output_name", "")
    if not input_name or not output_name:
        raise SequenceConfigError(f"sequence_batching.state needs input_name and output_name for {model}")
    data_type = item.get("data_type", "TYPE_INVALID")
    if data_type not in BY_TRITON:
        raise SequenceConfigError(f"sequence_batching.state '{input_name}' needs a data_type for {model}")
    if item.get("use_growable_memory"):
        raise SequenceConfigError(
            f"use_growable_memory (state '{input_name}') is not supported by this server: it needs KIND_GPU "
            "instances of a backend that grows state buffers"
        )
    dims = tuple(int(d) for d in item.get("dims") or ())
    initials = item.get("initial_state") or []
    if len(initials) > 1:
        raise SequenceConfigError(
            f"initial_state field for state input '{input_name}' must contain exactly one or zero element. "
            f"Found '{len(initials)}' elements."
        )
    initial = None
    if initials:
        raw = initials[0]
        if raw.get("data_type", "TYPE_INVALID") != data_type:
            raise SequenceConfigError(
                f"The data type used for 'initial_state' field of state '{input_name}' does not match the state "
                "data type."
            )
        if not raw.get("name"):
            raise SequenceConfigError(
                f"Field 'name' must be set when using initial_state for state input '{input_name}'."
            )
        initial_dims = tuple(int(d) for d in raw.get("dims") or ())
        if len(initial_dims) != len(dims):
            raise SequenceConfigError(
                "Number of dimensions in 'initial_state' doesn't match the size of 'state' dimensions for state "
                f"input '{input_name}'. {len(initial_dims)} != {len(dims)}"
            )
        for got, want in zip(initial_dims, dims, strict=True):
            if got == -1:
                raise SequenceConfigError(
                    f"'initial_state' field for state input name '{input_name}' contains variable dimensions."
                )
            if want != -1 and got != want:
                raise SequenceConfigError(
                    f"'initial_state' dim for input name '{input_name}' doesn't match 'state' dim description. "
                    f"{got} != {want}"
                )
        if "data_file" in raw:
            raise SequenceConfigError(
                f"initial_state data_file (state '{input_name}') is not supported by this server; use zero_data"
            )
        if "zero_data" not in raw:
            raise SequenceConfigError(f"initial_state setting expects state'{input_name}' to have state_data set")
        initial = InitialState(data_type, initial_dims, raw["name"])
    return State(input_name, output_name, data_type, dims, initial, bool(item.get("use_same_buffer_for_input_output")))


def fields(config: dict, max_batch_size: int, model: str) -> dict:
    """The :class:`~inference.runtime.sequences.policy.SequencePolicy` fields of a
    ``sequence_batching`` message as JSON, checked with Triton's rules and
    messages. Raises SequenceConfigError (and, for JSON not of the message's
    form, AttributeError, KeyError, TypeError or ValueError)."""
    if not isinstance(config, dict):
        raise SequenceConfigError("sequence_batching must be a message")
    if config.get("iterative_sequence"):
        raise SequenceConfigError(
            f"sequence_batching.iterative_sequence is not supported by this server for {model} "
            "(ONNX Runtime models cannot reschedule requests)"
        )
    controls = _control_inputs(config.get("control_input") or [], model)
    states = tuple(_state(item, model) for item in config.get("state") or [])
    names = [s.input_name for s in states]
    if len(set(names)) != len(names):
        duplicate = next(n for n in names if names.count(n) > 1)
        raise SequenceConfigError(f"State input name '{duplicate}' specified more than once.")
    outputs = [s.output_name for s in states]
    if len(set(outputs)) != len(outputs):
        raise SequenceConfigError(f"sequence_batching.state output names repeat for {model}")
    taken = {name for name, _ in controls} & (set(names) | set(outputs))
    if taken:
        raise SequenceConfigError(f"'{sorted(taken)[0]}' is both a control input and a state of {model}")
    idle = _uint(config.get("max_sequence_idle_microseconds", 0)) or IDLE_DEFAULT_US
    result = {"max_batch_size": max_batch_size, "idle_us": idle, "control_inputs": controls, "states": states}
    if "oldest" in config:
        oldest = config["oldest"] or {}
        preferred = tuple(int(p) for p in oldest.get("preferred_batch_size") or ())
        for size in preferred:
            if size <= 0:
                raise SequenceConfigError(f"sequence batching preferred batch size must be positive for {model}")
            if size > max_batch_size:
                raise SequenceConfigError(
                    f"sequence batching preferred batch size must be <= max batch size for {model}"
                )
        if not preferred and max_batch_size > 0:
            preferred = (max_batch_size,)  # NormalizeModelConfig
        return dict(
            result, strategy="oldest", strategy_given=True,
            max_candidates=int(oldest.get("max_candidate_sequences", 0)), preferred=preferred,
            oldest_delay_us=_uint(oldest.get("max_queue_delay_microseconds", 0)),
            preserve_ordering=bool(oldest.get("preserve_ordering", False)),
        )  # fmt: skip
    direct = config.get("direct")
    if direct is None:
        return result
    utilization = float(direct.get("minimum_slot_utilization", 0.0))
    if not 0.0 <= utilization <= 1.0:
        raise SequenceConfigError(f"sequence batching minimum slot utilization must be in range (0.0, 1.0] for {model}")
    return dict(
        result, strategy_given=True, min_slot_utilization=utilization,
        direct_delay_us=_uint(direct.get("max_queue_delay_microseconds", 0)),
    )  # fmt: skip
