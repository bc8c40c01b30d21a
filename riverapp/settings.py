"""River settings: every value comes from the environment through riverapp.env.

docs/settings.md lists each variable; keep the two in step.
"""

from __future__ import annotations

import os
import secrets
from datetime import timedelta
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

from riverapp.env import (
    artifact_storage_config,
    database_behind_transaction_pooler,
    database_from_url,
    env_bool,
    env_choice,
    env_command_allow_list,
    env_float,
    env_hmac_keys,
    env_int,
    env_ip_networks,
    env_list,
    env_network_allow_list,
    env_password,
    env_str,
    env_timezone,
    validate_broker_url,
    validate_redis_url,
)
from telemetry.logs import LOG_FORMATS, logging_config

# litellm must use its bundled price map: River has no network at run time.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("LITELLM_LOG", "ERROR")

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(env_str("RIVER_VAR_DIR") or BASE_DIR / "var")

DEBUG = env_bool("DEBUG", False)
# With DEBUG on, Django's technical 404, 400 and 500 pages instead of River's own
# (common.error_pages): for a developer who wants the URL patterns or the traceback.
RIVER_DEBUG_TECHNICAL_ERRORS = env_bool("RIVER_DEBUG_TECHNICAL_ERRORS", False)


def _secret_key() -> str:
    configured = env_str("SECRET_KEY")
    if configured:
        return configured
    if not DEBUG:
        raise ImproperlyConfigured(
            "SECRET_KEY is not set. River refuses to start with DEBUG off and no SECRET_KEY; "
            "set SECRET_KEY to a long random value (or DEBUG=true for local development)."
        )
    key_file = VAR_DIR / "secret_key"
    if not key_file.exists():
        VAR_DIR.mkdir(parents=True, exist_ok=True)
        key_file.write_text(secrets.token_urlsafe(50))
        key_file.chmod(0o600)
    return key_file.read_text().strip()


SECRET_KEY = _secret_key()
# Data source credentials and provider API keys are encrypted with this key; it
# defaults to one derived from SECRET_KEY so rotating SECRET_KEY needs care (docs/settings.md).
RIVER_ENCRYPTION_KEY = env_str("RIVER_ENCRYPTION_KEY") or SECRET_KEY


def _audit_hmac_keys() -> dict[str, bytes]:
    """The audit trail's HMAC keys, separate from SECRET_KEY (docs/audit.md)."""
    keys = env_hmac_keys("RIVER_AUDIT_HMAC_KEYS")
    if keys:
        return keys
    if not DEBUG:
        raise ImproperlyConfigured(
            "RIVER_AUDIT_HMAC_KEYS is not set. River refuses to start with DEBUG off and no audit key; "
            "set it to key_id:base64secret (32+ random bytes), e.g. audit1:$(head -c 32 /dev/urandom | base64)."
        )
    key_file = VAR_DIR / "audit_hmac_key"
    if not key_file.exists():
        VAR_DIR.mkdir(parents=True, exist_ok=True)
        key_file.write_text(secrets.token_bytes(32).hex())
        key_file.chmod(0o600)
    return {"dev": bytes.fromhex(key_file.read_text().strip())}


RIVER_AUDIT_HMAC_KEYS = _audit_hmac_keys()

ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]"] if DEBUG else [])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])
for _origin in CSRF_TRUSTED_ORIGINS:
    if not _origin.startswith(("http://", "https://")):
        raise ImproperlyConfigured(f"CSRF_TRUSTED_ORIGINS entries must start with http:// or https://, got {_origin!r}")

INSTALLED_APPS = [
    "riverapp.startup_apps.DaphneRunserverConfig",  # Daphne's runserver, without its server in every process
    "riverapp.startup_apps.AdminConfig",  # the admin, its modules loaded by the URLconf (riverapp/startup_apps.py)
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_celery_beat",
    "channels",
    "common",
    "telemetry",
    "tenancy",
    "datasources",
    "artifacts",
    "governance",
    "toolservers",
    "agents",
    "executions",
    "triggers",
    "web",
    "demo",
    "riverapp",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "common.edge.EdgeLimitsMiddleware",
    "common.edge.SecurityHeadersMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "tenancy.time_zones.TimeZoneMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "common.error_pages.DebugErrorPagesMiddleware",
    "common.dbpool.DatabaseUnavailableMiddleware",
]

