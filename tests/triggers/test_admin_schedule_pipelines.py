"""The admin keeps a scheduled trigger's beat entry in step, refuses a pipeline loop in
plain words, and shows metric samples and pipeline hand-offs read-only."""

import pytest
from django_celery_beat.models import PeriodicTask

from tenancy.models import Membership
from tests.factories import make_agent
from triggers.metrics import metrics_ingest
from triggers.schedule import periodic_task_name

pytestmark = pytest.mark.django_db

FORMSET = {"firings-TOTAL_FORMS": "0", "firings-INITIAL_FORMS": "0"}


def test_editing_a_scheduled_trigger_in_the_admin_moves_its_periodic_task(admin_client, admin_user, workspace,
                                                                          make_trigger):
    Membership.objects.create(workspace=workspace, user=admin_user, role="admin")  # edits bind it to them
    trigger = make_trigger(name="Mornings", trigger_type="scheduled", config={"cron": "0 8 * * *"})
    response = admin_client.post(f"/admin/triggers/trigger/{trigger.pk}/change/", {
        "name": "Mornings", "prompt": "", "config": '{"cron": "15 7 * * 1", "timezone": "Europe/Paris"}', **FORMSET})
    assert response.status_code == 302
    entry = PeriodicTask.objects.get(name=periodic_task_name(trigger.pk))
    assert (entry.crontab.minute, entry.crontab.hour, entry.crontab.day_of_week) == ("15", "7", "1")
    assert str(entry.crontab.timezone) == "Europe/Paris" and entry.enabled is False  # "enabled" left unticked
    page = admin_client.get("/admin/django_celery_beat/periodictask/").content.decode()
    assert periodic_task_name(trigger.pk) in page


def test_deleting_a_trigger_in_the_admin_removes_its_periodic_task(admin_client, make_trigger):
    trigger = make_trigger(name="Mornings", trigger_type="scheduled", config={"cron": "0 8 * * *"})
    response = admin_client.post(f"/admin/triggers/trigger/{trigger.pk}/delete/", {"post": "yes"})
    assert response.status_code == 302
    assert not PeriodicTask.objects.filter(name=periodic_task_name(trigger.pk)).exists()


def test_a_pipeline_loop_is_refused_in_the_admin(admin_client, make_trigger, workspace, owner, active_agent):
    other = make_agent(workspace=workspace, owner=owner, name="Other")
    make_trigger(name="after-triage", agent=other, trigger_type="workflow",
                 config={"upstream_agent": str(active_agent.pk)})
    stage = make_trigger(name="after-third", trigger_type="workflow",
                         config={"upstream_agent": str(make_agent(workspace=workspace, owner=owner, name="Third").pk)})
    response = admin_client.post(f"/admin/triggers/trigger/{stage.pk}/change/", {
        "name": "after-third", "enabled": "on", "prompt": "", "config": f'{{"upstream_agent": "{other.pk}"}}',
        **FORMSET})
    assert response.status_code == 200
    assert "Upstream agent: Following this agent closes a cycle" in response.content.decode()


def test_metric_samples_and_hand_offs_are_listed_read_only(admin_client, workspace):
    metrics_ingest(workspace=workspace, samples=[{"name": "queue_depth", "value": 3}])
    page = admin_client.get("/admin/triggers/metricsample/")
    assert page.status_code == 200 and "queue_depth" in page.content.decode()
    assert admin_client.get("/admin/triggers/metricsample/add/").status_code == 403
    assert admin_client.get("/admin/triggers/pipelinehandoff/").status_code == 200
    assert admin_client.get("/admin/triggers/pipelinehandoff/add/").status_code == 403
