"""A live server with a signed-up user, and headless Chromium driven by Playwright.

Chromium is Debian's package (``apt-get install -y chromium``), never a
browser downloaded by Playwright. Screenshots go to ``test-artifacts/``
(git-ignored); with ``DOCS_SCREENSHOTS=1`` the documented ones are also
written to ``docs/screenshots/`` (the pictures of docs/web-ui.md).
"""

from __future__ import annotations

import os
import secrets
import shutil
from pathlib import Path

import pytest

from tests.support import onnx_models as m
from tests.support.browser import new_page, sign_in
from tests.support.live import manage
from tests.support.server import ROOT, LiveServer

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
]
ARTIFACTS = ROOT / "test-artifacts" / "browser"
DOCS = ROOT / "docs" / "screenshots"


@pytest.fixture(scope="session")
def ui_server(tmp_path_factory):
    """``serve`` with an operator-owned model (scikit-learn digits, imported
    from a repository) and user alice (team ml) with a random password;
    webhooks to 127.0.0.1 allowed, retried after 0.2 s."""
    from models_store.management.commands.build_demo_repository import CONFIG, build_models

    repository = tmp_path_factory.mktemp("ui-repository")
    payload, features = build_models()["digits"]
    m.write_model(repository, "digits", payload, config=CONFIG.format(name="digits", features=features))
    hooks = {"WEBHOOK_ALLOWED_HOSTS": "127.0.0.1", "WEBHOOK_RETRY_SECONDS": "0.2", "WEBHOOK_RETRY_MAX_SECONDS": "0.5"}
    server = LiveServer(
        repository,
        tmp_path_factory.mktemp("ui-live"),
        extra_env={"REGISTRY_POLL_SECONDS": "0.2", "CHART_FLUSH_SECONDS": "1", "ROLLOUT_TICK_SECONDS": "0.3", **hooks},
    )
    server.start()
    password = secrets.token_urlsafe(16)
    manage(server, "create_user", "alice", "--team", "ml", "--password-from-env", env={"MODELHOST_PASSWORD": password})
    server.credentials = ("alice", password)
    server.token = manage(server, "create_token", "alice", "test-setup").strip()  # to arrange state through the API
    yield server
    assert server.stop() == 0, server.log()


@pytest.fixture(scope="session")
def browser():
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: apt-get install -y chromium (the browser tests need it)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


class Shots:
    """Saves screenshots to test-artifacts/ (and docs/screenshots/ when asked)."""

    def __init__(self):
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        self.docs = os.environ.get("DOCS_SCREENSHOTS") == "1"
        if self.docs:
            DOCS.mkdir(parents=True, exist_ok=True)

    def take(self, target, name: str, *, full_page: bool = False, doc: bool = False) -> Path:
        """Screenshot a page (or an element, ``target`` being a locator) as ``name``.png."""
        path = ARTIFACTS / f"{name}.png"
        if hasattr(target, "goto"):
            target.screenshot(path=str(path), full_page=full_page)
        else:
            target.screenshot(path=str(path))
        assert path.stat().st_size > 1000
        if self.docs and doc:
            shutil.copyfile(path, DOCS / f"{name}.png")
        return path


@pytest.fixture(scope="session")
def shots():
    return Shots()


@pytest.fixture(scope="session")
def signed_in_state(browser, ui_server):
    """Cookies of a session of alice, signed in once through the sign-in form."""
    page = new_page(browser, ui_server)
    sign_in(page, ui_server)
    state = page.context.storage_state()
    page.context.close()
    return state


@pytest.fixture
def page(browser, ui_server, signed_in_state):
    """A fresh browser tab of signed-in alice; the test fails on JavaScript errors."""
    page = new_page(browser, ui_server, signed_in_state)
    yield page
    page.context.close()
    assert page.errors.unexpected() == []
