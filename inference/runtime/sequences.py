"""Sequence batching as Triton configures it (``sequence_batching`` in
config.pbtxt): the policy, the sequence parameters of a request, and the
tensors the server supplies to the model.

A stateful model receives the requests of a sequence in order, on one model
instance, with control inputs the server fills in (Triton's
``CONTROL_SEQUENCE_START``, ``_END``, ``_READY``, ``_CORRID``) and, with
implicit state (``state { input_name output_name ... }``), the state output
of the sequence's previous request as a state input. The scheduler that does
this is :mod:`inference.runtime.sequence_batcher`; this module holds what it
and the data plane share:

- :class:`SequencePolicy` from the model configuration's JSON (as protobuf's
  ``MessageToDict`` writes it), checked with Triton's rules and messages
  (triton-inference-server/core ``src/model_config_utils.cc``
  ``GetBooleanSequenceControlProperties``, ``GetTypedSequenceControlProperties``,
  ``ValidateModelConfig``; ``src/sequence_batch_scheduler/
  sequence_batch_scheduler.cc`` ``GenerateInitialStateData``), and echoed
  back as Triton returns it (``NormalizeModelConfig``, ``ModelConfigToJson``);
- :func:`sequence_parameters`: a request's ``sequence_id``,
  ``sequence_start`` and ``sequence_end``, type-checked as Triton's front
  ends do (server ``src/http_server.cc``, ``src/grpc/infer_handler.cc``);
- :func:`request_for`: the checks Triton makes before a request reaches the
  sequence batcher (``InferenceRequest::ValidateCorrelationId``, batch size
  1, a non-zero correlation ID), giving the :class:`SequenceRequest` the
  runner takes;
- the control and state tensors of one request (:meth:`SequencePolicy.controls_for`,
  :meth:`SequencePolicy.initial_states`).

A model without ``sequence_batching`` ignores the sequence parameters, as
Triton does (only its front ends check their types).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

from inference.protocol.datatypes import BY_NAME, BY_TRITON
from inference.protocol.errors import InvalidInput

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
_UINT64 = 1 << 64


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


@dataclass(frozen=True)
class SequencePolicy:
    """A model's ``sequence_batching`` (see the module doc).

    ``strategy``: ``direct`` (each sequence gets a batch slot of one model
    instance; a batch holds every active slot, empty ones as "not ready"
    rows) or ``oldest`` (up to ``max_candidates`` sequences per instance,
    their oldest requests batched dynamically); ``idle_us``: a sequence with
    no request for this long is released (microseconds).
    """

    max_batch_size: int
    idle_us: int = IDLE_DEFAULT_US
    strategy: str = "direct"
    strategy_given: bool = False  # Triton echoes the strategy only when the config names it
    control_inputs: tuple[tuple[str, tuple[Control, ...]], ...] = ()
    states: tuple[State, ...] = ()
    direct_delay_us: int = 0
    min_slot_utilization: float = 0.0
    max_candidates: int = 0
    preferred: tuple[int, ...] = ()
    oldest_delay_us: int = 0
    preserve_ordering: bool = False

    # -- reading the configuration -------------------------------------------
    @classmethod
    def from_config(cls, config: dict, max_batch_size: int, model: str) -> SequencePolicy:
        """The policy of a ``sequence_batching`` message as JSON (protobuf's
        ``MessageToDict`` with field names preserved: 64-bit integers may be
        strings). Raises SequenceConfigError with Triton's message, or ours
        for what this server does not support (``iterative_sequence``,
        ``initial_state.data_file``, ``use_growable_memory``)."""
        try:
            return cls._from_config(config, max_batch_size, model)
        except SequenceConfigError:
            raise
        except (AttributeError, KeyError, TypeError, ValueError) as exc:  # not the message's JSON form
            raise SequenceConfigError(f"sequence_batching of {model} is malformed: {exc}") from None

    @classmethod
    def _from_config(cls, config: dict, max_batch_size: int, model: str) -> SequencePolicy:
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
        fields = {"max_batch_size": max_batch_size, "idle_us": idle, "control_inputs": controls, "states": states}
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
            return cls(
                **fields, strategy="oldest", strategy_given=True,
                max_candidates=int(oldest.get("max_candidate_sequences", 0)), preferred=preferred,
                oldest_delay_us=_uint(oldest.get("max_queue_delay_microseconds", 0)),
                preserve_ordering=bool(oldest.get("preserve_ordering", False)),
            )  # fmt: skip
        direct = config.get("direct")
        if direct is None:
            return cls(**fields)
        utilization = float(direct.get("minimum_slot_utilization", 0.0))
        if not 0.0 <= utilization <= 1.0:
            raise SequenceConfigError(
                f"sequence batching minimum slot utilization must be in range (0.0, 1.0] for {model}"
            )
        return cls(
            **fields, strategy_given=True, min_slot_utilization=utilization,
            direct_delay_us=_uint(direct.get("max_queue_delay_microseconds", 0)),
        )  # fmt: skip

    # -- what the model sees ---------------------------------------------------
    @property
    def batched(self) -> bool:
        return self.max_batch_size > 0

    @property
    def slots(self) -> int:
        """Sequence slots per model instance: ``max_batch_size`` (at least 1),
        or the oldest strategy's ``max_candidate_sequences`` when given."""
        if self.strategy == "oldest" and self.max_candidates > 0:
            return self.max_candidates
        return max(1, self.max_batch_size)

    def control(self, kind: str) -> tuple[str, Control] | None:
        """(tensor name, control) of a kind, or None when the model has none."""
        for name, controls in self.control_inputs:
            for control in controls:
                if control.kind == kind:
                    return name, control
        return None

    @property
    def supplied_inputs(self) -> frozenset[str]:
        """Inputs the server supplies: the control inputs and the state inputs."""
        return frozenset(name for name, _ in self.control_inputs) | {s.input_name for s in self.states}

    @property
    def state_outputs(self) -> frozenset[str]:
        return frozenset(s.output_name for s in self.states)

    def controls_for(self, start: bool, end: bool, ready: bool, corrid: int | str) -> dict[str, np.ndarray]:
        """The control tensors of one batch row: shape [1] (with a batch
        dimension [1, 1]), as Triton's ``SetControlTensors``: a row that is
        not ready has START and END false and correlation ID 0."""
        shape = (1, 1) if self.batched else (1,)
        out = {}
        for name, controls in self.control_inputs:
            for control in controls:
                if control.kind == CORRID:
                    out[name] = _corrid_tensor(control.datatype, corrid if ready else 0, shape)
                    continue
                on = {START: start and ready, END: end and ready, READY: ready}[control.kind]
                datatype = BY_NAME[control.datatype]
                out[name] = np.full(shape, control.false_true[1 if on else 0], dtype=datatype.numpy)
        return out

    def initial_states(self) -> dict[str, np.ndarray]:
        """Each state input at a sequence's start: ``initial_state``'s zeros,
        else zeros (Triton leaves it uninitialized) with every variable
        dimension at 1; a batch dimension of 1 first when the model batches.
        A BYTES state is empty strings."""
        out = {}
        for state in self.states:
            dims = state.initial.dims if state.initial else tuple(d if d >= 0 else 1 for d in state.dims)
            shape = ((1,) if self.batched else ()) + tuple(dims)
            datatype = BY_NAME[state.datatype]
            if datatype.is_bytes:
                out[state.input_name] = np.full(shape, b"", dtype=object)
            else:
                out[state.input_name] = np.zeros(shape, dtype=datatype.numpy)
        return out

    # -- echo --------------------------------------------------------------------
    def echo(self) -> dict:
        """``sequence_batching`` as Triton's model configuration answers it:
        normalized (the default idle time, the oldest strategy's preferred
        batch size) and with every primitive field printed
        (``always_print_primitive_fields``). Triton turns the 64-bit fields
        into JSON numbers, except ``initial_state.dims``, which its
        ``ModelConfigToJson`` looks up in the wrong object and leaves as
        strings; so do we."""
        controls = []
        for name, kinds in self.control_inputs:
            items = []
            for c in kinds:
                item = {"kind": c.kind, "int32_false_true": [], "fp32_false_true": [], "bool_false_true": []}
                if c.field:
                    item[c.field] = list(c.false_true)
                item["data_type"] = c.data_type
                items.append(item)
            controls.append({"name": name, "control": items})
        states = []
        for s in self.states:
            initial = []
            if s.initial is not None:
                initial.append(
                    {"data_type": s.initial.data_type, "dims": [str(d) for d in s.initial.dims], "zero_data": True,
                     "name": s.initial.name}
                )  # fmt: skip
            states.append(
                {"input_name": s.input_name, "output_name": s.output_name, "data_type": s.data_type,
                 "dims": list(s.dims), "initial_state": initial, "use_same_buffer_for_input_output": s.same_buffer,
                 "use_growable_memory": False}
            )  # fmt: skip
        out: dict = {
            "max_sequence_idle_microseconds": self.idle_us,
            "control_input": controls,
            "state": states,
            "iterative_sequence": False,
        }
        if self.strategy == "oldest":
            out["oldest"] = {
                "max_candidate_sequences": self.max_candidates,
                "preferred_batch_size": list(self.preferred),
                "max_queue_delay_microseconds": self.oldest_delay_us,
                "preserve_ordering": self.preserve_ordering,
            }
        elif self.strategy_given:
            out["direct"] = {
                "max_queue_delay_microseconds": self.direct_delay_us,
                "minimum_slot_utilization": self.min_slot_utilization,
            }
        return out


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
    if not 0 <= number < _UINT64:
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


