"""Signing in through the real form, the frame every page shares, and signing out."""

from __future__ import annotations

import re

from playwright.sync_api import expect

from tests.browser.conftest import axe_violations, screenshot


def test_sign_in_with_the_form_shows_the_frame_and_sign_out_ends_the_session(page, demo):
    demo["admin"].set_password("a-long-browser-password")
    demo["admin"].save(update_fields=["password"])

    page.goto("/")
    expect(page).to_have_url(re.compile(r"/accounts/login/\?next=/$"))
    screenshot(page, "sign-in")
    assert axe_violations(page) == []

    page.get_by_label("Username").fill("admin")
    page.get_by_label("Password").fill("wrong password")
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("alert")).to_contain_text("enter a correct username and password")

    page.get_by_label("Password").fill("a-long-browser-password")
    page.get_by_role("button", name="Sign in").click()
    expect(page).to_have_url(re.compile(r"/$"))
    nav = page.get_by_role("navigation", name="Main")
    for section in ("Overview", "Agents", "Runs", "Approvals", "Triggers", "Data sources", "Audit"):
        expect(nav.get_by_role("link", name=re.compile(f"^{section}"))).to_be_visible()
    expect(nav.get_by_role("link", name="Overview")).to_have_attribute("aria-current", "page")
    expect(page.get_by_role("button", name=re.compile("^Notifications"))).to_be_visible()

    page.get_by_role("button", name="Sign out").click()
    expect(page).to_have_url(re.compile(r"/accounts/login/$"))
    page.goto("/approvals/")
    expect(page).to_have_url(re.compile(r"/accounts/login/\?next=/approvals/$"))
