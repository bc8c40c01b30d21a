"""The run services read one way (start -> queue -> claim/load -> segment -> finish, the
layers contract in pyproject.toml), and no circle runs through the tasks and the run
host: ``executions.tasks`` calls the services and no service imports it (they send
tasks by name); the services use ``executions.runhost`` and it imports none of them
(it is given its post-processor when the app is ready)."""

from __future__ import annotations

import grimp
import pytest

CALLERS = ("executions.tasks", "executions.runhost")


@pytest.fixture(scope="module")
def graph():
    return grimp.build_graph("executions")


def _services(graph) -> list[str]:
    return sorted(m for m in graph.modules if m == "executions.services" or m.startswith("executions.services."))


def test_no_service_imports_the_tasks_and_the_run_host_imports_no_service(graph):
    for service in _services(graph):
        assert graph.find_shortest_chain(importer=service, imported="executions.tasks") is None, service
        assert graph.find_shortest_chain(importer="executions.runhost", imported=service) is None, service


def test_no_circle_among_the_services_tasks_and_run_host(graph):
    modules = [*_services(graph), *CALLERS]
    circles = []
    for a in modules:
        for b in modules:
            if a < b:
                there = graph.find_shortest_chain(importer=a, imported=b)
                back = graph.find_shortest_chain(importer=b, imported=a)
                if there and back:
                    circles.append((there, back))
    assert circles == []


def test_the_tasks_the_services_send_by_name_are_registered():
    from celery import current_app

    from executions.services.queue import POST_PROCESS_TASK, RUN_SEGMENT_TASK
    from executions.tasks import post_process, run_segment

    assert current_app.tasks[RUN_SEGMENT_TASK] is run_segment._get_current_object()
    assert current_app.tasks[POST_PROCESS_TASK] is post_process._get_current_object()
