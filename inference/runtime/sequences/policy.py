"""Sequence batching as Triton configures it (``sequence_batching`` in
config.pbtxt): the policy, the sequence parameters of a request, and the
tensors the server supplies to the model.

A stateful model receives the requests of a sequence in order, on one model
instance, with control inputs the server fills in (Triton's
``CONTROL_SEQUENCE_START``, ``_END``, ``_READY``, ``_CORRID``) and, with
implicit state (``state { input_name output_name ... }``), the state output
of the sequence's previous request as a state input. The scheduler that does
this is :mod:`inference.runtime.sequences.batcher`; this module holds what it
and the data plane share:

- :class:`SequencePolicy` from the model configuration's JSON, checked with
  Triton's rules and messages (:mod:`inference.runtime.sequences.config`), and
  echoed back as Triton returns it (``NormalizeModelConfig``, ``ModelConfigToJson``);
- :func:`sequence_parameters`: a request's ``sequence_id``,
  ``sequence_start`` and ``sequence_end``, type-checked as Triton's front
  ends do (server ``src/http_server.cc``, ``src/grpc/infer_handler.cc``),
  a string ID at most :data:`MAX_ID_BYTES` long (Triton sets no limit; we
  do, before anything is kept under it); :func:`shown`: an ID as error
  messages and logs show it, cut to :data:`SHOWN_ID_CHARS` characters;
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
import reprlib
from dataclasses import dataclass

import numpy as np

from inference.protocol.datatypes import BY_NAME
from inference.protocol.errors import InvalidInput
from inference.runtime.sequences.config import (
    CORRID,
    END,
    IDLE_DEFAULT_US,
    READY,
    START,
    UINT64_END,
    Control,
    SequenceConfigError,
    State,
    fields,
)

#: The longest string sequence ID, in bytes of UTF-8 (longer: InvalidInput).
MAX_ID_BYTES = 256
#: Characters of a sequence ID that error messages and logs show ("..." after).
SHOWN_ID_CHARS = 64


def shown(value: object) -> str:
    """``value`` (a sequence ID, or what was sent as one) as messages show
    it: its text (a short ``repr`` for what is neither a string nor an
    integer), the first :data:`SHOWN_ID_CHARS` characters and "..." when
    longer."""
    text = str(value) if isinstance(value, int | str) else reprlib.repr(value)
    return text if len(text) <= SHOWN_ID_CHARS else text[:SHOWN_ID_CHARS] + "..."


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
            return cls(**fields(config, max_batch_size, model))
        except SequenceConfigError:
            raise
        except (AttributeError, KeyError, TypeError, ValueError) as exc:  # not the message's JSON form
            raise SequenceConfigError(f"sequence_batching of {model} is malformed: {exc}") from None

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
        """The ID as messages show it (:func:`shown`), a string ID quoted."""
        return f'"{shown(self.corrid)}"' if isinstance(self.corrid, str) else str(self.corrid)


def sequence_parameters(parameters: dict | None) -> tuple[int | str, bool, bool]:
    """(sequence_id, sequence_start, sequence_end) of request parameters,
    type-checked as Triton's front ends do: the ID an unsigned 64-bit
    integer or a string of at most :data:`MAX_ID_BYTES` bytes (UTF-8; 0 or
    "": not part of a sequence), the flags booleans. Raises InvalidInput
    (the ID shown cut, :func:`shown`)."""
    if not parameters:
        return 0, False, False
    corrid = parameters.get("sequence_id", 0)
    if isinstance(corrid, bool) or not isinstance(corrid, int | str) or (
        isinstance(corrid, int) and not 0 <= corrid < UINT64_END
    ):  # fmt: skip
        raise InvalidInput(
            f"Unable to parse 'sequence_id': expected an unsigned 64-bit integer or a string, got {shown(corrid)}"
        )
    if isinstance(corrid, str) and len(corrid.encode()) > MAX_ID_BYTES:
        raise InvalidInput(
            f"'sequence_id' is {len(corrid.encode())} bytes long; at most {MAX_ID_BYTES} are allowed: "
            f'"{shown(corrid)}"'
        )
    flags = []
    for name in ("sequence_start", "sequence_end"):
        value = parameters.get(name, False)
        if not isinstance(value, bool):
            raise InvalidInput(f"Unable to parse '{name}': expected a boolean, got {shown(value)}")
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
    return int.from_bytes(digest, "big") / UINT64_END


def owner_of(principal) -> str:
    """Who a caller's sequences belong to (see SequenceRequest.owner), from
    its rate-limit :class:`~inference.ports.Principal`."""
    if principal.team:
        return f"team:{principal.team}"
    if principal.user:
        return f"user:{principal.user}"
    return ""
