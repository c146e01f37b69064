"""Shared fixtures: a model store per test, the test model repository, a live server."""

from __future__ import annotations

import os

import pytest
from django.core.files.storage import storages

from tests.support import redis_db
from tests.support.repository import build_test_repository
from tests.support.server import serve_live


@pytest.fixture(autouse=True)
def _model_store(settings, tmp_path):
    """Each test gets an empty MODEL_STORE_DIR (and a fast password hasher:
    the production one is slow on purpose). Sign-in throttling (django-axes)
    is off in process: the test client's ``login()`` authenticates without
    a request, which axes refuses; the live tests (tests/interop/
    test_sign_in_throttling.py) drive it as browsers do."""
    settings.MODEL_STORE_DIR = tmp_path / "store"
    settings.WORKER_CACHE_DIR = tmp_path / "worker-cache"
    # The artifacts' storage backend is the test's store too (not var/models).
    settings.STORAGES = {
        **settings.STORAGES,
        "models": {
            "BACKEND": "django.core.files.storage.FileSystemStorage",
            "OPTIONS": {"location": str(tmp_path / "store")},
        },
    }
    storages._storages.clear()
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    settings.AXES_ENABLED = False
    # The pytest process's own registry (built by the first test that needs the data plane) follows the
    # registry's change signals and beacon, without a polling thread: a thread reading the test database
    # while a test writes it locks SQLite's shared in-memory tables ("database table is locked").
    settings.REGISTRY_POLL_SECONDS = 0


@pytest.fixture(scope="session")
def test_repository(tmp_path_factory):
    return build_test_repository(tmp_path_factory.mktemp("repository"))


#: MODELHOST_TEST_EXECUTOR=workers runs the live-server tests through pinned
#: inference workers (real Redis, database TEST_REDIS_DB) instead of in process.
EXECUTOR = os.environ.get("MODELHOST_TEST_EXECUTOR", "inprocess")
if os.environ.get("PYTEST_XDIST_WORKER") and "TEST_REDIS_PORT" not in os.environ:
    # Tests run in several workers (make test: pytest -n): each gets a Redis of its own.
    os.environ["TEST_REDIS_PORT"] = str(redis_db.start_private_server())
TEST_REDIS_URL = redis_db.url("TEST_REDIS_DB", 9)


@pytest.fixture(scope="session")
def model_server(test_repository, tmp_path_factory):
    """``manage.py serve`` on the test repository (SQLite; ONNX Runtime in
    process, or in a CPU worker when MODELHOST_TEST_EXECUTOR=workers: one
    reached over the worker link's mutual TLS, as from another machine, not
    its Unix socket)."""
    workers = TEST_REDIS_URL if EXECUTOR == "workers" else None
    # Shadow copies wait for idle time up to 60 s (default 50 ms): tests/interop/test_shadow_traffic.py counts every
    # copy compared, which a loaded test machine would otherwise turn into "busy" ones.
    env = {"REQUEST_LOG_LEVEL": "INFO", "SHADOW_WAIT_MS": "60000"}
    yield from serve_live(test_repository, tmp_path_factory.mktemp("live"), env, workers)


def pytest_collection_modifyitems(config, items):
    """In the worker-mode run (MODELHOST_TEST_EXECUTOR=workers), keep only the
    tests whose server runs inference through the executor under test: those
    on ``model_server``. The others start servers of their own that do not
    depend on it (or run both executors themselves) and ran already."""
    if EXECUTOR == "inprocess":
        return
    kept, dropped = [], []
    for item in items:
        (kept if "model_server" in getattr(item, "fixturenames", ()) else dropped).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept
