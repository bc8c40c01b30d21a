"""Run the suite against PostgreSQL and Redis when reachable, else the embedded stack.

DATABASE_URL / REDIS_URL win when set. RIVER_REQUIRE_SERVICES=1 turns a missing
service into a failure instead of a fallback (CI sets it).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlparse

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_PG = "postgres://postgres@127.0.0.1:5432/river"
DEFAULT_REDIS = "redis://127.0.0.1:6379/0"


def reachable(url: str) -> bool:
    parsed = urlparse(url)
    default_port = {"redis": 6379, "rediss": 6379}.get(parsed.scheme, 5432)
    try:
        with socket.create_connection((parsed.hostname or "127.0.0.1", parsed.port or default_port), timeout=2):
            return True
    except OSError:
        return False


def main() -> int:
    env = dict(os.environ)
    require = env.get("RIVER_REQUIRE_SERVICES", "").lower() in {"1", "true", "yes"}
    database_url = env.get("DATABASE_URL") or DEFAULT_PG
    redis_url = env.get("REDIS_URL") or DEFAULT_REDIS
    problems = []
    if database_url.startswith("postgres") and not reachable(database_url):
        problems.append(f"PostgreSQL at {urlparse(database_url).hostname}:{urlparse(database_url).port or 5432}")
    if not reachable(redis_url):
        problems.append(f"Redis at {urlparse(redis_url).hostname}:{urlparse(redis_url).port or 6379}")
    if problems and require:
        print(f"RIVER_REQUIRE_SERVICES=1 but unreachable: {', '.join(problems)}", file=sys.stderr)
        return 2
    if any(p.startswith("PostgreSQL") for p in problems):
        database_url = f"sqlite:///{ROOT / 'var' / 'test.sqlite3'}"
    env["DATABASE_URL"] = database_url
    # Tests never export spans anywhere (they use the SDK's in-memory exporter).
    for name in [n for n in env if n.startswith("OTEL_EXPORTER_OTLP")]:
        env.pop(name)
    if any(p.startswith("Redis") for p in problems):
        env.pop("REDIS_URL", None)
        env["RIVER_TEST_REDIS_URL"] = ""
    else:
        env["RIVER_TEST_REDIS_URL"] = redis_url
        env.setdefault("REDIS_URL", redis_url)
    db_kind = "PostgreSQL" if database_url.startswith("postgres") else "SQLite (embedded)"
    broker_kind = "Redis" if env.get("REDIS_URL") else "in-memory broker and channel layer (embedded)"
    print(f"River tests: database={db_kind}; broker/channels={broker_kind}", flush=True)
    cmd = [sys.executable, "-m", "pytest", *sys.argv[1:]]
    return subprocess.call(cmd, cwd=ROOT, env=env)  # noqa: S603 - our own interpreter and args


if __name__ == "__main__":
    sys.exit(main())
