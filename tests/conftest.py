"""Shared fixtures: an owner, a member and an outsider in another workspace."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from rest_framework.test import APIClient

from executions.write_behind import journal_connections_close
from tenancy.models import Membership, Organization, OrganizationMember, Workspace
from tenancy.permissions import Role
from tenancy.services import token_issue
from tests import scheduling

TESTS = Path(__file__).resolve().parent
SLOW_FOLDERS = (TESTS / "browser",)  # Chromium against a server and a Celery worker
SLOW_FIXTURES = {"live_server", "transactional_db"}  # a server thread; tables emptied after each test


def _is_slow(item) -> bool:
    """Browser tests, tests that run a live server, and ``transaction=True`` tests (they
    commit and truncate every table afterwards) are slow; tests that start servers,
    workers or beat processes say so themselves with ``pytest.mark.slow``."""
    if any(folder in Path(str(item.fspath)).resolve().parents for folder in SLOW_FOLDERS):
        return True
    if SLOW_FIXTURES & set(item.fixturenames):
        return True
    marker = item.get_closest_marker("django_db")
    return bool(marker and (marker.kwargs.get("transaction") or (marker.args and marker.args[0])))


def pytest_addoption(parser):
    parser.addoption("--record-durations", metavar="PATH", default=None,
                     help="write each scope's seconds to PATH (JSON) when the session ends; "
                          "tests/durations.json is what make test orders its workers' files by")


def pytest_configure(config):
    path = config.getoption("--record-durations")
    if path and not hasattr(config, "workerinput"):  # the controlling process sees every report
        config.pluginmanager.register(scheduling.DurationRecorder(Path(path), config.rootpath), "river-durations")


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """Under pytest-xdist (``make test``: ``-n 2``) a worker takes a scope whole, in its
    order (``tests/scheduling.py``: a file, so a module's server starts once; all browser
    tests, so the River stack and Chromium start once; all interop tests, for their live
    ``runriver``'s one database; the files in XDIST_SPREAD test by test), the scopes in the
    order the collection gives them: longest first. (``xdist_group`` marks would say the
    same, but pytest-xdist 3.8 cannot apply them under pytest 9: it renames the tests
    through an attribute pytest no longer reads.)"""
    from xdist.scheduler import LoadScopeScheduling

    class FileScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return scheduling.scope_of(nodeid)

    config.option.loadscopereorder = False  # its reorder is by test count; the collection's is by time
    return FileScheduling(config, log)


def pytest_collection_modifyitems(config, items):
    """Marks the slow tests (``-m "not slow"`` is the fast lane) and skips, on SQLite, the
    tests that need PostgreSQL (``pytest.mark.postgres(reason=...)``). This runs before
    pytest's own ``-m`` selection, which sees the markers added here."""
    from django.conf import settings

    on_sqlite = settings.DATABASES["default"]["ENGINE"].endswith("sqlite3")
    for item in items:
        if _is_slow(item):
            item.add_marker(pytest.mark.slow)
        needs_postgres = item.get_closest_marker("postgres")
        if needs_postgres and on_sqlite:
            why = needs_postgres.kwargs.get("reason") or (needs_postgres.args[0] if needs_postgres.args else "")
            item.add_marker(pytest.mark.skip(reason=f"needs PostgreSQL: {why}" if why else "needs PostgreSQL"))
    if hasattr(config, "workerinput"):  # an xdist worker: the scheduler hands out scopes in this order
        items[:] = scheduling.longest_first(items, is_slow=_is_slow, seconds=scheduling.measured())


@pytest.fixture(scope="session", autouse=True)
def _journal_connections_closed(django_db_setup, django_db_blocker):
    """Durable runs in the tests open journal connections (executions.write_behind);
    they are closed before the test database is dropped, which PostgreSQL refuses
    while a session is connected."""
    yield
    journal_connections_close()


@pytest.fixture
def org(db):
    return Organization.objects.create(name="Acme", slug="acme")


@pytest.fixture
def workspace(org):
    return Workspace.objects.create(organization=org, name="Support", slug="support")


@pytest.fixture
def other_org(db):
    return Organization.objects.create(name="Globex", slug="globex")


@pytest.fixture
def other_workspace(other_org):
    return Workspace.objects.create(organization=other_org, name="Elsewhere", slug="elsewhere")


def _user(username: str):
    return get_user_model().objects.create_user(
        username=username, password="pw-" + username, email=f"{username}@example.com"
    )


@pytest.fixture
def owner(workspace):
    """Admin of the workspace (not an org admin)."""
    user = _user("owner")
    Membership.objects.create(workspace=workspace, user=user, role=Role.ADMIN)
    return user


@pytest.fixture
def org_admin(org):
    user = _user("orgadmin")
    OrganizationMember.objects.create(organization=org, user=user, role=OrganizationMember.OrgRole.ADMIN)
    return user


@pytest.fixture
def member(workspace):
    """An analyst: may query and run agents, may not create or approve."""
    user = _user("member")
    Membership.objects.create(workspace=workspace, user=user, role=Role.ANALYST)
    return user


@pytest.fixture
def editor(workspace):
    user = _user("editor")
    Membership.objects.create(workspace=workspace, user=user, role=Role.EDITOR)
    return user


@pytest.fixture
def outsider(other_workspace):
    """Admin of another organization's workspace: sees none of ours."""
    user = _user("outsider")
    Membership.objects.create(workspace=other_workspace, user=user, role=Role.ADMIN)
    return user


@pytest.fixture
def api_client_for():
    def make(user) -> APIClient:
        client = APIClient()
        if user is not None:
            client.credentials(HTTP_AUTHORIZATION=f"Bearer {token_issue(user=user).plaintext}")
        return client

    return make


from tests.fakes.openai_server import fake_openai  # noqa: E402,F401 - shared fixture


@pytest.fixture(autouse=True)
def _no_dns_for_data_sources(monkeypatch):
    """Data source hosts are resolved before River connects (datasources.network).
    In tests a name resolves only when listed here, so no test sends a DNS query."""
    from datasources import network

    known = {"localhost": ["127.0.0.1"]}
    monkeypatch.setattr(network, "resolver", lambda host, port: list(known.get(host.lower().rstrip("."), [])))


def _decimal_settings(context) -> tuple:
    return (context.prec, context.rounding, context.Emin, context.Emax, context.capitals, context.clamp,
            sorted(signal.__name__ for signal, on in context.traps.items() if on))


@pytest.fixture(autouse=True)
def _decimal_context_kept(request):
    """Each test starts from Python's default decimal context. One that leaves the
    thread's context changed (once seen in CI: a tiny precision with Inexact trapped,
    from a cause not found) is named in a warning, and the context is reset so the
    change does not spill into later tests."""
    import decimal
    import warnings

    default = _decimal_settings(decimal.DefaultContext)
    yield
    left = _decimal_settings(decimal.getcontext())
    if left != default:
        decimal.setcontext(decimal.Context())
        warnings.warn(f"{request.node.nodeid} left the decimal context changed: {left}", stacklevel=1)


@pytest.fixture
def durable_tool_records():
    """The durable test tools' call and hook records, empty before and after the test."""
    from tests.executions.durable_support import CALLS, HOOKS

    CALLS.clear()
    HOOKS.clear()
    yield CALLS, HOOKS
    CALLS.clear()
    HOOKS.clear()


SEEN_OBSERVATIONS: set[tuple[str, bool]] = set()  # (kind of body, ok) of every observation checked


@pytest.fixture(autouse=True)
def _observations_read_back_as_shown(monkeypatch):
    """Every observation step the engine records anywhere in the suite must read back
    (rivercore.steps.observation_seen, what the offline planner's view is built from)
    as exactly the tool message the model was shown."""
    from rivercore.contracts import StepType
    from rivercore.runner import Engine
    from rivercore.steps import observation_seen, tool_message

    real_add = Engine._add

    def checked_add(self, state, step_type, **fields):
        new = real_add(self, state, step_type, **fields)
        if new.step_type == StepType.OBSERVATION and new.messages and new.call_id and new.tool_name:
            ok, body = observation_seen(new)
            assert new.messages == [tool_message(new.call_id, new.tool_name, body, ok=ok)], new
            kind = next((key for key in ("result", "error", "rejected", "blocked", "suggestion_recorded")
                         if key in (new.output or {})), "other")
            SEEN_OBSERVATIONS.add((kind, ok))
        return new

    monkeypatch.setattr(Engine, "_add", checked_add)