ROOT_URLCONF = "riverapp.urls"
ASGI_APPLICATION = "riverapp.asgi.application"
WSGI_APPLICATION = "riverapp.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "web.context.river_nav",
            ],
        },
    },
]

DATABASES = {
    "default": database_from_url(
        "DATABASE_URL", env_str("DATABASE_URL") or f"sqlite:///{VAR_DIR / 'river.sqlite3'}"
    )
}
# River's database is reached through a pooler in transaction mode (PgBouncer): no
# server-side cursors and no prepared statements (riverapp.env, docs/production.md).
RIVER_DB_TRANSACTION_POOLER = env_bool("RIVER_DB_TRANSACTION_POOLER", False)
if RIVER_DB_TRANSACTION_POOLER:
    DATABASES["default"] = database_behind_transaction_pooler(DATABASES["default"])
if DATABASES["default"]["ENGINE"].endswith("sqlite3"):
    Path(DATABASES["default"]["NAME"]).parent.mkdir(parents=True, exist_ok=True)
# The web process borrows connections from a pool (psycopg_pool through Django):
# under ASGI a request's connection is opened in one thread and its "request
# finished" cleanup runs in another, so persistent connections (CONN_MAX_AGE) would
# never be returned. riverapp/asgi.py and `manage.py runriver` turn the pool on, and so
# does each Celery worker process (RIVER_WORKER_DB_POOL). A request that waits longer
# than the timeout for a connection is answered 503 with Retry-After
# (common.dbpool.DatabaseUnavailableMiddleware).
RIVER_DB_POOL = env_bool("RIVER_DB_POOL", False)
# Celery worker processes turn the same pool on after they fork (common.dbpool.worker_pool_enable).
RIVER_WORKER_DB_POOL = env_bool("RIVER_WORKER_DB_POOL", True)
# Per process (web or worker). Four is what one process on one core can keep busy: a
# web process runs its views on a handful of threads, and a worker process's run host
# makes its blocking calls on RIVER_RUN_HOST_IO_THREADS threads, below the pool's size
# so a tool call or the task thread still finds a connection. One web process and one
# worker with two pool processes then hold at most 12 sessions (docs/production.md).
RIVER_DB_POOL_MIN_SIZE = env_int("RIVER_DB_POOL_MIN_SIZE", 1, minimum=0)
RIVER_DB_POOL_MAX_SIZE = env_int("RIVER_DB_POOL_MAX_SIZE", 4, minimum=1)
RIVER_DB_POOL_TIMEOUT_SECONDS = env_int("RIVER_DB_POOL_TIMEOUT_SECONDS", 5, minimum=1)
if RIVER_DB_POOL_MIN_SIZE > RIVER_DB_POOL_MAX_SIZE:
    raise ImproperlyConfigured(
        f"RIVER_DB_POOL_MIN_SIZE ({RIVER_DB_POOL_MIN_SIZE}) must not exceed "
        f"RIVER_DB_POOL_MAX_SIZE ({RIVER_DB_POOL_MAX_SIZE})"
    )
if RIVER_DB_POOL and DATABASES["default"]["ENGINE"].endswith("postgresql"):
    DATABASES["default"]["CONN_MAX_AGE"] = 0  # a pool and persistent connections exclude each other
    DATABASES["default"]["OPTIONS"]["pool"] = {
        "min_size": RIVER_DB_POOL_MIN_SIZE,
        "max_size": RIVER_DB_POOL_MAX_SIZE,
        "timeout": RIVER_DB_POOL_TIMEOUT_SECONDS,
    }
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

REDIS_URL = validate_redis_url("REDIS_URL", env_str("REDIS_URL"))
BROKER_URL = validate_broker_url("RIVER_BROKER_URL", env_str("RIVER_BROKER_URL"))
EMBEDDED = REDIS_URL is None

