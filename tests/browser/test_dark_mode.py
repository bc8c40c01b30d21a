"""Dark mode: the pages follow prefers-color-scheme, the toggle overrides it and is
remembered by the browser, and the overview, the runs list, a run page and the approvals
inbox pass axe (serious and critical) in both themes, at 1280 and 390 pixels."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from executions.models import Execution
from governance.models import ApprovalRequest
from tests.browser.conftest import axe_violations, screenshot

PHONE = {"width": 390, "height": 844}


def _background(page) -> str:
    return page.evaluate("() => getComputedStyle(document.body).backgroundColor")


@pytest.fixture
def pages(demo):
    """The four pages, with something on each: runs (one of them paused) and a request."""
    agent = demo["agents"]["Support Analyst"]
    now = timezone.now()
    runs = Execution.objects.bulk_create([
        Execution(workspace=demo["workspace"], agent=agent, agent_version=agent.current_version, status=status,
                  outcome=outcome, queued_at=now - dt.timedelta(minutes=i), cost_usd=Decimal("0.02"),
                  input_prompt=f"Which customers churned last month? ({i})")
        for i, (status, outcome) in enumerate([(Execution.Status.COMPLETED, "answered"),
                                               (Execution.Status.FAILED, "failed"),
                                               (Execution.Status.AWAITING_APPROVAL, None)])
    ])
    ApprovalRequest.objects.create(workspace=demo["workspace"], execution_id=runs[2].pk, agent_id=agent.pk,
                                   tool_name="send_email", approver_roles=["admin"],
                                   proposed_payload={"to": "customer@example.com", "subject": "Your refund"},
                                   expires_at=now + dt.timedelta(hours=1))
    return {"overview": "/", "runs": "/runs/", "run": f"/runs/{runs[0].pk}/", "approvals": "/approvals/"}


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_the_main_pages_pass_axe_in_both_themes(signed_in, demo, pages, scheme):
    page = signed_in(demo["admin"])
    page.emulate_media(color_scheme=scheme, reduced_motion="reduce")
    for name, path in pages.items():
        for width, viewport in (("1280", None), ("390", PHONE)):
            if viewport:
                page.set_viewport_size(viewport)
            else:
                page.set_viewport_size({"width": 1280, "height": 800})
            page.goto(path)
            expect(page.locator("h1").first).to_be_visible()
            dark = _background(page) == "rgb(15, 23, 32)"
            assert dark is (scheme == "dark"), (name, _background(page))
            assert axe_violations(page) == [], (name, scheme, width)
            screenshot(page, f"theme-{scheme}-{name}-{width}")


def test_the_toggle_overrides_the_system_and_is_remembered(signed_in, demo, page_errors):
    page = signed_in(demo["admin"])
    page.emulate_media(color_scheme="light")
    page.goto("/runs/")
    toggle = page.get_by_role("button", name="Dark mode")
    expect(toggle).to_have_attribute("aria-pressed", "false")
    assert _background(page) == "rgb(245, 247, 250)"
    toggle.click()
    expect(toggle).to_have_attribute("aria-pressed", "true")
    assert _background(page) == "rgb(15, 23, 32)"
    page.goto("/approvals/")  # another page of the same browser: still dark
    assert _background(page) == "rgb(15, 23, 32)"
    expect(page.get_by_role("button", name="Dark mode")).to_have_attribute("aria-pressed", "true")
    # A system in dark mode and a person who chose light: light.
    page.emulate_media(color_scheme="dark")
    page.get_by_role("button", name="Dark mode").click()
    page.reload()
    assert _background(page) == "rgb(245, 247, 250)"
    expect(page.get_by_role("button", name="Dark mode")).to_have_attribute("aria-pressed", "false")
    # The error pages follow the same choice.
    page.goto("/no/such/page")
    expect(page.get_by_role("heading", name="Page not found")).to_be_visible()
    assert _background(page) == "rgb(245, 247, 250)"
    assert page_errors == ["console: Failed to load resource: the server responded with a status of 404 (Not Found)"]
    page_errors.clear()
