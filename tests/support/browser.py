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
    page.add_init_script(_RECORD_CSP_VIOLATIONS)
    return page


#: Records each Content-Security-Policy violation of a document (its ``securitypolicyviolation`` events).
_RECORD_CSP_VIOLATIONS = """
window.cspViolations = [];
document.addEventListener("securitypolicyviolation",
  (e) => window.cspViolations.push(`${e.violatedDirective} blocked ${e.blockedURI || "inline"} (${e.sourceFile}:${e.lineNumber})`));
"""


def csp_violations(page) -> list[str]:
    """The Content-Security-Policy violations of the page's document so far,
    from its events and from the console (Chromium reports each there too)."""
    console = [e for e in page.errors if "Content Security Policy" in e]
    return page.evaluate("window.cspViolations") + console


def sign_in(page, server) -> None:
    page.goto("/accounts/login/")
    user, password = server.credentials
    page.fill("#id_username", user)
    page.fill("#id_password", password)
    page.click("button[type=submit]")
    page.wait_for_url("**/models/")


def confirming(page, click, *, accept: bool = True) -> list[str]:
    """Do ``click()`` (which submits a form that asks first: ``data-confirm``), answering the
    browser's native confirmation (accept it, or dismiss it); the questions asked, in order."""
    asked: list[str] = []

    def answer(dialog):
        asked.append(dialog.message)
        dialog.accept() if accept else dialog.dismiss()

    page.on("dialog", answer)
    try:
        click()
        page.wait_for_load_state()
    finally:
        page.remove_listener("dialog", answer)
    return asked