if REDIS_URL:
    # Short socket timeouts: the cache is advisory on the run path (provider health),
    # so a stuck Redis costs a run a second or two, never a hung worker.
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": REDIS_URL,
                          "OPTIONS": {"socket_connect_timeout": 2, "socket_timeout": 2}}}
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "telemetry.layers.RiverChannelLayer",  # channels_redis, sending to idle groups cheaply
            # Every socket of a web process shares one Redis key for its messages, so the
            # capacity (channels_redis's default is 100) bounds a whole process's backlog:
            # a burst of hundreds of runs' events must not find it full and be dropped.
            "CONFIG": {"hosts": [REDIS_URL], "prefix": env_str("RIVER_CHANNEL_PREFIX", "river"), "capacity": 10000},
        }
    }
    # The broker is Redis unless RIVER_BROKER_URL names another (RabbitMQ: amqp://).
    CELERY_BROKER_URL = BROKER_URL or REDIS_URL
else:
    if BROKER_URL:
        raise ImproperlyConfigured(
            "RIVER_BROKER_URL is set but REDIS_URL is not: River needs Redis for its channel layer and cache "
            "whatever the broker; set REDIS_URL too, or unset RIVER_BROKER_URL for the embedded mode.")
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    CELERY_BROKER_URL = "memory://"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "/"

LANGUAGE_CODE = "en-us"
TIME_ZONE = env_timezone("TIME_ZONE", "UTC")
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = VAR_DIR / "staticfiles"
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}
WHITENOISE_USE_FINDERS = True

# Production hardening: on by default whenever DEBUG is off.
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https") if env_bool("RIVER_BEHIND_TLS_PROXY", False) else None
SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", not DEBUG)
SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 0 if DEBUG else 31536000, minimum=0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = not DEBUG
SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD", not DEBUG)
SESSION_COOKIE_SECURE = env_bool("SESSION_COOKIE_SECURE", not DEBUG)
CSRF_COOKIE_SECURE = env_bool("CSRF_COOKIE_SECURE", not DEBUG)
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"
CSRF_FAILURE_VIEW = "common.edge.csrf_failure"

# The HTTP edge (common.edge, common.parsers): a larger body is a 413 before it is read.
DATA_UPLOAD_MAX_MEMORY_SIZE = env_int("RIVER_MAX_REQUEST_BYTES", 2 * 1024 * 1024, minimum=1024)
RIVER_JSON_MAX_DEPTH = env_int("RIVER_JSON_MAX_DEPTH", 64, minimum=2)
RIVER_QUERY_PARAM_MAX_LENGTH = env_int("RIVER_QUERY_PARAM_MAX_LENGTH", 1000, minimum=100)
SILENCED_SYSTEM_CHECKS = env_list("RIVER_SILENCED_SYSTEM_CHECKS", [])

