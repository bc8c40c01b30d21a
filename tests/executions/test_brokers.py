"""A run through a real Celery prefork worker with each broker River supports: Redis, and
RabbitMQ (``RIVER_BROKER_URL=amqp://…``). The worker process hosts the run (its run host
and connection pool start in ``worker_process_init``); the model is a scripted
OpenAI-compatible server in this process, reached over HTTP through litellm."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from celery import Celery
from django.conf import settings
from django.db import connection

from executions.models import Execution, ExecutionStep
from executions.services import execution_start, person_run_request
from tests.executions.durable_support import TOOL_NAMES, ScriptServer, completion_text, completion_tool_call
from tests.executions.test_worker_crash import _database_url, wait_until
from tests.factories import make_agent

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

ROOT = Path(settings.BASE_DIR)
RABBITMQ_URL = os.environ.get("RIVER_TEST_RABBITMQ_URL", "amqp://guest:guest@127.0.0.1:5672//")


def _reachable(url: str, port: int) -> bool:
    host = url.split("@")[-1].split("/")[0].split(":")[0] or "127.0.0.1"
    try:
        with socket.create_connection((host, port), timeout=2):
            return True
    except OSError:
        return False


@pytest.fixture(params=["redis", "rabbitmq"])
def broker(request):
    if not os.environ.get("REDIS_URL") or connection.vendor != "postgresql":
        pytest.skip("a real worker needs Redis (channel layer, cache) and the PostgreSQL test database")
    if request.param == "redis":
        return request.param, os.environ["REDIS_URL"]
    if not _reachable(RABBITMQ_URL, 5672):
        if os.environ.get("RIVER_REQUIRE_SERVICES", "").lower() in {"1", "true", "yes"}:
            where = RABBITMQ_URL.split("@")[-1]
            pytest.fail(f"RabbitMQ is not reachable at {where} (start it: rabbitmq-server -detached)")
        pytest.skip("RabbitMQ is not reachable")
    return request.param, RABBITMQ_URL


def test_a_run_goes_through_a_prefork_worker_on_each_broker(broker, workspace, owner, tmp_path):
    kind, url = broker
    queue = f"broker-test-{uuid.uuid4().hex[:10]}"
    agent = make_agent(workspace=workspace, owner=owner, tools=list(TOOL_NAMES), action_level="automated")
    script = [completion_tool_call("durable_slow_read", {"marker": "b1"}, "call_b1"), completion_text("Done.")]
    log = tmp_path / "worker.log"
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings", "DATABASE_URL": _database_url(),
           "RIVER_LLM_MODEL": "scripted-model", "RIVER_LLM_API_KEY": "test-key",
           "DURABLE_MARKER_DIR": str(tmp_path), "LOG_LEVEL": "INFO"}
    if kind == "rabbitmq":
        env["RIVER_BROKER_URL"] = url
    with ScriptServer(script) as server, open(log, "wb") as out:
        env["RIVER_LLM_BASE_URL"] = server.base_url
        celery = Path(sys.executable).parent / "celery"
        worker = subprocess.Popen(
            [str(celery), "-A", "riverapp", "worker", "-P", "prefork", "-c", "1", "-Q", queue,
             "--without-heartbeat", "--without-mingle", "--without-gossip", "-I", "tests.executions.durable_support",
             "-l", "info", "-n", f"{queue}@%h"],
            cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
        )
        try:
            wait_until(lambda: "ready." in log.read_text(errors="replace"), f"the {kind} worker to be ready")
            execution = execution_start(agent=agent, request=person_run_request(
                agent=agent, user=owner, prompt="read once"))
            # Not the current app: River's shared tasks must keep resolving to River's app.
            sender = Celery("river-test-sender", broker=url, set_as_current=False)
            sender.send_task("executions.run_segment", args=[execution.pk], queue=queue)
            # Finished and post-processed: on the worker's run host, since no worker
            # consumes the queue a post_process task would go to.
            finished = wait_until(
                lambda: Execution.objects.filter(pk=execution.pk, status__in=Execution.TERMINAL,
                                                 post_processed_at__isnull=False).first(),
                f"the run to finish and be post-processed through {kind}")
        finally:
            worker.terminate()
            worker.wait(timeout=30)
    text = log.read_text(errors="replace")
    assert finished.status == Execution.Status.COMPLETED, text[-3000:]
    assert finished.result["summary"] == "Done."
    assert ExecutionStep.objects.filter(execution_id=execution.pk, tool_name="durable_slow_read").exists()
    assert ("amqp://" in text) == (kind == "rabbitmq")  # the worker says which broker it took
    assert "guest:guest" not in text  # and never prints the broker's password
