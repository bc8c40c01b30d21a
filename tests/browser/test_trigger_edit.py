"""Editing a trigger in the browser: a schedule's next run times follow the cron
expression and the time zone as they are typed, a bad expression is named at its field,
and the saved schedule shows its new times on its page. Light and dark, 1280 and 390 px."""

from __future__ import annotations

import re

from playwright.sync_api import expect

from tests.browser.catalog_support import check_and_capture
from triggers.models import Trigger
from triggers.services import trigger_create


def test_edit_a_schedule_and_see_the_next_run_times_change(signed_in, demo, page_errors):
    trigger = trigger_create(actor=demo["admin"], workspace=demo["workspace"],
                             agent=demo["agents"]["L1 Support Specialist"], name="Weekday mornings",
                             trigger_type="scheduled", prompt="Morning digest",
                             config={"cron": "0 8 * * 1-5", "timezone": "Europe/Berlin"})
    page = signed_in(demo["admin"])
    page.goto(f"/triggers/{trigger.pk}/")
    runs = page.locator("#next-runs li")
    expect(runs).to_have_count(3)
    expect(runs.first).to_contain_text(re.compile(r"08:00 CES?T$"))
    page.get_by_role("link", name="Edit", exact=True).click()

    expect(page.get_by_role("heading", name="Edit trigger Weekday mornings", level=1)).to_be_visible()
    expect(runs).to_have_count(3)
    cron = page.get_by_label("When (cron)")
    # htmx binds the field's "input" trigger when the page has loaded (its script is
    # deferred); typing earlier on a busy machine would go unheard.
    page.wait_for_load_state("load")
    cron.fill("30 6 * * *")
    expect(page.locator("#cron-words")).to_have_text("At 06:30.")
    for index in range(3):
        expect(runs.nth(index)).to_contain_text(re.compile(r"06:30 CES?T$"))
    page.get_by_label("Time zone", exact=True).fill("America/New_York")
    for index in range(3):
        expect(runs.nth(index)).to_contain_text(re.compile(r"06:30 E[SD]T$"))
    check_and_capture(page, "trigger-edit")
    page.emulate_media(color_scheme="dark")
    check_and_capture(page, "trigger-edit-dark")
    page.emulate_media(color_scheme="light")

    cron.fill("61 6 * * *")
    error = page.locator("#id_cron-preview-error")
    expect(error).to_contain_text("is not a valid cron expression")
    expect(cron).to_have_attribute("aria-invalid", "true")
    expect(runs).to_have_count(0)
    assert page_errors and all("status of 400" in e for e in page_errors), page_errors
    page_errors.clear()
    cron.fill("30 6 * * *")
    expect(runs).to_have_count(3)
    expect(error).to_have_text("")
    expect(cron).not_to_have_attribute("aria-invalid", "true")

    page.get_by_role("button", name="Save changes").click()
    expect(page.get_by_role("heading", name="Weekday mornings", level=1)).to_be_visible()
    expect(page.get_by_text("Trigger Weekday mornings saved.")).to_be_visible()
    expect(page.get_by_text("At 06:30", exact=False).first).to_be_visible()
    for index in range(3):
        expect(runs.nth(index)).to_contain_text(re.compile(r"06:30 E[SD]T$"))
    check_and_capture(page, "trigger-page-schedule")
    page.emulate_media(color_scheme="dark")
    check_and_capture(page, "trigger-page-schedule-dark")
    config = Trigger.objects.get(pk=trigger.pk).config
    assert (config["cron"], config["timezone"]) == ("30 6 * * *", "America/New_York")


def test_a_refused_save_shows_the_field_at_fault(signed_in, demo, page_errors):
    trigger = trigger_create(actor=demo["admin"], workspace=demo["workspace"],
                             agent=demo["agents"]["L1 Support Specialist"], name="Hot CPU", trigger_type="threshold",
                             config={"expression": "cpu_percent > 90 for 5m"})
    page = signed_in(demo["admin"])
    page.goto(f"/triggers/{trigger.pk}/edit")
    page.get_by_label("When the metric").fill("cpu_percent >")
    page.get_by_role("button", name="Save changes").click()
    expect(page.get_by_role("alert")).to_contain_text("Nothing was saved")
    expect(page.locator("#id_expression_error")).to_be_visible()
    expect(page.get_by_label("When the metric")).to_have_attribute("aria-invalid", "true")
    check_and_capture(page, "trigger-edit-error")
    assert page_errors and all("status of 400" in e for e in page_errors), page_errors  # the refused save
    page_errors.clear()
    assert Trigger.objects.get(pk=trigger.pk).config["expression"] == "cpu_percent > 90 for 5m"


def test_an_editor_is_told_up_front_when_only_disabling_is_open(signed_in, demo):
    from django.contrib.auth import get_user_model

    from tenancy.models import Membership
    from tenancy.permissions import Role

    editor = get_user_model().objects.create_user(username="editor", password="pw-editor-123")
    Membership.objects.create(workspace=demo["workspace"], user=editor, role=Role.EDITOR)
    trigger = trigger_create(actor=demo["admin"], workspace=demo["workspace"],
                             agent=demo["agents"]["L1 Support Specialist"], name="Admin job", trigger_type="manual",
                             run_as_role="admin")
    page = signed_in(editor)
    page.emulate_media(color_scheme="dark")
    page.goto(f"/triggers/{trigger.pk}/edit")
    expect(page.locator("#authority-note")).to_contain_text("You may still disable it")
    check_and_capture(page, "trigger-edit-authority-dark")
    page.get_by_label("Enabled").uncheck()
    page.get_by_role("button", name="Save changes").click()
    expect(page.get_by_text("Trigger Admin job saved.")).to_be_visible()
    expect(page.get_by_role("button", name="Enable")).to_be_visible()
