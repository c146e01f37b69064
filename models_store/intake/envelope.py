"""The outline of an ONNX file, checked as its bytes stream in.

An ONNX file is one protobuf message, ``onnx.ModelProto`` (onnx.proto3):
a sequence of fields, each a tag (a varint: field number << 3 | wire type)
and a value (a varint, 8 or 4 bytes, or a varint length and that many
bytes). :class:`Envelope` follows that sequence at the top level only,
skipping over every value (the graph with its weights is one value, field
7), so that an upload learns whether its file is shaped like a model (a
well-formed field sequence that ends where the file ends, holding
``ir_version``, field 1, and ``graph``, field 7) at no cost beyond the
bytes it counts: nothing is parsed or kept, whatever the file's size. What
the model holds (its graph, operators, external data, signature) is left to
validation (:mod:`models_store.intake.validation`), off the request.
https://protobuf.dev/programming-guides/encoding/
"""

from __future__ import annotations

IR_VERSION = 1  # ModelProto.ir_version (int64: wire type 0)
GRAPH = 7  # ModelProto.graph (GraphProto: wire type 2)
#: protobuf wire types: 0 varint, 1 64-bit, 2 length-delimited, 5 32-bit (3 and 4, groups, are not in proto3)
_FIXED = {1: 8, 5: 4}
_MAX_VARINT_BYTES = 10
#: More top-level fields than any model has (opset imports, metadata entries, functions: tens to
#: thousands): past it the file is refused, so that junk made of tiny fields costs little to find out.
MAX_FIELDS = 100_000


class Envelope:
    """Feed it a file's bytes in order (:meth:`feed`), then ask
    :meth:`problem`: "" for the outline of an ONNX model, else why not.
    Memory is constant; the cost is a few operations per field, and a
    length-delimited field's bytes are skipped without being looked at."""

    def __init__(self):
        self._skip = 0  # bytes of the current value still to pass over
        self._varint = 0  # the varint being read, its shift, and what it is (tag, value or length)
        self._shift = 0
        self._reading = "tag"
        self._wire = 0
        self._field = 0
        self._error = ""
        self.fields: set[int] = set()  # top-level field numbers seen (with the right wire type for 1 and 7)
        self.count = 0  # top-level fields seen

    def feed(self, data: bytes) -> None:
        if self._error:
            return
        view, at, end = memoryview(data), 0, len(data)
        while at < end:
            if self._skip:
                step = min(self._skip, end - at)
                self._skip -= step
                at += step
                continue
            byte = view[at]
            at += 1
            self._varint |= (byte & 0x7F) << self._shift
            self._shift += 7
            if byte & 0x80:
                if self._shift >= 7 * _MAX_VARINT_BYTES:
                    self._error = "a varint longer than 10 bytes"
                    return
                continue
            value, self._varint, self._shift = self._varint, 0, 0
            if not self._done(value):
                return

    def _done(self, value: int) -> bool:
        """A varint ended: a tag, a varint value or a length. False on an error."""
        if self._reading == "tag":
            self._field, self._wire = value >> 3, value & 7
            if self._field == 0 or self._wire not in (0, 1, 2, 5):
                self._error = f"byte sequence {value:#x} is no protobuf field tag"
                return False
            if self._field in (IR_VERSION, GRAPH) and self._wire != (0 if self._field == IR_VERSION else 2):
                self._error = f"field {self._field} has the wrong wire type {self._wire} for a ModelProto"
                return False
            self.fields.add(self._field)
            self.count += 1
            if self.count > MAX_FIELDS:
                self._error = f"more than {MAX_FIELDS} top-level fields"
                return False
            if self._wire == 0:
                self._reading = "varint"
            elif self._wire == 2:
                self._reading = "length"
            else:
                self._skip = _FIXED[self._wire]
            return True
        if self._reading == "length":
            self._skip = value
        self._reading = "tag"
        return True

    def problem(self) -> str:
        """The empty string when the bytes fed were the outline of an ONNX model; else what is wrong."""
        if self._error:
            return self._error
        if self._skip or self._shift or self._reading != "tag":
            return "the file ends inside a field (truncated?)"
        if GRAPH not in self.fields:
            return "the file holds no ONNX graph"
        if IR_VERSION not in self.fields:
            return "the file has no ir_version"
        return ""
