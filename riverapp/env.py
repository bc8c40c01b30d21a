"""Typed readers for settings that come from the environment.

Each reader fails with ImproperlyConfigured naming the variable, so a bad value
stops River at startup instead of surfacing later as an obscure error.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlparse

from django.core.exceptions import ImproperlyConfigured

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def env_str(name: str, default: str | None = None) -> str | None:
    value = os.environ.get(name)
    return default if value is None else value


def env_password(name: str, *, min_length: int) -> str | None:
    """An optional password: unset or empty means None (one is generated later)."""
    value = os.environ.get(name)
    if not value:
        return None
    if len(value) < min_length or value != value.strip():
        raise ImproperlyConfigured(
            f"{name} must be at least {min_length} characters, without leading or trailing spaces"
        )
    return value


def env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None:
        return default
    lowered = raw.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name} must be a boolean (true/false/1/0), got {raw!r}")


def env_int(name: str, default: int, *, minimum: int | None = None) -> int:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be an integer, got {raw!r}") from None
    if minimum is not None and value < minimum:
        raise ImproperlyConfigured(f"{name} must be at least {minimum}, got {value}")
    return value


def env_float(name: str, default: float, *, minimum: float = 0.0, maximum: float | None = None) -> float:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be a number, got {raw!r}") from None
    if value != value or value < minimum or (maximum is not None and value > maximum):  # NaN too
        bound = f"between {minimum:g} and {maximum:g}" if maximum is not None else f"at least {minimum:g}"
        raise ImproperlyConfigured(f"{name} must be {bound}, got {raw!r}")
    return value


def env_list(name: str, default: list[str]) -> list[str]:
    raw = os.environ.get(name)
    if raw is None:
        return default
    return [item.strip() for item in raw.split(",") if item.strip()]


def env_choice(name: str, default: str, *, choices: tuple[str, ...]) -> str:
    """One of ``choices`` (case-insensitive); unset or empty means the default."""
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    value = raw.strip().lower()
    if value not in choices:
        raise ImproperlyConfigured(f"{name} must be one of {', '.join(choices)}, got {raw!r}")
    return value


def env_timezone(name: str, default: str) -> str:
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    value = os.environ.get(name) or default
    try:
        ZoneInfo(value)
    except (ZoneInfoNotFoundError, ValueError):
        raise ImproperlyConfigured(f"{name} is not a known time zone: {value!r}") from None
    return value


def database_from_url(name: str, url: str) -> dict:
    """Turn a DATABASE_URL into a Django DATABASES entry (postgres or sqlite)."""
    parsed = urlparse(url)
    scheme = parsed.scheme
    if scheme in {"postgres", "postgresql", "pgsql"}:
        if not parsed.path.strip("/"):
            raise ImproperlyConfigured(f"{name} must name a database: {scheme}://user@host:port/dbname")
        options: dict = {key: values[-1] for key, values in parse_qs(parsed.query).items()}
        # Django's cursors bind parameters on the client and never prepare. A
        # threshold lets the few statements River sends as server-side prepared
        # statements (the run journal's per-turn write) be prepared; ``none``
        # turns that off, e.g. behind a pooler that cannot keep prepared statements.
        threshold = options.pop("prepare_threshold", "5").strip().lower()
        if threshold in {"", "none"}:
            options["prepare_threshold"] = None
        elif threshold.isdigit():
            options["prepare_threshold"] = int(threshold)
        else:
            raise ImproperlyConfigured(f"{name}: prepare_threshold must be a whole number or 'none', got {threshold!r}")
        return {
            "ENGINE": "common.postgresql",  # Django's, with the pool's cheap check (common.dbcheck)
            "NAME": unquote(parsed.path.lstrip("/")),
            "USER": unquote(parsed.username or ""),
            "PASSWORD": unquote(parsed.password or ""),
            "HOST": parsed.hostname or "",
            "PORT": str(parsed.port or ""),
            "CONN_MAX_AGE": 60,
            "CONN_HEALTH_CHECKS": True,
            "OPTIONS": options,
        }
    if scheme == "sqlite":
        path = unquote(url[len("sqlite:///") :]) if url.startswith("sqlite:///") else ""
        if not path:
            raise ImproperlyConfigured(f"{name} must be sqlite:///path/to/file.sqlite3")
        return {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": path,
            "OPTIONS": {
                "timeout": 30,
                "transaction_mode": "IMMEDIATE",
                "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
            },
        }
    raise ImproperlyConfigured(
        f"{name} must start with postgres://, postgresql:// or sqlite:///, got {scheme or 'nothing'!r}"
    )


def database_behind_transaction_pooler(entry: dict) -> dict:
    """The DATABASES entry for a PostgreSQL reached through a pooler in transaction mode
    (PgBouncer's ``pool_mode = transaction``), where consecutive transactions of one
    client may run on different server sessions: no server-side cursors (a named
    cursor outlives its transaction only on its own session) and no prepared
    statements (PgBouncer before 1.21 does not carry them across sessions). River keeps
    no other session state across transactions: its advisory locks are transaction
    locks, its ``SET``s are ``SET LOCAL``, it never ``LISTEN``s."""
    if not entry["ENGINE"].endswith("postgresql"):
        return entry
    return {**entry, "DISABLE_SERVER_SIDE_CURSORS": True,
            "OPTIONS": {**entry["OPTIONS"], "prepare_threshold": None}}


def validate_redis_url(name: str, url: str | None) -> str | None:
    if not url:
        return None
    if urlparse(url).scheme not in {"redis", "rediss"}:
        raise ImproperlyConfigured(f"{name} must start with redis:// or rediss://, got {url!r}")
    return url


def validate_broker_url(name: str, url: str | None) -> str | None:
    """A Celery broker: Redis or RabbitMQ (AMQP)."""
    if not url:
        return None
    if urlparse(url).scheme not in {"redis", "rediss", "amqp", "amqps"}:
        raise ImproperlyConfigured(
            f"{name} must start with redis://, rediss://, amqp:// or amqps:// (Redis or RabbitMQ), got {url!r}")
    return url


def env_network_allow_list(name: str, default: list[str]) -> list[str]:
    """Comma-separated entries, each ``public``, an IP address, a CIDR range or a host name."""
    import ipaddress
    import re

    entries = env_list(name, default)
    label = r"[A-Za-z0-9_]([A-Za-z0-9_-]{0,61}[A-Za-z0-9])?"
    hostname = re.compile(rf"^(?=.{{1,253}}$){label}(\.{label})*\.?$")
    for entry in entries:
        if entry.lower() == "public":
            continue
        try:
            ipaddress.ip_network(entry.strip("[]"), strict=False)
            continue
        except ValueError:
            pass
        last = entry.rstrip(".").rsplit(".", 1)[-1]
        if not hostname.match(entry) or last.isdigit():
            raise ImproperlyConfigured(
                f"{name} entries must be 'public', an IP address, a CIDR range or a host name, got {entry!r}"
            )
    return entries


def env_command_allow_list(name: str) -> list[str]:
    """Comma-separated absolute paths of executables (the stdio MCP servers River may
    start, docs/mcp.md). Each must exist and be executable when River starts: a typo
    stops startup instead of turning up later as a server that never answers."""
    entries = env_list(name, [])
    for entry in entries:
        path = Path(entry)
        if not path.is_absolute() or any(ch in entry for ch in "\x00\n\r\t ;|&$`<>\"'*?"):
            raise ImproperlyConfigured(f"{name} entries must be absolute paths of executables, got {entry!r}")
        if not path.is_file() or not os.access(path, os.X_OK):
            raise ImproperlyConfigured(f"{name}: {entry!r} is not an executable file")
    return entries


_KEY_ID_CHARS = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")


def env_hmac_keys(name: str, *, min_bytes: int = 32) -> dict[str, bytes] | None:
    """``kid1:base64secret,kid2:base64secret`` as an ordered ``{kid: secret}``; the
    first key is the current one. ``None`` when unset or empty. Errors name the
    variable and the key id, never the secret."""
    import base64
    import binascii

    raw = (os.environ.get(name) or "").strip()
    if not raw:
        return None
    keys: dict[str, bytes] = {}
    for position, item in enumerate(raw.split(","), start=1):
        key_id, sep, encoded = item.strip().partition(":")
        if not sep or not key_id:
            raise ImproperlyConfigured(f"{name}: entry {position} must look like key_id:base64secret")
        if len(key_id) > 32 or not set(key_id) <= _KEY_ID_CHARS:
            raise ImproperlyConfigured(
                f"{name}: key id in entry {position} must be 1-32 letters, digits, '_', '.' or '-'"
            )
        if key_id in keys:
            raise ImproperlyConfigured(f"{name}: key id {key_id!r} appears twice")
        encoded = encoded.strip()
        try:
            secret = base64.b64decode(encoded.replace("-", "+").replace("_", "/"), validate=True)
        except (binascii.Error, ValueError):
            raise ImproperlyConfigured(f"{name}: the secret of key {key_id!r} is not valid base64") from None
        if len(secret) < min_bytes:
            raise ImproperlyConfigured(
                f"{name}: the secret of key {key_id!r} must decode to at least {min_bytes} bytes"
            )
        keys[key_id] = secret
    return keys


def env_ip_networks(name: str) -> list:
    """A comma-separated list of client addresses or CIDR networks (IPv4 or IPv6); a value
    that is neither stops startup naming the variable."""
    import ipaddress

    networks = []
    for item in env_list(name, []):
        try:
            networks.append(ipaddress.ip_network(item, strict=False))
        except ValueError:
            raise ImproperlyConfigured(f"{name}: {item!r} is not an IP address or CIDR network") from None
    return networks


_S3_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")


def artifact_storage_config(kind: str, *, directory: Path, debug: bool) -> dict:
    """The STORAGES entry of the ``artifacts`` alias (docs/artifacts.md).

    ``filesystem``: a FileSystemStorage under ``directory``, files readable by River's
    user only. ``s3``: django-storages' S3 backend, configured by the
    ``RIVER_ARTIFACT_S3_*`` variables; a missing bucket, half a key pair, a bad endpoint
    URL or a missing package stops startup naming the variable. Secrets go into the
    backend's options only, never into an error message."""
    if kind == "filesystem":
        return {
            "BACKEND": "django.core.files.storage.FileSystemStorage",
            "OPTIONS": {"location": str(directory), "file_permissions_mode": 0o600,
                        "directory_permissions_mode": 0o700},
        }
    bucket = (os.environ.get("RIVER_ARTIFACT_S3_BUCKET") or "").strip()
    if not bucket:
        raise ImproperlyConfigured("RIVER_ARTIFACT_S3_BUCKET must be set when RIVER_ARTIFACT_STORAGE=s3")
    if not _S3_BUCKET.fullmatch(bucket) or ".." in bucket:
        raise ImproperlyConfigured(
            f"RIVER_ARTIFACT_S3_BUCKET must be a bucket name (3-63 characters: a-z, 0-9, '.', '-'), got {bucket!r}")
    options: dict = {"bucket_name": bucket, "default_acl": None, "file_overwrite": False,
                     "querystring_auth": True, "signature_version": "s3v4"}
    endpoint = (os.environ.get("RIVER_ARTIFACT_S3_ENDPOINT_URL") or "").strip()
    if endpoint:
        parsed = urlparse(endpoint)
        if parsed.scheme not in {"http", "https"} or not parsed.hostname or parsed.username or parsed.password:
            raise ImproperlyConfigured(
                "RIVER_ARTIFACT_S3_ENDPOINT_URL must be an http:// or https:// URL without credentials, "
                f"got {endpoint.split('@')[-1]!r}")
        if parsed.scheme == "http" and not debug:
            raise ImproperlyConfigured(
                "RIVER_ARTIFACT_S3_ENDPOINT_URL must use https:// when DEBUG is off (files and keys would travel "
                "in clear text)")
        options["endpoint_url"] = endpoint
    region = (os.environ.get("RIVER_ARTIFACT_S3_REGION") or "").strip()
    if region:
        options["region_name"] = region
    access_key = os.environ.get("RIVER_ARTIFACT_S3_ACCESS_KEY_ID") or ""
    secret_key = os.environ.get("RIVER_ARTIFACT_S3_SECRET_ACCESS_KEY") or ""
    if bool(access_key) != bool(secret_key):
        missing = "RIVER_ARTIFACT_S3_SECRET_ACCESS_KEY" if access_key else "RIVER_ARTIFACT_S3_ACCESS_KEY_ID"
        raise ImproperlyConfigured(
            f"{missing} must be set too: give both RIVER_ARTIFACT_S3_ACCESS_KEY_ID and "
            "RIVER_ARTIFACT_S3_SECRET_ACCESS_KEY, or neither (boto3's default credentials)")
    if access_key:
        options.update(access_key=access_key, secret_key=secret_key)
    prefix = (os.environ.get("RIVER_ARTIFACT_S3_PREFIX") or "artifacts").strip().strip("/")
    if not prefix or ".." in prefix.split("/") or any(ord(ch) < 32 for ch in prefix):
        raise ImproperlyConfigured(f"RIVER_ARTIFACT_S3_PREFIX must be a key prefix such as 'artifacts', got {prefix!r}")
    options["location"] = prefix
    options["addressing_style"] = env_choice("RIVER_ARTIFACT_S3_ADDRESSING_STYLE", "auto",
                                             choices=("auto", "path", "virtual"))
    try:
        import storages.backends.s3  # noqa: F401 - django-storages with boto3, pinned in requirements.txt
    except ImportError:
        raise ImproperlyConfigured(
            "RIVER_ARTIFACT_STORAGE=s3 needs the django-storages and boto3 packages (requirements.txt)") from None
    return {"BACKEND": "storages.backends.s3.S3Storage", "OPTIONS": options}