# A trigger's service identity never signs in, even with a password set on it.
AUTHENTICATION_BACKENDS = ["tenancy.authentication.PasswordBackend"]
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "tenancy.authentication.BearerTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["common.options.IsAuthenticatedOrOptions"],
    "DEFAULT_PARSER_CLASSES": ["common.parsers.JSONParser"],
    "DEFAULT_RENDERER_CLASSES": ["common.renderers.JSONRenderer"],
    "DEFAULT_METADATA_CLASS": "common.options.Metadata",
    "TEST_REQUEST_DEFAULT_FORMAT": "json",
    "DEFAULT_PAGINATION_CLASS": "common.api.Pagination",
    "PAGE_SIZE": 50,
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "common.api.exception_handler",
    "UNAUTHENTICATED_USER": "django.contrib.auth.models.AnonymousUser",
}
SPECTACULAR_SETTINGS = {
    "TITLE": "River API",
    "DESCRIPTION": "Run AI agents safely: agents, executions, governance, data sources.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    # Swagger UI and ReDoc from the pinned drf-spectacular-sidecar package: no CDN.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "SWAGGER_UI_SETTINGS": {"deepLinking": True, "validatorUrl": None},
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "common.schema.error_responses",
    ],
    "COMPONENT_SPLIT_REQUEST": True,
    "ENUM_NAME_OVERRIDES": {
        "AgentStatusEnum": "agents.models.Agent.Status",
        "WorkspaceStatusEnum": "tenancy.models.Workspace.Status",
        "ExecutionStatusEnum": "executions.models.Execution.Status",
        "AccessTokenKindEnum": "tenancy.models.AccessToken.Kind",
        "ReplayKindEnum": "executions.models.ExecutionReplay.Kind",
        "DataSourceTypeEnum": "datasources.models.DataSource.Type",
        "TriggerTypeEnum": "triggers.types.API_TRIGGER_TYPES",
        "SessionMessageRoleEnum": "executions.models.SessionMessage.Role",
        "SessionMessageStateEnum": "executions.models.SessionMessage.State",
        "RunOutcomeEnum": "executions.models.OUTCOME_CHOICES",
        "FiringOutcomeEnum": "triggers.models.TriggerFiring.Outcome",
        "WebhookSchemeEnum": "triggers.models.WebhookScheme",
        "WebhookSchemeChoosableEnum": "triggers.webhooks.CHOOSABLE_SCHEMES",
        "PolicyScopeEnum": "governance.models.POLICY_SCOPE_CHOICES",
        "PolicyTypeEnum": "governance.models.POLICY_TYPE_CHOICES",
        "PolicyEnforcementEnum": "governance.models.ENFORCEMENT_CHOICES",
        "ToolServerTransportEnum": "toolservers.models.ToolServer.Transport",
        "ToolServerHealthEnum": "toolservers.models.ToolServer.Health",
        # A backtest's and an evaluation's progress share their four states.
        "JobStatusEnum": "governance.backtest_models.PolicyBacktest.Status",
    },
}

# Celery: a run segment may hold a task for up to the hard limit, so the broker's
# visibility timeout must be longer or Redis would hand the task to a second worker.
RIVER_SEGMENT_SOFT_LIMIT_SECONDS = env_int("RIVER_SEGMENT_SOFT_LIMIT_SECONDS", 900, minimum=10)
# Delegation (docs/delegation.md): how deep a chain of delegated runs may go, and how
# many tasks one run may delegate.
RIVER_MAX_DELEGATION_DEPTH = env_int("RIVER_MAX_DELEGATION_DEPTH", 3, minimum=0)
RIVER_MAX_DELEGATIONS_PER_RUN = env_int("RIVER_MAX_DELEGATIONS_PER_RUN", 10, minimum=1)
# Sessions and teams (docs/sessions.md): hand-offs one message may go through; the share
# of a session run's prompt its history may take (estimated tokens, the latest turns as
# they were); the longest stored summary of the older turns (characters).
RIVER_MAX_HANDOFFS_PER_MESSAGE = env_int("RIVER_MAX_HANDOFFS_PER_MESSAGE", 5, minimum=0)
RIVER_SESSION_HISTORY_TOKENS = env_int("RIVER_SESSION_HISTORY_TOKENS", 2000, minimum=100)
RIVER_SESSION_SUMMARY_CHARS = env_int("RIVER_SESSION_SUMMARY_CHARS", 4000, minimum=200)
# Workspace memory (docs/memory.md): the newest this many memories of a workspace are kept;
# writing one more forgets the oldest.
RIVER_MEMORY_MAX_PER_WORKSPACE = env_int("RIVER_MEMORY_MAX_PER_WORKSPACE", 10000, minimum=1)
# An agent's long-term memory in a run's prompt (docs/memory.md): at most this many
# memories, the most relevant to the run's question first, within this many tokens.
RIVER_MEMORY_PROMPT_ITEMS = env_int("RIVER_MEMORY_PROMPT_ITEMS", 5, minimum=0)
RIVER_MEMORY_PROMPT_TOKENS = env_int("RIVER_MEMORY_PROMPT_TOKENS", 600, minimum=0)
RIVER_SEGMENT_HARD_LIMIT_SECONDS = RIVER_SEGMENT_SOFT_LIMIT_SECONDS + 60
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_TASK_SOFT_TIME_LIMIT = RIVER_SEGMENT_SOFT_LIMIT_SECONDS
CELERY_TASK_TIME_LIMIT = RIVER_SEGMENT_HARD_LIMIT_SECONDS
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_IGNORE_RESULT = True
CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": RIVER_SEGMENT_HARD_LIMIT_SECONDS * 2}
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# Redis restarting must not end a worker or the segments it runs: reconnect for as
# long as it takes, and let running segments finish (their lease fences them; a
# redelivered message finds the run claimed or finished and does nothing).
CELERY_BROKER_CONNECTION_MAX_RETRIES = None
CELERY_WORKER_CANCEL_LONG_RUNNING_TASKS_ON_CONNECTION_LOSS = False
CELERY_TASK_ALWAYS_EAGER = False
CELERY_TIMEZONE = TIME_ZONE
# How often the chain heads of the audit trail are anchored (docs/audit.md).
RIVER_AUDIT_ANCHOR_SECONDS = env_int("RIVER_AUDIT_ANCHOR_SECONDS", 300, minimum=10)
CELERY_BEAT_SCHEDULER = "django_celery_beat.schedulers:DatabaseScheduler"
CELERY_BEAT_SCHEDULE = {
    "executions-watchdog": {"task": "executions.watchdog", "schedule": timedelta(seconds=30)},
    # The entry keeps its first name so the database scheduler updates its row in place.
    "executions-expire-approvals": {"task": "governance.expire_approvals", "schedule": timedelta(seconds=60)},
    "governance-prune-counters": {"task": "governance.prune_counters", "schedule": timedelta(hours=24)},
    "governance-audit-anchor": {
        "task": "governance.audit_anchor", "schedule": timedelta(seconds=RIVER_AUDIT_ANCHOR_SECONDS)
    },
}

