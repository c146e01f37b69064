"""Model uploads: stream the request body into the store's staging area.

:class:`StagingUploadHandler` is a Django upload handler. It writes the
multipart field ``file`` to ``MODEL_STORE_DIR/.tmp/upload-*/model.onnx``
while computing its sha256, refuses more than ``MAX_UPLOAD_BYTES`` (it stops
reading the body), and fsyncs the file when it is complete. Nothing is held
in memory. The view calls :meth:`StagingUploadHandler.discard` in a
``finally``: whatever was not moved into the store is deleted, also when the
client disconnects mid-body. :func:`preflight` then checks the staged file
before anything reaches the registry.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import onnx
from django.conf import settings
from django.core.files.uploadedfile import UploadedFile
from django.core.files.uploadhandler import FileUploadHandler, SkipFile, StopUpload
from django.http import QueryDict
from django.utils.datastructures import MultiValueDict

from models_store import storage, validation

FIELD_NAME = "file"
#: Room for the multipart envelope and the other form fields around the file.
ENVELOPE_BYTES = 64 * 1024


class UploadRefused(ValueError):
    """The uploaded file cannot become a model version; the message says why.
    ``status`` is the HTTP status to answer (400, or 413 for size)."""

    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.status = status


def max_upload_bytes() -> int:
    return settings.MAX_UPLOAD_BYTES


def too_large_message(size: int | None = None) -> str:
    got = f" ({size} bytes)" if size is not None else ""
    return f"the file is larger than the upload limit of {max_upload_bytes()} bytes (MAX_UPLOAD_BYTES){got}"


class StagedFile(UploadedFile):
    """An uploaded file already in the store's staging area: ``path``,
    ``sha256`` (hex) and ``size`` (bytes) measured while it was written."""

    def __init__(self, path: Path, sha256: str, size: int, name: str, content_type: str | None):
        super().__init__(file=None, name=name, content_type=content_type, size=size)
        self.path = path
        self.sha256 = sha256

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
        self._digest = None
        self._size = 0

    def handle_raw_input(self, input_data, META, content_length, boundary, encoding=None):
        """Refuse a body declared larger than the limit without reading it."""
        if content_length > max_upload_bytes() + ENVELOPE_BYTES:
            self.too_large = True
            return QueryDict(encoding=encoding), MultiValueDict()
        return None

    def new_file(self, field_name, file_name, *args, **kwargs):
        super().new_file(field_name, file_name, *args, **kwargs)
        if field_name != FIELD_NAME or self.staging_dir is not None:
            raise SkipFile()
        self.staging_dir = storage.new_staging_dir("upload-")
        self.file = open(self.staging_dir / storage.MODEL_FILENAME, "wb")  # closed in file_complete
        self._digest = hashlib.sha256()
        self._size = 0

    def receive_data_chunk(self, raw_data, start):
        self._size += len(raw_data)
        if self._size > max_upload_bytes():
            self.too_large = True
            self._drop()
            raise StopUpload(connection_reset=True)
        self.file.write(raw_data)
        self._digest.update(raw_data)
        return None

    def file_complete(self, file_size):
        self.file.flush()
        os.fsync(self.file.fileno())
        self.file.close()
        self.staged = StagedFile(
            self.staging_dir / storage.MODEL_FILENAME,
            self._digest.hexdigest(),
            self._size,
            self.file_name or storage.MODEL_FILENAME,
            self.content_type,
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

    def discard(self) -> None:
        """Delete what is still staged (a no-op once it moved into the store)."""
        self._drop()

    def result(self) -> StagedFile:
        """The staged upload; raises UploadRefused when there is none."""
        if self.too_large:
            raise UploadRefused(too_large_message(), status=413)
        if self.staged is None:
            raise UploadRefused(f"no model file in the upload: send the ONNX file as multipart field '{FIELD_NAME}'")
        return self.staged


def install(request) -> StagingUploadHandler:
    """Make ``request`` (a Django HttpRequest, before its body is read) stream
    uploads into the store. Call ``discard()`` on the handler when done."""
    handler = StagingUploadHandler(request)
    request.upload_handlers = [handler]
    return handler


def preflight(staged: StagedFile) -> None:
    """Quick checks before a staged file may become a model version: not
    empty, an ONNX model (a ModelProto with an IR version and a graph), and
    self-contained (no external data: an upload is one file, and a reference
    such as ``../../etc/passwd`` must never be followed). The full validation
    (checker, session, warm-up) runs afterwards as a task.

    Raises UploadRefused with the reason.
    """
    if staged.size == 0:
        raise UploadRefused("the file is empty")
    try:
        model = onnx.load(str(staged.path), load_external_data=False)
    except Exception as exc:  # DecodeError, ValueError, ...
        raise UploadRefused(f"not an ONNX model: {exc}") from None
    if not model.ir_version or not model.HasField("graph"):
        raise UploadRefused("not an ONNX model: the file holds no ONNX graph")
    try:
        external = validation.external_data_files(model, staged.directory)
    except validation.ValidationError as exc:
        raise UploadRefused(str(exc)) from None
    if external:
        raise UploadRefused(
            "the model references external data files; upload a single self-contained ONNX file "
            "(or import the model directory with manage.py import_repository)"
        )
