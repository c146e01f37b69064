"""The team page in Chromium, as its owner (alice, owner of team ml): a
service account made, a token of it with a role and an expiry shown once
and working on the management API, revoked, the account deactivated;
a member added with a role, changed and removed."""

from __future__ import annotations

from tests.support.browser import confirming, csp_violations
from tests.support.live import bearer, manage, request


def test_an_owner_manages_service_accounts_and_members(page, ui_server, shots):
    manage(
        ui_server, "create_user", "carl", "--password-from-env", env={"MODELHOST_PASSWORD": "Correct-horse-battery-9"}
    )
    page.goto("/teams/")
    assert page.locator("#teams tr[data-team=ml] td.role").inner_text() == "owner"
    page.click("#teams a:text('ml')")
    page.fill("#account-form input[name=name]", "recommender")
    page.click("#account-form button[type=submit]")
    account = page.locator(".service-account[data-account=recommender]")
    assert "recommender@ml.service" in account.inner_text()
    account.locator("select[name=role]").select_option("viewer")
    account.locator("select[name=expires_in]").select_option("30d")
    account.locator("input[name=name]").fill("prod")
    account.locator(".token-form button[type=submit]").click()
    token = page.locator("#token-value").inner_text().strip()
    assert token.startswith("mh_")
    shots.take(page, "team-service-account")
    assert request(ui_server, "GET", "/api/models/", b"", bearer(token))[0] == 200
    page.reload()
    assert page.locator("#token-value").count() == 0  # shown once
    row = page.locator(".service-account[data-account=recommender] tr[data-token=prod]")
    assert "viewer" in row.inner_text()
    asked = confirming(page, row.locator("button:text('Revoke')").click, accept=False)
    assert asked == ["Revoke token prod of recommender? Callers using it get 401 at once."]
    assert request(ui_server, "GET", "/api/models/", b"", bearer(token))[0] == 200  # dismissed: still works
    confirming(page, row.locator("button:text('Revoke')").click)
    assert "revoked" in page.locator(".service-account[data-account=recommender] tr[data-token=prod]").inner_text()
    assert request(ui_server, "GET", "/api/models/", b"", bearer(token))[0] == 401
    asked = confirming(page, page.locator(".service-account[data-account=recommender] button:text('Deactivate')").click)
    assert asked == ["Deactivate service account recommender? Its tokens stop working at once."]
    assert "deactivated" in page.locator(".service-account[data-account=recommender]").inner_text()

    page.fill("#member-form input[name=username]", "carl")
    page.select_option("#member-form select[name=role]", "maintainer")
    page.click("#member-form button[type=submit]")
    assert page.locator("#members tr[data-member=carl] td.role").inner_text() == "maintainer"
    asked = confirming(page, page.locator("#members tr[data-member=carl] button:text('Remove')").click)
    assert asked == ["Remove carl from team ml?"]
    assert page.locator("#members tr[data-member=carl]").count() == 0
    assert csp_violations(page) == []