# River's own knobs.
RIVER_LLM_MODEL = env_str("RIVER_LLM_MODEL") or None
RIVER_LLM_BASE_URL = env_str("RIVER_LLM_BASE_URL") or None
RIVER_LLM_API_KEY = env_str("RIVER_LLM_API_KEY") or None
RIVER_LEASE_SECONDS = env_int("RIVER_LEASE_SECONDS", 60, minimum=5)
# Send each turn's journal statement on its own connection and commit it while the
# engine goes on (executions.write_behind); false waits for every commit in turn.
RIVER_JOURNAL_WRITE_BEHIND = env_bool("RIVER_JOURNAL_WRITE_BEHIND", True)
# How often a process sends its model calls' health samples to the shared window (and
# re-reads it); 0 sends every sample at once (executions.provider_health).
RIVER_PROVIDER_HEALTH_FLUSH_SECONDS = env_float("RIVER_PROVIDER_HEALTH_FLUSH_SECONDS", 1.0, maximum=60.0)
# /health/ready's reachability probe of RIVER_LLM_BASE_URL (GET <base>/models, never a
# model call): its answer is shared by every process for this long; 0 turns it off.
RIVER_PROVIDER_PROBE_SECONDS = env_float("RIVER_PROVIDER_PROBE_SECONDS", 30.0, maximum=3600.0)
RIVER_PROVIDER_PROBE_TIMEOUT_SECONDS = env_float("RIVER_PROVIDER_PROBE_TIMEOUT_SECONDS", 2.0, minimum=0.1,
                                                 maximum=30.0)
