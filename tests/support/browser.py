"""Browser pages for the web UI tests (Playwright, headless Chromium)."""

from __future__ import annotations


class PageErrors(list):
    """JavaScript errors and console errors of a page."""

    def unexpected(self) -> list[str]:
        return [e for e in self if "status of 4" not in e]  # refused requests the tests make on purpose


def new_page(browser, server, storage_state=None):
    context = browser.new_context(
        viewport={"width": 1280, "height": 860}, base_url=f"http://{server.http_url}", storage_state=storage_state
    )
    page = context.new_page()
    page.set_default_timeout(20_000)
    page.errors = PageErrors()
    page.on("pageerror", lambda exc: page.errors.append(str(exc)))
    page.on("console", lambda msg: page.errors.append(msg.text) if msg.type == "error" else None)
    return page


def sign_in(page, server) -> None:
    page.goto("/accounts/login/")
    user, password = server.credentials
    page.fill("#id_username", user)
    page.fill("#id_password", password)
    page.click("button[type=submit]")
    page.wait_for_url("**/models/")
