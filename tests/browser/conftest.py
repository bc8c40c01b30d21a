"""End-to-end browser tests: Playwright for Python driving Debian's Chromium against the
real stack — River's ASGI server (Daphne, Channels) and a separate Celery worker process,
on the suite's PostgreSQL test database and Redis.

How the pieces fit:

- ``river_stack`` (one per package) starts ``manage.py runriver --no-worker`` and a
  ``celery -A riverapp worker`` on the test database that pytest-django created. Both use
  a Redis database of their own (``RIVER_BROWSER_REDIS_URL``, default: the suite's Redis
  host, database 15 minus the suite's), flushed first, so the suite's other tests never
  feed this worker and this worker never runs their tasks. Anything a test wants to see
  live in a page must therefore happen in those processes: through the browser, the HTTP
  API, or a run the worker executes.
- The worker also imports ``tests.executions.durable_support``: test tools that record
  each call in ``river_stack.marker_dir`` and that a test can hold open there, to catch
  a run mid-turn. Only agents that list them use them (the demo's agents do not).
- Tests are ``transaction=True``: rows the test writes are committed, so the server
  sees them, and the tables are emptied after each test.
- ``page`` is a fresh browser context per test (1280×800 unless the test asks for
  another size). Every console error, failed request and uncaught page error is
  collected; the fixture fails the test at teardown when there was one (a test that
  provokes one on purpose calls ``page_errors.clear()`` after checking it).
- ``axe_violations(page)`` runs axe-core (vendored under tests/browser/vendor/ from the
  npm package, never fetched) and returns the serious and critical violations.
- ``screenshot(page, name)`` saves ``var/screenshots/<name>.png`` (git-ignored), so
  every run leaves current pictures; docs/screenshots/ holds the committed ones.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse, urlunparse

import pytest
from django.conf import settings
from django.test import Client

ROOT = Path(__file__).resolve().parents[2]
VENDOR = Path(__file__).resolve().parent / "vendor"
SCREENSHOTS = ROOT / "var" / "screenshots"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
START_DEADLINE_SECONDS = 90
# How long a page may take to show what a test waits for (a run on the worker included).
WAIT_MS = 30_000

# Playwright's sync API runs an event loop in this thread; the ORM calls the tests make
# between browser steps are plain blocking calls, which Django would otherwise refuse.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")


def _required() -> bool:
    return os.environ.get("RIVER_REQUIRE_BROWSER", "").lower() in {"1", "true", "yes"}


def pytest_collection_modifyitems(config, items):
    here = Path(__file__).resolve().parent
    ours = [item for item in items if here in Path(str(item.fspath)).resolve().parents]
    for item in ours:
        # The server must see what the test writes: committed rows, tables emptied after.
        item.add_marker(pytest.mark.django_db(transaction=True))
    reasons = []
    if CHROMIUM is None:
        reasons.append("Chromium is not installed (apt-get install chromium)")
    try:
        import playwright  # noqa: F401
    except ImportError:
        reasons.append("Playwright for Python is not installed (make install-dev)")
    if not (os.environ.get("REDIS_URL") and settings.DATABASES["default"]["ENGINE"].endswith("postgresql")):
        reasons.append("browser tests run on PostgreSQL and Redis (scripts/test.py finds them)")
    if not reasons:
        return
    for item in ours:
        if _required():
            item.add_marker(pytest.mark.usefixtures("_browser_prerequisites_missing"))
        else:
            item.add_marker(pytest.mark.skip(reason="; ".join(reasons)))
    config.stash[_MISSING] = "; ".join(reasons)


_MISSING = pytest.StashKey[str]()


@pytest.fixture
def _browser_prerequisites_missing(request):
    pytest.fail(f"RIVER_REQUIRE_BROWSER=1 but the browser tests cannot run: {request.config.stash[_MISSING]}")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _browser_redis_url() -> str:
    explicit = os.environ.get("RIVER_BROWSER_REDIS_URL")
    if explicit:
        return explicit
    parsed = urlparse(os.environ["REDIS_URL"])
    suite_db = int((parsed.path or "/0").strip("/") or 0)
    return urlunparse(parsed._replace(path=f"/{15 - suite_db}"))


@dataclass
class RiverStack:
    url: str
    redis_url: str
    logs: dict[str, Path]
    # The worker imports tests.executions.durable_support: its ``durable_*`` test tools
    # record each call here and wait while a ``hold-<tool>`` file exists (only agents
    # that list those tools use them; the demo's agents do not).
    marker_dir: Path

    def log_tail(self, lines: int = 60) -> str:
        parts = []
        for name, path in self.logs.items():
            text = path.read_text(errors="replace").splitlines()[-lines:]
            parts.append(f"--- {name} ---\n" + "\n".join(text))
        return "\n".join(parts)


def _wait_ready(url: str, processes: dict[str, subprocess.Popen], stack: RiverStack) -> None:
    deadline = time.monotonic() + START_DEADLINE_SECONDS
    while True:
        for name, process in processes.items():
            assert process.poll() is None, f"{name} exited early:\n{stack.log_tail()}"
        try:
            with urllib.request.urlopen(url + "/health", timeout=5) as answer:
                if answer.status == 200:
                    break
        except (OSError, urllib.error.HTTPError):
            pass
        assert time.monotonic() < deadline, f"River did not answer /health in time:\n{stack.log_tail()}"
        time.sleep(0.2)
    worker_log = stack.logs["worker"]
    while "ready." not in worker_log.read_text(errors="replace"):
        assert processes["worker"].poll() is None, f"the worker exited early:\n{stack.log_tail()}"
        assert time.monotonic() < deadline, f"the worker did not get ready in time:\n{stack.log_tail()}"
        time.sleep(0.2)


@pytest.fixture(scope="package")
def river_stack(django_db_setup, django_db_blocker, tmp_path_factory):
    import redis

    redis_url = _browser_redis_url()
    redis.Redis.from_url(redis_url).flushdb()
    database = settings.DATABASES["default"]
    database_url = (
        f"postgres://{database['USER']}@{database['HOST'] or '127.0.0.1'}:{database['PORT'] or 5432}/{database['NAME']}"
    )
    tmp = tmp_path_factory.mktemp("river-stack")
    marker_dir = tmp / "markers"
    marker_dir.mkdir()
    env = {key: value for key, value in os.environ.items() if not key.startswith("OTEL_EXPORTER_OTLP")}
    env.update(
        DJANGO_SETTINGS_MODULE="tests.settings",
        DATABASE_URL=database_url,
        REDIS_URL=redis_url,
        RIVER_VAR_DIR=str(settings.VAR_DIR),
        RIVER_SQLITE_DATA_DIR=str(settings.RIVER_SQLITE_DATA_DIR),
        RIVER_METRICS_DIR=str(tmp / "metrics"),
        DURABLE_MARKER_DIR=str(marker_dir),
        LOG_LEVEL="INFO",
        PYTHONUNBUFFERED="1",
    )
    env.pop("RIVER_BROKER_URL", None)
    port = _free_port()
    logs = {"web": tmp / "web.log", "worker": tmp / "worker.log"}
    stack = RiverStack(url=f"http://127.0.0.1:{port}", redis_url=redis_url, logs=logs, marker_dir=marker_dir)
    celery = Path(sys.executable).parent / "celery"
    commands = {
        "web": [sys.executable, "manage.py", "runriver", "--no-worker", "--host", "127.0.0.1", "--port", str(port)],
        "worker": [str(celery), "-A", "riverapp", "worker", "-P", "threads", "-c", "4", "--without-heartbeat",
                   "--without-mingle", "--without-gossip", "-I", "tests.executions.durable_support",
                   "-l", "info", "-n", f"browser-{port}@%h"],
    }
    processes: dict[str, subprocess.Popen] = {}
    handles = []
    try:
        for name, command in commands.items():
            handle = logs[name].open("wb")
            handles.append(handle)
            processes[name] = subprocess.Popen(  # noqa: S603 - our interpreter, our arguments
                command, cwd=ROOT, env=env, stdout=handle, stderr=subprocess.STDOUT
            )
        _wait_ready(stack.url, processes, stack)
        yield stack
    finally:
        for process in processes.values():
            if process.poll() is None:
                process.terminate()
        for process in processes.values():
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)
        for handle in handles:
            handle.close()


@pytest.fixture(scope="package")
def chromium_browser(river_stack):
    from playwright.sync_api import expect, sync_playwright

    expect.set_options(timeout=WAIT_MS)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=["--no-sandbox", "--disable-gpu"]
        )
        yield browser
        browser.close()


@pytest.fixture
def page_errors():
    """Console errors, failed requests and page errors of the test's page."""
    return []