RIVER_MAX_SEGMENT_ATTEMPTS = env_int("RIVER_MAX_SEGMENT_ATTEMPTS", 20, minimum=1)
# Run segments one Celery worker process hosts at once (executions.runhost); 1 runs each
# segment inside its task, one at a time per process.
RIVER_RUNS_PER_PROCESS = env_int("RIVER_RUNS_PER_PROCESS", 200, minimum=1)
# Threads that make the hosted runs' blocking calls (database statements, policy checks),
# each borrowing a pooled connection per call; one when the process has no pool, and
# never more than the pool's size less one (executions.runhost).
RIVER_RUN_HOST_IO_THREADS = env_int("RIVER_RUN_HOST_IO_THREADS", 2, minimum=1)
# How long a stopping worker process lets its hosted runs finish before it hands the
# rest back to the queue.
RIVER_RUN_HOST_GRACE_SECONDS = env_int("RIVER_RUN_HOST_GRACE_SECONDS", 10, minimum=0)
# The watchdog publishes a queued run's task again when its last publish is this old
# (the message was lost: broker down at commit, Redis restarted without persistence),
# and post-processes a finished run that is still not post-processed this long after
# it ended. With the 30 s beat and the default lease, no run waits over 2 x lease.
RIVER_WATCHDOG_GRACE_SECONDS = env_int("RIVER_WATCHDOG_GRACE_SECONDS", 60, minimum=1)
RIVER_PROMPT_INJECTION_DETECTION = env_bool("RIVER_PROMPT_INJECTION_DETECTION", True)
RIVER_STORAGE_QUOTA_BYTES = env_int("RIVER_STORAGE_QUOTA_BYTES", 5 * 1024**3, minimum=0)
# SQLite data sources may only live under this directory (relative paths resolve here),
# so a workspace cannot point a data source at River's own database or any other file.
RIVER_SQLITE_DATA_DIR = Path(env_str("RIVER_SQLITE_DATA_DIR") or VAR_DIR / "datasources")
# Where network data sources (PostgreSQL) may connect: "public" (any globally routable
# address), IPs, CIDR ranges and host names. Loopback, private and link-local addresses
# need an explicit entry; River's own database, cache and broker are refused always.
RIVER_DATA_SOURCE_ALLOWED_HOSTS = env_network_allow_list("RIVER_DATA_SOURCE_ALLOWED_HOSTS", ["public"])

# Artifacts (docs/artifacts.md): uploaded and run-produced files, kept through the storage
# alias "artifacts": this machine's filesystem by default, an S3-compatible store by choice.
RIVER_ARTIFACT_MAX_BYTES = env_int("RIVER_ARTIFACT_MAX_BYTES", 10 * 1024 * 1024, minimum=1024)
RIVER_ARTIFACT_MAX_ROWS = env_int("RIVER_ARTIFACT_MAX_ROWS", 200_000, minimum=1)
RIVER_ARTIFACT_XLSX_MAX_UNCOMPRESSED_BYTES = env_int(
    "RIVER_ARTIFACT_XLSX_MAX_UNCOMPRESSED_BYTES", 100 * 1024 * 1024, minimum=1024)
RIVER_ARTIFACT_STORAGE = env_choice("RIVER_ARTIFACT_STORAGE", "filesystem", choices=("filesystem", "s3"))
RIVER_ARTIFACT_DIR = Path(env_str("RIVER_ARTIFACT_DIR") or VAR_DIR / "artifacts")
STORAGES["artifacts"] = artifact_storage_config(
    RIVER_ARTIFACT_STORAGE, directory=RIVER_ARTIFACT_DIR, debug=DEBUG)
