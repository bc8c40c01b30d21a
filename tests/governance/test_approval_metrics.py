"""Approvals on /metrics: pending requests as a gauge read at scrape, and the time from
request to decision when one is resolved (docs/observability.md#metrics)."""

from __future__ import annotations

import pytest

from tests.governance.test_approvals_api import paused_run
from tests.telemetry.test_metrics import open_metrics, scrape, value  # noqa: F401 - fixture

pytestmark = pytest.mark.django_db


def test_a_pending_approval_is_in_the_gauge_and_its_resolution_is_timed(
        client, open_metrics, workspace, owner, org_admin, api_client_for,  # noqa: F811
        django_capture_on_commit_callbacks):
    before = scrape(client)
    _, approval = paused_run(workspace, owner)
    pending = scrape(client)
    assert value(pending, "river_approvals_pending") == value(before, "river_approvals_pending") + 1

    with django_capture_on_commit_callbacks(execute=True):
        response = api_client_for(org_admin).post(f"/api/v1/approvals/{approval.pk}/resolve",
                                                  {"status": "approved"}, format="json")
    assert response.status_code in (200, 202), response.content
    after = scrape(client)

    assert value(after, "river_approvals_pending") == value(before, "river_approvals_pending")
    assert value(after, "river_approval_time_to_decision_seconds_count", outcome="approved") \
        == value(before, "river_approval_time_to_decision_seconds_count", outcome="approved") + 1