def _corrid_tensor(datatype: str, corrid: int | str, shape: tuple) -> np.ndarray:
    """The CORRID control's value: a string ID as text, an integer ID in the
    control's integer type (Triton copies the uint64's low bytes: a narrower
    type gets the ID modulo its width)."""
    if datatype == "BYTES":
        return np.full(shape, corrid if isinstance(corrid, str) else "", dtype=object)
    dtype = BY_NAME[datatype].numpy
    value = corrid if isinstance(corrid, int) else 0
    raw = np.array([value % (1 << (8 * dtype.itemsize))], dtype=f"<u{dtype.itemsize}").view(dtype)
    return np.full(shape, raw[0], dtype=dtype)


# -- requests -------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class SequenceRequest:
    """One request's place in a sequence: its correlation ID (an unsigned
    integer or a string; 1 and "1" are different sequences, as in Triton),
    whether it starts and ends the sequence, and ``owner``: who the sequence
    belongs to (the caller's team, else its user, else "" for anonymous
    callers); the same ID of another owner is another sequence."""

    corrid: int | str
    start: bool = False
    end: bool = False
    owner: str = ""

    @property
    def key(self) -> tuple:
        return (self.owner, self.corrid)

    def describe(self) -> str:
        return f'"{self.corrid}"' if isinstance(self.corrid, str) else str(self.corrid)