# The one path whose request body may be larger than RIVER_MAX_REQUEST_BYTES (common.edge):
# a file upload, up to the artifact limit plus room for the multipart envelope.
RIVER_UPLOAD_BODY_LIMITS = {"/api/v1/artifacts/": RIVER_ARTIFACT_MAX_BYTES + 64 * 1024}
RIVER_ADMIN_PASSWORD = env_str("RIVER_ADMIN_PASSWORD") or None
# The demo's second person, who approves what the admin's runs ask for (segregation of duties).
RIVER_APPROVER_PASSWORD = env_password("RIVER_APPROVER_PASSWORD", min_length=12)
RIVER_APPROVAL_REMINDER_MINUTES = env_int("RIVER_APPROVAL_REMINDER_MINUTES", 60, minimum=1)
# Deciding from e-mail and Slack (docs/approvals.md): how long a signed e-mail link
# stays valid; the Slack app's signing secret (empty: the Slack endpoints answer 503);
# where a Slack interaction's response_url may point (anything else is never contacted).
RIVER_APPROVAL_LINK_HOURS = env_int("RIVER_APPROVAL_LINK_HOURS", 24, minimum=1)
RIVER_SLACK_SIGNING_SECRET = env_str("RIVER_SLACK_SIGNING_SECRET", "") or ""
RIVER_SLACK_RESPONSE_URL_PREFIXES = env_list("RIVER_SLACK_RESPONSE_URL_PREFIXES", ["https://hooks.slack.com/"])
# Optional: the Slack app's bot token. With it, a workspace whose Slack channel names a
# channel_id gets its approval messages through chat.postMessage, and River replaces them
# with the outcome (chat.update) however the request was decided (governance.slack_updates).
RIVER_SLACK_BOT_TOKEN = env_str("RIVER_SLACK_BOT_TOKEN", "") or ""
RIVER_SLACK_API_URL = env_str("RIVER_SLACK_API_URL", "https://slack.com/api") or "https://slack.com/api"
# A standing approval grant lasts at most this many days (docs/approvals.md, scopes).
RIVER_APPROVAL_GRANT_MAX_DAYS = env_int("RIVER_APPROVAL_GRANT_MAX_DAYS", 30, minimum=1)
# Triggers (docs/triggers.md): a cron slot whose task runs later than this after the slot
# is recorded as missed rather than run late; metric samples are kept this many hours;
# a pipeline may be this many stages deep (the first follower of a run is at depth 1).
RIVER_SCHEDULE_MISSED_GRACE_SECONDS = env_int("RIVER_SCHEDULE_MISSED_GRACE_SECONDS", 900, minimum=0)
RIVER_METRIC_RETENTION_HOURS = env_int("RIVER_METRIC_RETENTION_HOURS", 24, minimum=1)
RIVER_MAX_PIPELINE_DEPTH = env_int("RIVER_MAX_PIPELINE_DEPTH", 10, minimum=1)
CELERY_BEAT_SCHEDULE |= {
    "triggers-pipeline-handoffs-retry": {"task": "triggers.pipeline_handoffs_retry", "schedule": timedelta(seconds=60)},
    "triggers-metrics-prune": {"task": "triggers.metrics_prune", "schedule": timedelta(hours=1)},
}
# Recorded model calls (docs/observability.md) of runs that ended this many days ago are
# pruned by the beat task executions.model_calls_prune.
RIVER_MODEL_CALL_RETENTION_DAYS = env_int("RIVER_MODEL_CALL_RETENTION_DAYS", 30, minimum=1)
CELERY_BEAT_SCHEDULE |= {
    "executions-model-calls-prune": {"task": "executions.model_calls_prune", "schedule": timedelta(hours=6)},
}

# Metrics (docs/observability.md): every process (web, each Celery worker process) writes
# its samples to files in RIVER_METRICS_DIR and /metrics sums them. prometheus_client reads
# PROMETHEUS_MULTIPROC_DIR when it is first imported, so it is set here, before any import
# of it; an operator-set PROMETHEUS_MULTIPROC_DIR wins. /metrics opens only to the bearer
# token or to a listed client address (CIDRs allowed); with neither configured it is a 404.
RIVER_METRICS_DIR = Path(
    os.environ.get("PROMETHEUS_MULTIPROC_DIR") or env_str("RIVER_METRICS_DIR") or VAR_DIR / "metrics")
RIVER_METRICS_DIR.mkdir(parents=True, exist_ok=True)
os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(RIVER_METRICS_DIR)
RIVER_METRICS_TOKEN = env_str("RIVER_METRICS_TOKEN") or None
if RIVER_METRICS_TOKEN is not None and len(RIVER_METRICS_TOKEN) < 16:
    raise ImproperlyConfigured("RIVER_METRICS_TOKEN must be at least 16 characters")
