"""River settings: every value comes from the environment through riverapp.env.

The README's settings table lists each variable; keep the two in step.
"""

from __future__ import annotations

import os
import secrets
from datetime import timedelta
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

from riverapp.env import (
    database_from_url,
    env_bool,
    env_int,
    env_list,
    env_str,
    env_timezone,
    validate_redis_url,
)

# litellm must use its bundled price map: River has no network at run time.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("LITELLM_LOG", "ERROR")

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(env_str("RIVER_VAR_DIR") or BASE_DIR / "var")

DEBUG = env_bool("DEBUG", False)


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
# defaults to one derived from SECRET_KEY so rotating SECRET_KEY needs care (README).
RIVER_ENCRYPTION_KEY = env_str("RIVER_ENCRYPTION_KEY") or SECRET_KEY

ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]"] if DEBUG else [])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])
for _origin in CSRF_TRUSTED_ORIGINS:
    if not _origin.startswith(("http://", "https://")):
        raise ImproperlyConfigured(f"CSRF_TRUSTED_ORIGINS entries must start with http:// or https://, got {_origin!r}")

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
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
    "governance",
    "agents",
    "executions",
    "triggers",
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
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
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
            ],
        },
    },
]

DATABASES = {
    "default": database_from_url(
        "DATABASE_URL", env_str("DATABASE_URL") or f"sqlite:///{VAR_DIR / 'river.sqlite3'}"
    )
}
if DATABASES["default"]["ENGINE"].endswith("sqlite3"):
    Path(DATABASES["default"]["NAME"]).parent.mkdir(parents=True, exist_ok=True)
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

REDIS_URL = validate_redis_url("REDIS_URL", env_str("REDIS_URL"))
EMBEDDED = REDIS_URL is None

if REDIS_URL:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": REDIS_URL}}
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {"hosts": [REDIS_URL], "prefix": env_str("RIVER_CHANNEL_PREFIX", "river")},
        }
    }
    CELERY_BROKER_URL = REDIS_URL
else:
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

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "tenancy.authentication.BearerTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["common.options.IsAuthenticatedOrOptions"],
    "DEFAULT_PARSER_CLASSES": ["common.parsers.JSONParser"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
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
    },
}

# Celery: a run segment may hold a task for up to the hard limit, so the broker's
# visibility timeout must be longer or Redis would hand the task to a second worker.
RIVER_SEGMENT_SOFT_LIMIT_SECONDS = env_int("RIVER_SEGMENT_SOFT_LIMIT_SECONDS", 900, minimum=10)
RIVER_SEGMENT_HARD_LIMIT_SECONDS = RIVER_SEGMENT_SOFT_LIMIT_SECONDS + 60
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_TASK_SOFT_TIME_LIMIT = RIVER_SEGMENT_SOFT_LIMIT_SECONDS
CELERY_TASK_TIME_LIMIT = RIVER_SEGMENT_HARD_LIMIT_SECONDS
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_IGNORE_RESULT = True
CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": RIVER_SEGMENT_HARD_LIMIT_SECONDS * 2}
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_TASK_ALWAYS_EAGER = False
CELERY_TIMEZONE = TIME_ZONE
CELERY_BEAT_SCHEDULER = "django_celery_beat.schedulers:DatabaseScheduler"
CELERY_BEAT_SCHEDULE = {
    "executions-watchdog": {"task": "executions.watchdog", "schedule": timedelta(seconds=30)},
    "executions-expire-approvals": {"task": "executions.expire_approvals", "schedule": timedelta(seconds=60)},
    "governance-prune-counters": {"task": "governance.prune_counters", "schedule": timedelta(hours=24)},
}

# River's own knobs.
RIVER_LLM_MODEL = env_str("RIVER_LLM_MODEL") or None
RIVER_LLM_BASE_URL = env_str("RIVER_LLM_BASE_URL") or None
RIVER_LLM_API_KEY = env_str("RIVER_LLM_API_KEY") or None
RIVER_LEASE_SECONDS = env_int("RIVER_LEASE_SECONDS", 60, minimum=5)
# Send each turn's journal statement on its own connection and commit it while the
# engine goes on (executions.write_behind); false waits for every commit in turn.
RIVER_JOURNAL_WRITE_BEHIND = env_bool("RIVER_JOURNAL_WRITE_BEHIND", True)
RIVER_MAX_SEGMENT_ATTEMPTS = env_int("RIVER_MAX_SEGMENT_ATTEMPTS", 20, minimum=1)
RIVER_DEFAULT_TOOL_TIMEOUT_SECONDS = env_int("RIVER_DEFAULT_TOOL_TIMEOUT_SECONDS", 30, minimum=1)
RIVER_PROMPT_INJECTION_DETECTION = env_bool("RIVER_PROMPT_INJECTION_DETECTION", True)
RIVER_STORAGE_QUOTA_BYTES = env_int("RIVER_STORAGE_QUOTA_BYTES", 5 * 1024**3, minimum=0)
# SQLite data sources may only live under this directory (relative paths resolve here),
# so a workspace cannot point a data source at River's own database or any other file.
RIVER_SQLITE_DATA_DIR = Path(env_str("RIVER_SQLITE_DATA_DIR") or VAR_DIR / "datasources")
RIVER_ADMIN_PASSWORD = env_str("RIVER_ADMIN_PASSWORD") or None
RIVER_APPROVAL_REMINDER_MINUTES = env_int("RIVER_APPROVAL_REMINDER_MINUTES", 60, minimum=1)

EMAIL_BACKEND = env_str("EMAIL_BACKEND", "django.core.mail.backends.console.EmailBackend")
DEFAULT_FROM_EMAIL = env_str("DEFAULT_FROM_EMAIL", "river@localhost")

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
    "loggers": {
        "LiteLLM": {"level": "WARNING"},
        "sqlglot": {"level": "ERROR"},
        "httpx": {"level": "WARNING"},
        "daphne": {"level": "WARNING"},
        "django.channels.server": {"level": "WARNING"},
    },
}
