"""Shared fixtures: a model store per test, the test model repository, a live server."""

from __future__ import annotations

import pytest

from tests.support.repository import build_test_repository
from tests.support.server import LiveServer


@pytest.fixture(autouse=True)
def _model_store(settings, tmp_path):
    """Each test gets an empty MODEL_STORE_DIR (and a fast password hasher:
    the production one is slow on purpose)."""
    settings.MODEL_STORE_DIR = tmp_path / "store"
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture(scope="session")
def test_repository(tmp_path_factory):
    return build_test_repository(tmp_path_factory.mktemp("repository"))


@pytest.fixture(scope="session")
def model_server(test_repository, tmp_path_factory):
    """``manage.py serve`` on the test repository (SQLite, in-process ONNX Runtime)."""
    server = LiveServer(test_repository, tmp_path_factory.mktemp("live"))
    server.start()
    yield server
    code = server.stop()
    assert code == 0, f"serve did not stop cleanly on SIGTERM (status {code}):\n{server.log()}"