RIVER_METRICS_ALLOWED_IPS = env_ip_networks("RIVER_METRICS_ALLOWED_IPS")

EMAIL_BACKEND = env_str("EMAIL_BACKEND", "django.core.mail.backends.console.EmailBackend")
DEFAULT_FROM_EMAIL = env_str("DEFAULT_FROM_EMAIL", "river@localhost")

# Logging (docs/observability.md "Logs"): text or one JSON object per line, secrets
# redacted on every handler, and one JSON line per run turn on the "river.turns" logger.
RIVER_LOG_FORMAT = env_choice("RIVER_LOG_FORMAT", "text", choices=LOG_FORMATS)
LOGGING = logging_config(log_format=RIVER_LOG_FORMAT, level=env_str("LOG_LEVEL", "INFO"))

# Traces (docs/observability.md): OpenTelemetry spans exported over OTLP/HTTP when the
# standard OTEL_EXPORTER_OTLP_ENDPOINT is set (the exporter reads the other standard
# OTEL_EXPORTER_OTLP_* variables itself); without it no SDK provider is installed at all.
OTEL_EXPORTER_OTLP_ENDPOINT = env_str("OTEL_EXPORTER_OTLP_ENDPOINT", "") or ""
OTEL_SERVICE_NAME = env_str("OTEL_SERVICE_NAME", "river") or "river"

# Canaries (docs/changing-safely.md): how much worse a canary's runs may do than the
# deployed version's (rate points; a fraction of the mean for cost and turns) and on how
# many finished runs per arm before River rolls it back; a canary may set its own. The
# beat task compares the running canaries this often.
RIVER_CANARY_MARGIN = env_float("RIVER_CANARY_MARGIN", 0.10, maximum=1.0)
RIVER_CANARY_MIN_RUNS = env_int("RIVER_CANARY_MIN_RUNS", 30, minimum=1)
RIVER_CANARY_CHECK_SECONDS = env_int("RIVER_CANARY_CHECK_SECONDS", 60, minimum=5)
CELERY_BEAT_SCHEDULE |= {
    "executions-canaries-check": {"task": "executions.canaries_check",
                                  "schedule": timedelta(seconds=RIVER_CANARY_CHECK_SECONDS)},
}

# River as an MCP server (/mcp/) and as A2A agents (/a2a/): docs/mcp.md, docs/a2a.md.
# Requests a minute per personal access token (a trigger API key keeps its own limit, or
# its workspace's API rate); how long a call waits for its run before it answers with
# the run's state (get_run / tasks/get report the rest).
RIVER_INTEROP_REQUESTS_PER_MINUTE = env_int("RIVER_INTEROP_REQUESTS_PER_MINUTE", 120, minimum=1)
RIVER_INTEROP_WAIT_SECONDS = env_int("RIVER_INTEROP_WAIT_SECONDS", 120, minimum=1)
# Policy backtests (docs/changing-safely.md): the newest runs one backtest considers at
# most. Each run costs its recorded tool calls decided twice, in a Celery worker.
RIVER_BACKTEST_MAX_RUNS = env_int("RIVER_BACKTEST_MAX_RUNS", 20000, minimum=1)
if RIVER_BACKTEST_MAX_RUNS > 1_000_000:
    raise ImproperlyConfigured("RIVER_BACKTEST_MAX_RUNS must be at most 1000000")
# MCP tool servers (docs/mcp.md): the commands a workspace admin may register as stdio
# servers (absolute paths, checked at startup; empty: no stdio server at all), how long
# one discovery or call may take, and how many bytes of a call's result are kept.
RIVER_MCP_STDIO_COMMANDS = env_command_allow_list("RIVER_MCP_STDIO_COMMANDS")
RIVER_MCP_TIMEOUT_SECONDS = env_float("RIVER_MCP_TIMEOUT_SECONDS", 20.0, minimum=1.0, maximum=300.0)
RIVER_MCP_RESULT_BYTES = env_int("RIVER_MCP_RESULT_BYTES", 65536, minimum=1024)