def sequence_parameters(parameters: dict | None) -> tuple[int | str, bool, bool]:
    """(sequence_id, sequence_start, sequence_end) of request parameters,
    type-checked as Triton's front ends do: the ID an unsigned 64-bit
    integer or a string (0 or "": not part of a sequence), the flags
    booleans. Raises InvalidInput."""
    if not parameters:
        return 0, False, False
    corrid = parameters.get("sequence_id", 0)
    if isinstance(corrid, bool) or not isinstance(corrid, int | str) or (
        isinstance(corrid, int) and not 0 <= corrid < _UINT64
    ):  # fmt: skip
        raise InvalidInput(
            f"Unable to parse 'sequence_id': expected an unsigned 64-bit integer or a string, got {corrid!r}"
        )
    flags = []
    for name in ("sequence_start", "sequence_end"):
        value = parameters.get(name, False)
        if not isinstance(value, bool):
            raise InvalidInput(f"Unable to parse '{name}': expected a boolean, got {value!r}")
        flags.append(value)
    return corrid, flags[0], flags[1]


def request_for(
    policy: SequencePolicy | None, model: str, ids: tuple[int | str, bool, bool], rows: int, owner: str
) -> SequenceRequest | None:
    """The :class:`SequenceRequest` of a request to a model with sequence
    batching (None without), from its :func:`sequence_parameters` ``ids``.
    Raises InvalidInput with Triton's messages: a correlation ID whose type
    the CORRID control cannot take, a batch of more than one row, no
    correlation ID."""
    corrid, start, end = ids
    if policy is None:
        return None
    found = policy.control(CORRID)
    if found is not None:
        name, control = found
        sent = "BYTES" if isinstance(corrid, str) else "UINT64"
        if (sent == "BYTES") != (control.datatype == "BYTES"):
            raise InvalidInput(
                f"sequence batching control '{name}' data-type is '{sent}', but model '{model}' expects "
                f"'{control.datatype}'"
            )
    if policy.batched and rows > 1:
        raise InvalidInput(
            f"inference request to model '{model}' must specify batch-size 1 due to requirements of sequence batcher"
        )
    if corrid == 0 or corrid == "":
        raise InvalidInput(f"inference request to model '{model}' must specify a non-zero or non-empty correlation ID")
    return SequenceRequest(corrid, start, end, owner)


def split_draw(parameters: dict | None, owner: str) -> float | None:
    """A traffic split's draw for a request of a sequence: the same number in
    [0, 1) for every request of the sequence (so that a canary split sends
    whole sequences to one version); None for other requests."""
    corrid = parameters.get("sequence_id") if parameters else None
    if not corrid or isinstance(corrid, bool):
        return None
    digest = hashlib.blake2b(f"{owner}\0{type(corrid).__name__}\0{corrid}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / _UINT64


def owner_of(principal) -> str:
    """Who a caller's sequences belong to (see SequenceRequest.owner), from
    its rate-limit :class:`~inference.ports.Principal`."""
    if principal.team:
        return f"team:{principal.team}"
    if principal.user:
        return f"user:{principal.user}"
    return ""
