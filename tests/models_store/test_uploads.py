"""The upload handler (streaming into the store's staging area), the store's
orphan cleanup, and the account commands."""

from __future__ import annotations

import hashlib
import io
import os
import time

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command
from django.http.multipartparser import MultiPartParser

from models_store import storage
from models_store.accounts import tokens
from models_store.intake import services as intake
from models_store.intake.uploads import StagingUploadHandler, UploadRefused
from models_store.models import ApiToken, ModelVersion
from tests.support import onnx_models as m
from tests.support.store import person, stage

BOUNDARY = "----modelhost-test"


def _multipart(payload: bytes, field: str = "file", extra: dict | None = None) -> bytes:
    parts = []
    for name, value in (extra or {}).items():
        parts.append(f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'.encode())
    parts.append(
        f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="{field}"; filename="m.onnx"\r\n'
        "Content-Type: application/octet-stream\r\n\r\n".encode()
        + payload
        + b"\r\n"
    )
    parts.append(f"--{BOUNDARY}--\r\n".encode())
    return b"".join(parts)


def _parse(body: bytes, declared: int | None = None, stream=None):
    handler = StagingUploadHandler()
    meta = {
        "CONTENT_TYPE": f"multipart/form-data; boundary={BOUNDARY}",
        "CONTENT_LENGTH": str(len(body) if declared is None else declared),
    }
    post, files = MultiPartParser(meta, stream or io.BytesIO(body), [handler]).parse()
    return handler, post, files


def _staging():
    directory = storage.store_root() / storage.STAGING_DIRNAME
    return sorted(p.name for p in directory.iterdir()) if directory.exists() else []


def test_the_file_streams_into_staging_hashed_and_fsynced():
    payload = os.urandom(3 * 1024 * 1024 + 17)  # several chunks
    handler, post, files = _parse(_multipart(payload, extra={"team": "ml"}))
    staged = handler.result()
    assert files["file"] is staged and post["team"] == "ml"
    assert staged.sha256 == hashlib.sha256(payload).hexdigest() and staged.size == len(payload)
    assert staged.path.read_bytes() == payload
    assert staged.path.parent.parent == storage.store_root() / storage.STAGING_DIRNAME
    handler.discard()
    assert _staging() == []


def test_over_the_limit_stops_reading_and_drops_the_file(settings):
    settings.MAX_UPLOAD_BYTES = 1000
    body = _multipart(b"x" * 5000)
    handler, _, files = _parse(body)
    assert "file" not in files and _staging() == []
    with pytest.raises(UploadRefused) as refused:
        handler.result()
    assert refused.value.status == 413


def test_a_declared_length_over_the_limit_is_not_read(settings):
    settings.MAX_UPLOAD_BYTES = 10

    class Exploding(io.BytesIO):
        def read(self, *args):
            raise AssertionError("the body was read")

    handler, _, files = _parse(b"", declared=10**9, stream=Exploding())
    assert handler.too_large and not files
    with pytest.raises(UploadRefused, match="larger than the upload limit of 10 bytes"):
        handler.result()


def test_a_truncated_body_leaves_nothing():
    body = _multipart(os.urandom(200_000))
    handler, _, files = _parse(body[:120_000], declared=len(body))  # the client went away mid-body
    assert "file" not in files and _staging() == []
    with pytest.raises(UploadRefused, match="no model file"):
        handler.result()


def test_a_read_error_mid_body_leaves_nothing_after_discard():
    body = _multipart(os.urandom(300_000))

    class Disconnecting(io.BytesIO):
        def read(self, size=-1):
            if self.tell() > 100_000:
                raise OSError("connection reset by peer")
            return super().read(size)

    handler = StagingUploadHandler()
    meta = {"CONTENT_TYPE": f"multipart/form-data; boundary={BOUNDARY}", "CONTENT_LENGTH": str(len(body))}
    with pytest.raises(OSError):
        MultiPartParser(meta, Disconnecting(body), [handler]).parse()
    assert len(_staging()) == 1  # what the view's finally clause is for
    handler.discard()
    assert _staging() == []


def test_other_file_fields_are_skipped():
    _handler, _, files = _parse(_multipart(b"abc", field="attachment"))
    assert not files and _staging() == []


# -- cleanup_store -----------------------------------------------------------------
@pytest.mark.db
@pytest.mark.django_db(transaction=True)
def test_cleanup_store_removes_orphans_and_says_what(capsys):

    alice = person("alice", "ml")
    kept = intake.version_upload(model_name="iris", staged=stage(m.affine(1, 1)), actor=alice, team=alice.teams.get())
    orphan_upload = stage(b"half an upload")  # a crashed upload's staging directory
    orphan_artifact = storage.commit_staged("iris", stage(m.affine(5, 5)).directory, "f" * 64, 10)  # no row
    storage.commit_staged("ghost", stage(m.affine(6, 6)).directory, "e" * 64, 10)
    call_command("cleanup_store", "--dry-run", "--min-age", "0")
    dry = capsys.readouterr().out
    assert f"would remove .tmp/{orphan_upload.directory.name}" in dry
    assert storage.artifact_path(orphan_artifact.relpath).exists()
    call_command("cleanup_store", "--min-age", "3600")  # everything is younger: nothing goes
    assert "0 orphan(s) removed" in capsys.readouterr().out
    call_command("cleanup_store", "--min-age", "0")
    out = capsys.readouterr().out.splitlines()
    assert sorted(out[:-1]) == sorted(
        [
            f"removed .tmp/{orphan_upload.directory.name}",
            f"removed iris/{'f' * 64}",
            f"removed ghost/{'e' * 64}",
        ]
    )
    assert out[-1] == "3 orphan(s) removed, 0 missing artifact(s)"
    root = storage.store_root()
    assert sorted(str(p.relative_to(root)) for p in root.rglob("*")) == sorted(
        [".tmp", "iris", f"iris/{kept.sha256}", kept.artifact]
    )
    storage.artifact_path(kept.artifact).unlink()
    call_command("cleanup_store", "--min-age", "0")
    assert f"missing artifact of a version: {kept.artifact}" in capsys.readouterr().out
    assert ModelVersion.objects.count() == 1  # rows are never deleted by the cleanup


def test_find_orphans_respects_age(settings):
    staged = stage(b"x")
    old = time.time() - 7200
    os.utime(staged.directory, (old, old))
    # An old directory whose file is still being written is an upload in progress, not an orphan.
    assert storage.find_orphans(set(), min_age_seconds=3600) == []
    os.utime(staged.path, (old, old))
    young = stage(b"y")
    found = storage.find_orphans(set(), min_age_seconds=3600)
    assert found == [staged.directory] and young.directory.exists()
    with pytest.raises(ValueError, match="not inside the model store"):
        storage.remove_path(storage.store_root().parent)


# -- account commands ----------------------------------------------------------------
@pytest.mark.django_db
def test_create_user_generates_or_reads_the_password(capsys, monkeypatch):
    call_command("create_user", "alice", "--team", "ml", "--team", "vision")
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "created user alice in team(s) ml, vision"
    password = out[1].removeprefix("password: ")
    assert len(password) >= 16
    alice = get_user_model().objects.get(username="alice")
    assert alice.check_password(password) and not alice.is_superuser
    assert sorted(alice.teams.values_list("name", flat=True)) == ["ml", "vision"]

    monkeypatch.setenv("MODELHOST_PASSWORD", "An-env-Password-42")
    call_command("create_user", "root", "--superuser", "--password-from-env")
    assert "password:" not in capsys.readouterr().out
    root = get_user_model().objects.get(username="root")
    assert root.is_superuser and root.check_password("An-env-Password-42")
    with pytest.raises(CommandError, match="already exists"):
        call_command("create_user", "root", "--password-from-env")
    monkeypatch.setenv("WEAK", "1234")
    with pytest.raises(CommandError, match="password refused"):
        call_command("create_user", "weak", "--password-from-env", "WEAK")
    with pytest.raises(CommandError, match="UNSET_VARIABLE is empty or not set"):
        call_command("create_user", "x", "--password-from-env", "UNSET_VARIABLE")


@pytest.mark.django_db
def test_create_token_prints_it_once(capsys):
    person("alice", "ml")
    call_command("create_token", "alice", "ci", "--team", "ml")
    plain = capsys.readouterr().out.strip()
    token = ApiToken.objects.get()
    assert token.key_hash == tokens.hash_token(plain) and token.team.name == "ml"
    with pytest.raises(CommandError, match="unknown user"):
        call_command("create_token", "nobody", "ci")
    with pytest.raises(CommandError, match="unknown team"):
        call_command("create_token", "alice", "ci", "--team", "nope")