@pytest.fixture
def viewport():
    """Override in a test module (or parametrize indirectly) for another screen size."""
    return {"width": 1280, "height": 800}


@pytest.fixture
def page(chromium_browser, river_stack, page_errors, viewport, transactional_db):
    context = chromium_browser.new_context(base_url=river_stack.url, viewport=viewport)
    context.set_default_timeout(WAIT_MS)
    opened = context.new_page()
    opened.on("console", lambda message: message.type == "error" and page_errors.append(f"console: {message.text}"))
    opened.on("pageerror", lambda error: page_errors.append(f"pageerror: {error}"))
    opened.on("requestfailed", lambda request: _note_failed_request(page_errors, request))
    opened.on("response", lambda response: response.status >= 500 and page_errors.append(
        f"HTTP {response.status}: {response.url}"))
    yield opened
    context.close()
    assert page_errors == [], f"the page reported errors: {page_errors}\n{river_stack.log_tail()}"


def _note_failed_request(errors: list[str], request) -> None:
    # A navigation away cancels a page's pending requests (its WebSocket, an htmx poll);
    # that is not an error of the page.
    failure = request.failure or ""
    if "ERR_ABORTED" in failure:
        return
    errors.append(f"request failed: {request.url} ({failure})")


@pytest.fixture
def signed_in(page, river_stack):
    """``signed_in(user)`` signs the page in as ``user`` and returns the page."""

    def sign(user):
        client = Client()
        client.force_login(user)
        cookie = client.cookies[settings.SESSION_COOKIE_NAME]
        page.context.add_cookies([{"name": settings.SESSION_COOKIE_NAME, "value": cookie.value,
                                   "url": river_stack.url}])
        return page

    return sign


