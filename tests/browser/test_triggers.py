"""Triggers in the browser: the list, a schedule described in words as it is typed, a
webhook trigger whose new endpoint's secret is shown once, a trigger's firings."""

from __future__ import annotations

import re

from playwright.sync_api import expect

from tests.browser.catalog_support import check_and_capture, other_org_admin
from triggers.models import Trigger
from triggers.services import trigger_create, trigger_fire


def test_a_schedule_and_a_webhook_trigger_are_created_and_the_secret_shown_once(signed_in, demo):
    agent = demo["agents"]["L1 Support Specialist"]
    page = signed_in(demo["admin"])
    page.goto("/triggers/")
    expect(page.get_by_text("No triggers yet")).to_be_visible()
    page.get_by_role("link", name="New trigger").click()
    page.get_by_role("link", name="Schedule").click()
    page.get_by_label("Name", exact=True).fill("Weekday mornings")
    page.get_by_label("Agent", exact=True).select_option(label=agent.name)
    # htmx binds the field's "input" trigger when the page has loaded (its script is
    # deferred); typing earlier on a busy machine would go unheard.
    page.wait_for_load_state("load")
    page.get_by_label("When (cron)").fill("0 8 * * 1-5")
    expect(page.locator("#cron-words")).to_have_text("At 08:00, Monday through Friday.")
    check_and_capture(page, "trigger-new-schedule")
    page.get_by_role("button", name="Save trigger").click()
    expect(page.get_by_role("heading", name="Weekday mornings", level=1)).to_be_visible()
    expect(page.get_by_text("At 08:00, Monday through Friday")).to_be_visible()

    page.goto("/triggers/new/?type=event")
    page.get_by_label("Name", exact=True).fill("Urgent tickets")
    page.get_by_label("Agent", exact=True).select_option(label=agent.name)
    page.get_by_label("Webhook endpoint").select_option("__new__")
    page.get_by_label("New endpoint name").fill("helpdesk")
    page.get_by_label("Event type").fill("ticket.created")
    page.get_by_label("Only when").fill("payload.priority == 'urgent'")
    page.get_by_role("button", name="Save trigger").click()
    secret = page.locator("#webhook-secret")
    expect(secret).to_contain_text(re.compile(r"^whsec_"))
    value = secret.inner_text().strip()
    check_and_capture(page, "trigger-webhook-secret")
    page.get_by_role("link", name="Go to the trigger").click()
    expect(page.get_by_role("heading", name="Urgent tickets", level=1)).to_be_visible()
    assert value not in page.content()


def test_the_list_and_a_trigger_page_with_its_firings(signed_in, demo):
    agent = demo["agents"]["L1 Support Specialist"]
    trigger = trigger_create(actor=demo["admin"], workspace=demo["workspace"], agent=agent, name="CRM calls",
                             trigger_type="api", prompt="Look at ticket {{ payload.ticket_id }}")
    trigger_fire(trigger=trigger, payload={"ticket_id": 1}, source="api", dedupe_key="one")
    trigger_fire(trigger=trigger, payload={"ticket_id": 1}, source="api", dedupe_key="one")
    page = signed_in(demo["admin"])
    page.goto("/triggers/")
    row = page.get_by_role("row", name=re.compile("CRM calls"))
    expect(row).to_contain_text("API call")
    expect(row).to_contain_text("Skipped")
    check_and_capture(page, "triggers")
    row.get_by_role("link", name="CRM calls").click()
    firings = page.get_by_role("region", name="Firings")
    expect(firings).to_contain_text("Duplicate delivery")
    expect(firings.get_by_role("link", name=re.compile(r"^Run \d+"))).to_be_visible()
    check_and_capture(page, "trigger-page")
    page.get_by_role("button", name="Disable").click()
    expect(page.get_by_role("button", name="Enable")).to_be_visible()
    assert not Trigger.objects.get(pk=trigger.pk).enabled


def test_another_organization_sees_none_of_it(signed_in, demo, page_errors):
    trigger = trigger_create(actor=demo["admin"], workspace=demo["workspace"],
                             agent=demo["agents"]["L1 Support Specialist"], name="CRM calls", trigger_type="api")
    page = signed_in(other_org_admin())
    page.goto("/triggers/")
    expect(page.get_by_text("CRM calls")).to_have_count(0)
    assert page.goto(f"/triggers/{trigger.pk}/").status == 404
    page_errors.clear()
