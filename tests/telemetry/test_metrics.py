"""/metrics: 001's families and River's own after real runs, sums across processes,
bounded label values, and who may scrape it."""

from __future__ import annotations

import ipaddress
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from executions import services, tasks
from rivercore.runner import Engine, new_state
from telemetry.metrics import MetricsObserver, webhook_refusal_record
from tests.executions import engine_support as support
from tests.factories import ScriptedLLM, make_agent, text_reply, tool_reply

TOKEN = "metrics-token-0123456789abcdef"
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def open_metrics(settings):
    settings.RIVER_METRICS_TOKEN = TOKEN
    settings.RIVER_METRICS_ALLOWED_IPS = []
    return settings


def scrape(client) -> dict[tuple[str, tuple], float]:
    response = client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    assert response.status_code == 200, response.content
    samples = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def value(samples, name, **labels) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def label_values(samples, name, label) -> set[str]:
    return {dict(key)[label] for (sample_name, key) in samples if sample_name == name and label in dict(key)}


@pytest.mark.django_db
def test_a_real_run_records_001_families_and_river_run_metrics(client, open_metrics, workspace, owner,
                                                               django_capture_on_commit_callbacks):
    agent = make_agent(workspace=workspace, owner=owner, tools=["test_echo"])
    agent_id = str(agent.pk)
    before = scrape(client)
    execution = services.execution_start(agent=agent, request=services.person_run_request(
        agent=agent, user=owner, prompt="Echo it"))
    services.execution_run_segment(execution_id=execution.pk, llm=ScriptedLLM(
        [tool_reply("test_echo", {"text": "hi"}), text_reply("Done.", cost_usd=0.25)]))
    with django_capture_on_commit_callbacks(execute=True):
        assert tasks.post_process(execution.pk) is True
    after = scrape(client)

    def delta(name, **labels):
        return value(after, name, **labels) - value(before, name, **labels)

    assert delta("river_agent_executions_total", status="completed", action_level="automated",
                 agent_id=agent_id) == 1
    assert delta("river_runs_total", status="completed", outcome="answered", trigger_type="manual") == 1
    def family_delta(name):
        return sum(v for (n, _), v in after.items() if n == name) - sum(v for (n, _), v in before.items() if n == name)

    assert family_delta("river_agent_turns_total") == 2
    assert label_values(after, "river_agent_turns_total", "agent_id") >= {agent_id}
    assert family_delta("river_agent_tokens_consumed_total") == 30  # 10 in + 5 out per scripted reply
    assert label_values(after, "river_agent_tokens_consumed_total", "provider") >= {"test"}
    assert family_delta("river_agent_cost_estimate_usd_total") == pytest.approx(0.25)
    assert delta("river_agent_tool_calls_total", tool_name="test_echo", category="execution",
                 status="completed") == 1
    assert delta("river_agent_tool_latency_ms_count", tool_name="test_echo", category="execution") == 1
    assert family_delta("river_agent_llm_latency_ms_count") == 2
    assert delta("river_agent_governance_decisions_total", decision="PROCEED", agent_id=agent_id,
                 policy_type="none") == 1
    assert delta("river_run_queue_wait_seconds_count") == 1
    assert ("river_approvals_pending", ()) in after


def test_a_tool_name_the_model_invented_is_not_a_label_value(client, open_metrics, db):
    from rivercore import observe

    observe.observer_install("metrics", MetricsObserver())
    state, _ = new_state(support.request_for(tools=["test_echo"]))
    invented = "drop_all_tables_now_please"
    Engine(llm=ScriptedLLM([tool_reply(invented, {"x": 1}), text_reply("ok")]), sleep=lambda s: None).run(state)

    samples = scrape(client)

    for name in ("river_agent_tool_calls_total", "river_agent_tool_latency_ms_count"):
        assert invented not in label_values(samples, name, "tool_name")
    assert all(invented not in str(key) for key in samples)


SUBPROCESS = textwrap.dedent("""
    import sys

    import django

    django.setup()  # as a worker process does: settings point prometheus_client at the shared directory
    from rivercore import observe
    from rivercore.runner import Engine, new_state
    from telemetry.metrics import MetricsObserver, metrics_process_dead
    from tests.executions import engine_support as support
    from tests.factories import ScriptedLLM, text_reply, tool_reply

    observe.observer_install("metrics", MetricsObserver())
    for _ in range(int(sys.argv[1])):
        state, _ = new_state(support.request_for(tools=["test_echo"]))
        Engine(llm=ScriptedLLM([tool_reply("test_echo", {"text": "x"}), text_reply("ok")]),
               sleep=lambda s: None).run(state)
    metrics_process_dead()
""")


