"""The page scripts share one socket client and one local-time formatter (static/live.js).

Read as text, no browser: a second hand-written WebSocket client or a page formatting
times itself would quietly bring back a reconnect policy or a date format of its own."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
STATIC = ROOT / "static"
TEMPLATES = ROOT / "templates"
SHARED = "live.js"
SCRIPT_SRC = re.compile(r"""<script\s+src="\{% static '([^']+)' %\}""")


def _page_scripts() -> dict[str, str]:
    return {path.name: path.read_text() for path in sorted(STATIC.glob("*.js"))}


def _offenders(pattern: re.Pattern[str]) -> list[str]:
    return [name for name, text in _page_scripts().items() if name != SHARED and pattern.search(text)]


def test_only_the_shared_module_opens_websockets():
    assert re.search(r"new\s+WebSocket\s*\(", (STATIC / SHARED).read_text())
    assert _offenders(re.compile(r"new\s+(window\.)?WebSocket\b|\bWebSocket\s*\(")) == []


def test_only_the_shared_module_formats_with_the_readers_locale():
    assert "toLocaleString" in (STATIC / SHARED).read_text()
    assert _offenders(re.compile(r"toLocale\w*|Intl\.DateTimeFormat|Intl\.NumberFormat")) == []


def test_no_page_script_schedules_its_own_reconnect():
    # The backoff lives in live.js; a page that doubles a delay is writing its own.
    assert _offenders(re.compile(r"Math\.min\(\s*\w+\s*\*\s*2")) == []


def test_the_frame_loads_the_shared_module_before_every_other_script():
    base = SCRIPT_SRC.findall((TEMPLATES / "base.html").read_text())
    assert SHARED in base
    # theme.js comes first, undeferred, so a page never paints in the other theme; it
    # uses nothing of live.js.
    ours = [name for name in base if not name.startswith("vendor/") and name != "theme.js"]
    assert ours[0] == SHARED, base


def test_every_page_that_uses_the_shared_module_extends_the_frame():
    users = {name for name, text in _page_scripts().items() if name != SHARED and "River." in text}
    assert {"river.js", "run.js", "runs.js", "session.js", "approvals.js", "overview.js"} <= users
    loaded_by: dict[str, list[Path]] = {}
    for template in TEMPLATES.rglob("*.html"):
        for name in SCRIPT_SRC.findall(template.read_text()):
            loaded_by.setdefault(name, []).append(template)
    for name in sorted(users):
        assert loaded_by.get(name), f"{name} is loaded by no template"
        for template in loaded_by[name]:
            if template.name == "base.html":
                continue
            text = template.read_text()
            included = template.name.startswith("_")  # a partial: its includers must extend the frame
            includers = ([t for t in TEMPLATES.rglob("*.html")
                          if str(template.relative_to(TEMPLATES)) in t.read_text()] if included else [template])
            assert includers, f"{template} is included nowhere"
            for page in includers:
                assert '{% extends "base.html" %}' in page.read_text(), f"{page} loads {name} without the frame"
            assert "live.js" not in text  # loaded once, by the frame


def test_the_unused_htmx_websocket_extension_is_gone():
    assert not list((STATIC / "vendor").glob("htmx-ext-ws*"))
    assert "htmx-ext-ws" not in (ROOT / "package.json").read_text()
    assert "htmx-ext-ws" not in (ROOT / "package-lock.json").read_text()
