"""Model uploads: stream the request body into the store's staging area.

:class:`StagingUploadHandler` is a Django upload handler. It writes the
multipart field ``file`` to ``MODEL_STORE_DIR/.tmp/upload-*/model.onnx``
while computing its sha256, and each multipart field ``data`` (a model's
external data: ONNX's way past 2 GB, https://onnx.ai/onnx/repo-docs/ExternalData.html)
beside it under its file name; it refuses more than ``MAX_UPLOAD_BYTES`` in
all (it stops reading the body), flushes each file to disk as it grows
(every ``SYNC_EVERY_BYTES``) and fsyncs it when it is complete.
Nothing is held in memory. The view calls :meth:`StagingUploadHandler.discard` in a
``finally``: whatever was not moved into the store is deleted, also when the
client disconnects mid-body. :func:`preflight` then checks the staged file
before anything reaches the registry.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
from pathlib import Path

import onnx
from django.conf import settings
from django.core.files.uploadedfile import UploadedFile
from django.core.files.uploadhandler import FileUploadHandler, SkipFile, StopUpload
from django.http import QueryDict
from django.utils.datastructures import MultiValueDict

from models_store import storage
from models_store.errors import UploadRefused
from models_store.intake import validation
from models_store.intake.envelope import Envelope

FIELD_NAME = "file"
#: The multipart field of each external data file (its file name is the location the model references).
DATA_FIELD_NAME = "data"
#: What an external data file may be called: a plain file name, no directory.
DATA_NAME = re.compile(r"\A[A-Za-z0-9][A-Za-z0-9_.\-]{0,254}\Z")
#: Room for the multipart envelope and the other form fields around the file.
ENVELOPE_BYTES = 64 * 1024
#: A file being written is flushed to disk each time this many more bytes arrived, so that the fsync
#: at its end waits for at most these (a 1.2 GB file left 1.2 GB of dirty pages, 3.5 s to flush,
#: between the body's end and the answer; bench/upload.py).
SYNC_EVERY_BYTES = 64 * 2**20


def max_upload_bytes() -> int:
    return settings.MAX_UPLOAD_BYTES


def too_large_message(size: int | None = None) -> str:
    got = f" ({size} bytes)" if size is not None else ""
    return f"the file is larger than the upload limit of {max_upload_bytes()} bytes (MAX_UPLOAD_BYTES){got}"


class StagedFile(UploadedFile):
    """An uploaded file already in the store's staging area: ``path``,
    ``sha256`` (hex) and ``size`` (bytes) measured while it was written;
    ``data_files``: the external data files uploaded beside it (then
    :func:`preflight` sets ``sha256`` and ``size`` to cover them too, as the
    store digests an artifact: the model file, then its data files in the
    order the model references them)."""

    def __init__(
        self,
        path: Path,
        sha256: str,
        size: int,
        name: str,
        content_type: str | None,
        data_files: tuple = (),
        outline: str | None = None,
    ):
        super().__init__(file=None, name=name, content_type=content_type, size=size)
        self.path = path
        self.sha256 = sha256
        self.data_files: tuple[Path, ...] = tuple(data_files)
        #: What :class:`~models_store.intake.envelope.Envelope` found wrong with the file's outline as it
        #: streamed in ("" : shaped like an ONNX model; None: not looked at).
        self.outline = outline

    @property
    def directory(self) -> Path:
        return self.path.parent

    def open(self, mode="rb"):
        self.file = open(self.path, mode)  # closed by Django with the request
        return self

    def close(self):
        if self.file is not None:
            self.file.close()


class StagingUploadHandler(FileUploadHandler):
    """Writes the ``file`` field to a staging directory, hashing and
    counting; see the module docstring. Other file fields are skipped; a
    body whose Content-Length is above the limit is not read at all."""

    def __init__(self, request=None):
        super().__init__(request)
        # ``self.file`` (the open staged file) exists only once a file started:
        # Django's parser closes ``handler.file`` whenever the attribute exists.
        self.staging_dir: Path | None = None
        self.too_large = False
        self.staged: StagedFile | None = None
        self.data_files: list[Path] = []
        self.refused = ""  # why a data file cannot be taken (answered 400 by result())
        self._digest = None
        self._size = 0  # of the file being written
        self._total = 0  # of every file so far

    def handle_raw_input(self, input_data, META, content_length, boundary, encoding=None):
        """Refuse a body declared larger than the limit without reading it."""
        if content_length > max_upload_bytes() + ENVELOPE_BYTES:
            self.too_large = True
            return QueryDict(encoding=encoding), MultiValueDict()
        return None

    def new_file(self, field_name, file_name, *args, **kwargs):
        super().new_file(field_name, file_name, *args, **kwargs)
        if field_name == FIELD_NAME and self.staged is None:
            target = storage.MODEL_FILENAME
        elif field_name == DATA_FIELD_NAME and not self.refused:
            target = self._data_target(file_name or "")
            if target is None:
                raise SkipFile()
        else:
            raise SkipFile()
        if self.staging_dir is None:
            self.staging_dir = storage.new_staging_dir("upload-")
        self._target = self.staging_dir / target
        self.file = open(self._target, "wb")  # closed in file_complete
        self._digest = hashlib.sha256() if target == storage.MODEL_FILENAME else None
        self._envelope = Envelope() if self._digest is not None else None
        self._size = 0

    def _data_target(self, file_name: str) -> str | None:
        """The staging name of a data file, or None (and ``refused`` set) for a name it may not have."""
        taken = {path.name for path in self.data_files} | {storage.MODEL_FILENAME}
        if not DATA_NAME.match(file_name) or file_name in taken:
            why = "is taken" if file_name in taken else "is not a plain file name (letters, digits, '_', '.', '-')"
            self.refused = f"external data file {file_name!r} {why}"
            return None
        return file_name

    def receive_data_chunk(self, raw_data, start):
        self._size += len(raw_data)
        self._total += len(raw_data)
        if self._total > max_upload_bytes():
            self.too_large = True
            self._drop()
            raise StopUpload(connection_reset=True)
        self.file.write(raw_data)
        if self._size // SYNC_EVERY_BYTES != (self._size - len(raw_data)) // SYNC_EVERY_BYTES:
            self.file.flush()
            os.fdatasync(self.file.fileno())
        if self._digest is not None:
            self._digest.update(raw_data)
            self._envelope.feed(raw_data)
        return None

    def file_complete(self, file_size):
        self.file.flush()
        os.fsync(self.file.fileno())
        self.file.close()
        if self._digest is None:  # an external data file
            self.data_files.append(self._target)
            return None
        self.staged = StagedFile(
            self._target,
            self._digest.hexdigest(),
            self._size,
            self.file_name or storage.MODEL_FILENAME,
            self.content_type,
            outline=self._envelope.problem(),
        )
        return self.staged

    def upload_interrupted(self):
        self._drop()

    def _drop(self) -> None:
        if hasattr(self, "file"):
            try:
                self.file.close()
            except OSError:  # its buffer cannot be written (a full disk): the file is dropped anyway
                pass
        if self.staging_dir is not None:
            shutil.rmtree(self.staging_dir, ignore_errors=True)
        self.staged = None
        self.data_files = []

    def discard(self) -> None:
        """Delete what is still staged (a no-op once it moved into the store)."""
        self._drop()

    def result(self, required: bool = True) -> StagedFile | None:
        """The staged upload; raises UploadRefused when there is none (None
        instead when not ``required``: an ensemble's upload has no file), and
        for data files sent without a model file."""
        if self.too_large:
            raise UploadRefused(too_large_message(), status=413)
        if self.refused:
            raise UploadRefused(self.refused)
        if self.staged is None and self.data_files:
            raise UploadRefused(
                f"data files (field 'data') without a model file: send the ONNX file as multipart field '{FIELD_NAME}' "
                "with them (an ensemble's upload is its config.pbtxt alone)"
            )
        if self.staged is None and not required:
            return None
        if self.staged is None:
            raise UploadRefused(f"no model file in the upload: send the ONNX file as multipart field '{FIELD_NAME}'")
        self.staged.data_files = tuple(self.data_files)  # whichever came first, the model or its data
        return self.staged


def stage_bytes(data: bytes, name: str) -> StagedFile:
    """``data`` as a staged model file (``name``: what the audit log shows
    as its origin), for uploads that arrive in a request's parameters
    (Triton's repository load with ``file:`` parameters); UploadRefused
    when larger than the upload limit. Remove ``staged.directory`` when done."""
    if len(data) > max_upload_bytes():
        raise UploadRefused(too_large_message(len(data)), status=413)
    directory = storage.new_staging_dir("load-")
    target = directory / storage.MODEL_FILENAME
    with open(target, "wb") as file:
        file.write(data)
        file.flush()
        os.fsync(file.fileno())
    return StagedFile(target, hashlib.sha256(data).hexdigest(), len(data), name, None)


def install(request) -> StagingUploadHandler:
    """Make ``request`` (a Django HttpRequest, before its body is read) stream
    uploads into the store. Call ``discard()`` on the handler when done."""
    handler = StagingUploadHandler(request)
    request.upload_handlers = [handler]
    return handler


def preflight(staged: StagedFile, parse: bool = True) -> None:
    """Checks before a staged file may become a model version: not empty,
    an ONNX model, and its external data exactly the data files uploaded
    with it (a reference such as ``../../etc/passwd`` is never followed; a
    data file the model does not reference is refused). With data files,
    ``staged.sha256`` and ``staged.size`` then cover them too.

    ``parse``: read the model (``onnx.load`` without its external data: a
    ModelProto with an IR version and a graph). Without it (an upload whose
    validation runs off the request, alone, without data files) nothing of
    the model is read here: the outline its bytes showed as they streamed in
    (:class:`~models_store.intake.envelope.Envelope`) must be an ONNX
    model's, and the rest (readable, a graph that checks, no external data)
    is validation's, which fails the version with the reason. The full
    validation (checker, session, warm-up) always runs afterwards.

    Raises UploadRefused with the reason.
    """
    if staged.size == 0:
        raise UploadRefused("the file is empty")
    if staged.outline:
        raise UploadRefused(f"not an ONNX model: {staged.outline}")
    if not parse and not staged.data_files and staged.outline is not None:
        return
    try:
        model = onnx.load(str(staged.path), load_external_data=False)
    except Exception as exc:  # DecodeError, ValueError, ...
        raise UploadRefused(f"not an ONNX model: {exc}") from None
    if not model.ir_version or not model.HasField("graph"):
        raise UploadRefused("not an ONNX model: the file holds no ONNX graph")
    try:
        external = validation.external_data_files(model, staged.directory)
    except validation.ValidationError as exc:
        hint = f" (send each data file as multipart field '{DATA_FIELD_NAME}' under the name the model references)"
        raise UploadRefused(f"{exc}{hint if 'missing external data' in str(exc) else ''}") from None
    uploaded = {path.resolve() for path in staged.data_files}
    foreign = sorted(path.name for path in external if path not in uploaded)
    if foreign:  # e.g. the model file itself: only the data files uploaded with it may be read
        raise UploadRefused(
            f"the model references {', '.join(foreign)} as external data, which is not one of the data files "
            f"uploaded with it (multipart fields '{DATA_FIELD_NAME}')"
        )
    unreferenced = sorted(path.name for path in uploaded - set(external))
    if unreferenced:
        raise UploadRefused(f"the model does not reference the data file(s) {', '.join(unreferenced)}")
    if external:
        staged.sha256, staged.size = storage.digest_files([staged.path, *external])
