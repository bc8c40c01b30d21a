"""Start a run from the overview: the dialog opens on "Start a run", keeps the keyboard
inside, closes on Escape (focus back on the button), shows the server's errors next to
the field, and lands on the new run's page; the page /runs/start works without the
dialog; axe passes in light and dark, at 1280 and 390 pixels."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from executions.models import Execution
from tests.browser.conftest import axe_violations, screenshot

PHONE = {"width": 390, "height": 844}


def _open(page):
    page.goto("/")
    page.get_by_role("link", name="Start a run").click()
    dialog = page.get_by_role("dialog", name="Start a run")
    expect(dialog).to_be_visible()
    expect(dialog.get_by_label("Agent")).to_be_focused()
    return dialog


def _expected_400s(page_errors) -> None:
    """The server answers a wrong form with a 400, which Chromium logs; nothing else."""
    assert page_errors and all("status of 400" in error for error in page_errors)
    page_errors.clear()


def test_the_dialog_starts_a_run_and_opens_its_page(signed_in, demo, page_errors):
    page = signed_in(demo["admin"])
    dialog = _open(page)

    # Escape closes it and gives the focus back to the button that opened it.
    page.keyboard.press("Escape")
    expect(dialog).to_be_hidden()
    expect(page.get_by_role("link", name="Start a run")).to_be_focused()

    # Keyboard only: Enter opens it again; Tab stays inside the dialog.
    page.keyboard.press("Enter")
    expect(dialog).to_be_visible()
    expect(dialog.get_by_label("Agent")).to_be_focused()
    for _ in range(8):
        page.keyboard.press("Tab")
        inside = page.evaluate("() => !!document.activeElement.closest('dialog')"
                               " || document.activeElement === document.body")
        assert inside

    # The server's error next to the field, in the dialog.
    dialog.get_by_label("Agent").select_option(label="Support Analyst")
    dialog.get_by_role("button", name="Start run").click()
    expect(dialog.locator("#id_prompt_error")).to_have_text("This field is required.")
    expect(dialog.get_by_label("Agent")).to_have_value(str(demo["agents"]["Support Analyst"].pk))
    assert not Execution.objects.exists()
    _expected_400s(page_errors)

    dialog.get_by_label("Request").fill("How many tickets are open?")
    dialog.get_by_role("button", name="Start run").click()
    expect(page).to_have_url(re.compile(r"/runs/\d+/$"))
    run = Execution.objects.get()
    assert page.url.endswith(f"/runs/{run.pk}/") and run.input_prompt == "How many tickets are open?"
    assert run.requester_id == demo["admin"].pk
    expect(page.locator("h1")).to_contain_text("Support Analyst")


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_the_dialog_passes_axe_at_both_widths(signed_in, demo, scheme, page_errors):
    page = signed_in(demo["admin"])
    page.emulate_media(color_scheme=scheme, reduced_motion="reduce")
    for width, viewport in (("1280", {"width": 1280, "height": 800}), ("390", PHONE)):
        page.set_viewport_size(viewport)
        dialog = _open(page)
        dialog.get_by_role("button", name="Start run").click()
        expect(dialog.locator("#id_agent_error")).to_be_visible()
        assert axe_violations(page) == [], (scheme, width)
        screenshot(page, f"start-run-dialog-{scheme}-{width}")
        page.keyboard.press("Escape")
    _expected_400s(page_errors)


def test_without_the_dialog_the_page_does_the_same(signed_in, demo, page_errors):
    page = signed_in(demo["admin"])
    page.goto("/runs/start")
    expect(page.get_by_role("heading", name="Start a run", level=1)).to_be_visible()
    page.get_by_label("Agent", exact=True).select_option(label="Support Analyst")
    page.get_by_role("button", name="Start run").click()
    expect(page.locator("#id_prompt_error")).to_be_visible()
    assert axe_violations(page) == []
    screenshot(page, "start-run-page-1280")
    _expected_400s(page_errors)
    page.get_by_label("Request").fill("Summarise yesterday's tickets")
    page.get_by_role("button", name="Start run").click()
    expect(page).to_have_url(re.compile(r"/runs/\d+/$"))
