"""A second organization's staff user, an organization admin of it with the admin group,
signs in through the form and finds nothing of the first organization: not in River's
pages, not in the Django admin's index or lists, and an object URL of it is a 404."""

from __future__ import annotations

import re
from datetime import timedelta

from django.contrib.auth.models import Group
from django.core.management import call_command
from django.utils import timezone
from playwright.sync_api import expect

from datasources.models import DataSource
from executions.models import Execution
from governance.audit import audit_record
from governance.models import ApprovalRequest
from tenancy.models import Workspace
from tests.browser.catalog_support import other_org_admin
from tests.factories import make_agent

# What only the first organization (the demo's) holds, as the pages would print it.
FIRST_ORG_TEXT = ("Demo Org", "Demo secret agent", "L1 Support Specialist", "Support Analyst", "Support desk (demo)",
                  "Churn of the Oslo office", "demo_secret_write", "Demo auditor")

ADMIN_LISTS = ("/admin/agents/agent/", "/admin/executions/execution/", "/admin/governance/approvalrequest/",
               "/admin/governance/auditlogentry/", "/admin/datasources/datasource/")
PAGES = ("/agents/", "/runs/", "/approvals/", "/audit/", "/data-sources/", "/triggers/", "/")


def _one_of_each(workspace, owner, *, agent_name: str, prompt: str, tool: str, actor_label: str):
    """An agent with a run, a pending approval and an audit entry in ``workspace``."""
    agent = make_agent(workspace=workspace, owner=owner, name=agent_name)
    run = Execution.objects.create(workspace=workspace, agent=agent, agent_version=agent.current_version,
                                   requested_by=owner, input_prompt=prompt, status="completed")
    ApprovalRequest.objects.create(workspace=workspace, execution_id=run.pk, agent_id=agent.pk, tool_name=tool,
                                   expires_at=timezone.now() + timedelta(days=1))
    audit_record(organization_id=workspace.organization_id, workspace_id=workspace.pk, event_type="agent_created",
                 actor_label=actor_label, agent_id=agent.pk)
    return agent


def _assert_nothing_of_the_first_org(page, where: str) -> None:
    html = page.content()
    leaked = [text for text in FIRST_ORG_TEXT if text in html]
    assert leaked == [], f"{where} shows {leaked}"


def test_a_second_organizations_staff_user_sees_nothing_of_the_first(page, demo, page_errors):
    first = _one_of_each(demo["workspace"], demo["admin"], agent_name="Demo secret agent",
                         prompt="Churn of the Oslo office", tool="demo_secret_write", actor_label="Demo auditor")
    assert DataSource.objects.filter(workspace=demo["workspace"], name="Support desk (demo)").exists()

    call_command("admin_group")
    globex_admin = other_org_admin()
    globex_admin.groups.add(Group.objects.get(name="Organization admins"))
    elsewhere = Workspace.objects.get(slug="elsewhere")
    _one_of_each(elsewhere, globex_admin, agent_name="Globex helper", prompt="Globex weekly totals",
                 tool="globex_write", actor_label="Globex auditor")
    DataSource.objects.create(workspace=elsewhere, name="Globex warehouse", type="postgresql",
                              connection_config={"host": "localhost", "port": 5432, "database": "globex"})

    page.goto("/accounts/login/")
    page.get_by_label("Username").fill("globex-admin")
    page.get_by_label("Password").fill("pw-globex-admin-123")
    page.get_by_role("button", name="Sign in").click()
    expect(page).to_have_url(re.compile(r"/$"))

    # The pages show the second organization's own work, and nothing of the first.
    own_text = {"/agents/": "Globex helper", "/runs/": "Globex helper", "/approvals/": "Globex helper",
                "/audit/": "Globex auditor", "/data-sources/": "Globex warehouse"}
    for url in PAGES:
        page.goto(url)
        if url in own_text:
            expect(page.get_by_role("main")).to_contain_text(own_text[url])
        _assert_nothing_of_the_first_org(page, url)

    # The admin: the index and every list show the second organization's rows only.
    page.goto("/admin/")
    expect(page.get_by_role("heading", name=re.compile("administration", re.I))).to_be_visible()
    _assert_nothing_of_the_first_org(page, "/admin/")
    admin_own_text = {"/admin/agents/agent/": "Globex helper", "/admin/executions/execution/": "Globex",
                      "/admin/governance/approvalrequest/": "globex_write",
                      "/admin/governance/auditlogentry/": "Globex auditor",
                      "/admin/datasources/datasource/": "Globex warehouse"}
    for url in ADMIN_LISTS:
        response = page.goto(url)
        assert response.status == 200, url
        expect(page.locator("#result_list")).to_contain_text(admin_own_text[url])
        _assert_nothing_of_the_first_org(page, url)
        page.goto(f"{url}?q=Demo")  # searching does not reach past the organization either
        _assert_nothing_of_the_first_org(page, f"{url}?q=Demo")

    # Direct URLs of the first organization's agent: 404, like an id that does not exist.
    for url in (f"/admin/agents/agent/{first.pk}/change/", f"/admin/agents/agent/{first.pk}/history/",
                f"/admin/agents/agent/{first.pk}/delete/", f"/agents/{first.pk}/"):
        response = page.goto(url)
        assert response.status == 404, url
        _assert_nothing_of_the_first_org(page, url)
    page_errors.clear()  # the 404s are what the test asked for; the browser logs them