def axe_violations(page, *, impacts=("serious", "critical")) -> list[dict]:
    """axe-core's violations of the given impacts on the page as it is now. The script is
    evaluated through the DevTools protocol, which the page's CSP does not govern, so the
    page under test keeps River's real policy."""
    page.evaluate((VENDOR / "axe.min.js").read_text())
    result = page.evaluate("async () => (await axe.run(document, {resultTypes: ['violations']})).violations")
    return [
        {"id": v["id"], "impact": v["impact"], "help": v["help"],
         "nodes": [node["target"] for node in v["nodes"]][:5]}
        for v in result if v["impact"] in impacts
    ]


def screenshot(page, name: str) -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path


@pytest.fixture
def demo(transactional_db):
    """The demo workspace (``seed_demo``): an organization, a workspace, the admin and the
    approver, the support database and its two agents."""
    from django.contrib.auth import get_user_model

    from agents.models import Agent
    from demo.seed import ADMIN_USERNAME, APPROVER_USERNAME, ORG_SLUG, WORKSPACE_SLUG, demo_seed
    from tenancy.models import Workspace

    demo_seed()
    users = get_user_model().objects
    workspace = Workspace.objects.get(organization__slug=ORG_SLUG, slug=WORKSPACE_SLUG)
    return {
        "workspace": workspace,
        "admin": users.get(username=ADMIN_USERNAME),
        "approver": users.get(username=APPROVER_USERNAME),
        "agents": {agent.name: agent for agent in Agent.objects.filter(workspace=workspace)},
    }