@pytest.mark.slow  # two worker processes, each loading Django
def test_metrics_recorded_by_two_worker_processes_are_summed(client, open_metrics, db):
    labels = {"tool_name": "test_echo", "category": "execution", "status": "completed"}
    before = value(scrape(client), "river_agent_tool_calls_total", **labels)
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "riverapp.settings"}
    assert env["PROMETHEUS_MULTIPROC_DIR"]
    workers = [subprocess.Popen([sys.executable, "-c", SUBPROCESS, str(n)], cwd=ROOT, env=env) for n in (3, 4)]
    assert [worker.wait(timeout=120) for worker in workers] == [0, 0]

    assert value(scrape(client), "river_agent_tool_calls_total", **labels) - before == 7


def test_webhook_refusals_are_counted_by_a_bounded_reason(client, open_metrics, db):
    before = value(scrape(client), "river_webhook_verification_failures_total", reason="bad_signature")
    webhook_refusal_record(reason="bad_signature")
    assert value(scrape(client), "river_webhook_verification_failures_total", reason="bad_signature") == before + 1


# --- who may scrape -------------------------------------------------------------------

@pytest.mark.django_db
def test_neither_setting_configured_means_no_endpoint(client, settings):
    settings.RIVER_METRICS_TOKEN = None
    settings.RIVER_METRICS_ALLOWED_IPS = []
    assert client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}").status_code == 404


@pytest.mark.django_db
def test_the_bearer_token_opens_it_and_a_wrong_or_missing_one_does_not(client, open_metrics):
    assert client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}").status_code == 200
    wrong = client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}x")
    assert wrong.status_code == 401 and "Bearer" in wrong["WWW-Authenticate"]
    assert client.get("/metrics").status_code == 401


@pytest.mark.django_db
def test_a_users_session_or_api_token_does_not_open_it(client, open_metrics, owner, api_client_for):
    client.force_login(owner)
    assert client.get("/metrics").status_code == 401
    assert api_client_for(owner).get("/metrics").status_code == 401


@pytest.mark.django_db
def test_an_allowed_address_or_network_opens_it_and_others_do_not(client, settings):
    settings.RIVER_METRICS_TOKEN = None
    settings.RIVER_METRICS_ALLOWED_IPS = [ipaddress.ip_network("10.1.0.0/16"), ipaddress.ip_network("::1/128")]
    assert client.get("/metrics", REMOTE_ADDR="10.1.2.3").status_code == 200
    assert client.get("/metrics", REMOTE_ADDR="::1").status_code == 200
    assert client.get("/metrics", REMOTE_ADDR="10.2.0.1").status_code == 401
    assert client.get("/metrics", REMOTE_ADDR="10.2.0.1", HTTP_X_FORWARDED_FOR="10.1.2.3").status_code == 401


def test_a_bad_allowed_ips_value_stops_startup_naming_the_variable():
    env = {**os.environ, "RIVER_METRICS_ALLOWED_IPS": "10.0.0.0/8,not-an-ip",
           "DJANGO_SETTINGS_MODULE": "riverapp.settings"}
    result = subprocess.run([sys.executable, "-c", "import django; django.setup()"], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode != 0 and "RIVER_METRICS_ALLOWED_IPS" in result.stderr


def test_the_grafana_dashboard_queries_only_metrics_river_exports():
    import json
    import re

    from telemetry import metrics

    exported = {m._name for m in vars(metrics).values() if hasattr(m, "_name") and hasattr(m, "_type")}
    exported |= {"river_approvals_pending"}
    dashboard = json.loads((ROOT / "docs" / "grafana" / "river.json").read_text())
    names = set()
    for panel in dashboard["panels"]:
        for target in panel["targets"]:
            names |= set(re.findall(r"\b(river_[a-z_]+)", target["expr"]))
    suffixes = ("_total", "_bucket", "_count", "_sum")
    bases = {next((n[: -len(s)] for s in suffixes if n.endswith(s) and n[: -len(s)] in exported), n) for n in names}
    assert bases <= exported, bases - exported
    assert len(bases) >= 14
