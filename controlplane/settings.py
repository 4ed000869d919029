"""Settings, read from the environment and parsed strictly.

Every secret may also come from a file named by `NAME_FILE` (Docker/Kubernetes secrets). A malformed
boolean, integer or URL stops start-up with a message that names the variable.
"""

from __future__ import annotations

import os
import re
from datetime import timedelta
from pathlib import Path
from urllib.parse import unquote

import environ
from csp import constants as csp_constants
from django.core.exceptions import ImproperlyConfigured

from apps.catalog.registries import parse_pinned_image, parse_prefixes
from apps.serving.sharedcache import parse_shared_cache
from controlplane import tasknames
from controlplane.logcontext import logging_config

BASE_DIR = Path(__file__).resolve().parent.parent

env = environ.Env()


def secret(name: str, default: str | None = None) -> str:
    """Return `name` from the environment, or the contents of the file named by `name_FILE`."""
    path = os.environ.get(f"{name}_FILE")
    if path:
        try:
            return Path(path).read_text().strip()
        except OSError as exc:
            raise ImproperlyConfigured(f"{name}_FILE={path!r} cannot be read: {exc}") from exc
    value = os.environ.get(name, default)
    if value is None:
        raise ImproperlyConfigured(f"Set the {name} environment variable (or {name}_FILE).")
    return value


def strict_bool(name: str, default: bool) -> bool:
    """Parse a boolean variable; anything but the usual spellings is an error, not False."""
    raw = os.environ.get(name)
    if raw is None:
        return default
    lowered = raw.strip().lower()
    if lowered in {"1", "true", "yes", "on"}:
        return True
    if lowered in {"0", "false", "no", "off", ""}:
        return False
    raise ImproperlyConfigured(f"{name}={raw!r} is not a boolean (use true/false, 1/0, yes/no, on/off).")


def strict_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None:
        return default
    try:
        return int(raw)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name}={raw!r} is not an integer.") from exc


DEBUG = strict_bool("DEBUG", False)
# A development key only when DEBUG is on; production must provide one.
SECRET_KEY = secret("SECRET_KEY", "dev-insecure-key-change-me" if DEBUG else None)
ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=["localhost", "127.0.0.1", "[::1]", "testserver"])
CSRF_TRUSTED_ORIGINS = env.list("CSRF_TRUSTED_ORIGINS", default=[])
# Registries (host with an optional path prefix) runtime images may come from, for every tenant; staff add
# more per tenant in the admin (catalog: tenant image registries). Comma-separated.
try:
    IMAGE_REGISTRIES = parse_prefixes(env.list("IMAGE_REGISTRIES", default=["docker.io/vllm", "docker.io/lmsysorg"]),
                                      "IMAGE_REGISTRIES")
except ValueError as exc:
    raise ImproperlyConfigured(str(exc)) from exc
# The images the product itself renders beside a Runtime's engine image (docs/security.md): each pinned to a
# tag other than latest or to a digest, so a tenant's namespace never runs a moving image.
try:
    VLLM_ROUTER_IMAGE = parse_pinned_image(
        os.environ.get("VLLM_ROUTER_IMAGE", "lmcache/lmstack-router:v0.1.9"), "VLLM_ROUTER_IMAGE")
    EPP_IMAGE = parse_pinned_image(
        os.environ.get("EPP_IMAGE", "registry.k8s.io/gateway-api-inference-extension/epp:v1.0.0"), "EPP_IMAGE")
    MODEL_FETCH_IMAGE = parse_pinned_image(
        os.environ.get("MODEL_FETCH_IMAGE", "amazon/aws-cli:2.27.0"), "MODEL_FETCH_IMAGE")
    # The cluster cache of platform-wide models on real clusters (docs/cold-start.md): one backing volume that every
    # tenant namespace reaches through a PersistentVolume of its own, `nfs://<server>/<export path>` or
    # `csi://<driver>/<volume handle>`; empty: each namespace's cache claim is provisioned by its storage class.
    PLATFORM_MODEL_CACHE = parse_shared_cache(os.environ.get("PLATFORM_MODEL_CACHE", ""), "PLATFORM_MODEL_CACHE")
except ValueError as exc:
    raise ImproperlyConfigured(str(exc)) from exc
# Fernet key(s) for secrets at rest (cluster credentials). Comma-separated: the first encrypts,
# all decrypt, so keys can be rotated.
FIELD_ENCRYPTION_KEYS = [
    k.strip() for k in secret("FIELD_ENCRYPTION_KEY", "" if DEBUG else None).split(",") if k.strip()
]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "django_filters",
    "drf_spectacular",
    "drf_spectacular_sidecar",  # Swagger UI and ReDoc served from our static files: the docs work offline
    "csp",
    "django_htmx",
    "axes",
    "apps.core",
    "apps.tenancy",
    "apps.catalog",
    "apps.clusters",
    "apps.serving",
    "apps.telemetry",
    "apps.autoscaling",
    "apps.rollouts",
    "apps.gateway",
    "apps.whatif",
    "apps.web",
    "workers",
]

MIDDLEWARE = [
    "controlplane.health.HealthMiddleware",  # first: probes skip host checks, HTTPS redirects and auth
    "controlplane.logcontext.RequestContextMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "csp.middleware.CSPMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    # Last, as django-axes requires: it answers a locked-out sign-in with LOCKOUT_RESPONSE.
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "controlplane.urls"
WSGI_APPLICATION = "controlplane.wsgi.application"
ASGI_APPLICATION = "controlplane.asgi.application"

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
                "apps.web.portal.scope.portal_context",
            ],
        },
    },
]

if "DATABASE_URL" not in os.environ and "DATABASE_URL_FILE" not in os.environ:
    raise ImproperlyConfigured(
        "DATABASE_URL is not set. `make demo` and `make test` start an embedded PostgreSQL and set it; "
        "otherwise point it at PostgreSQL, e.g. postgres://postgres@127.0.0.1:5432/controlplane."
    )
DATABASES = {"default": env.db_url_config(secret("DATABASE_URL"))}
# A percent-encoded host is a Unix socket directory (postgres://user@%2Fpath%2Fto%2Fsocket/db).
DATABASES["default"]["HOST"] = unquote(DATABASES["default"].get("HOST") or "")
if DATABASES["default"]["ENGINE"] != "django.db.backends.postgresql":
    raise ImproperlyConfigured("DATABASE_URL must point at PostgreSQL (postgres://...).")
DATABASES["default"]["CONN_MAX_AGE"] = strict_int("DB_CONN_MAX_AGE", 60)
DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATICFILES_FINDERS = [
    "django.contrib.staticfiles.finders.FileSystemFinder",
    "django.contrib.staticfiles.finders.AppDirectoriesFinder",
    "apps.web.finders.VendorFinder",  # vendor/plotly.min.js from the plotly package
]
STATIC_ROOT = Path(env.str("STATIC_ROOT", default=str(BASE_DIR / ".data" / "staticfiles")))
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}

# Password sign-in (dashboard and admin) is guarded by django-axes: after LOGIN_FAILURE_LIMIT failures for
# one username, or from one client address, attempts are refused for LOGIN_LOCKOUT_MINUTES. Failures for
# unknown usernames count the same way, so neither the answer nor the lockout tells whether a user exists.
AUTHENTICATION_BACKENDS = [
    "apps.core.lockout.LockoutBackend",
    "django.contrib.auth.backends.ModelBackend",
]
AXES_FAILURE_LIMIT = strict_int("LOGIN_FAILURE_LIMIT", 5)
AXES_COOLOFF_TIME = timedelta(minutes=strict_int("LOGIN_LOCKOUT_MINUTES", 15))
AXES_LOCKOUT_PARAMETERS = ["username", "ip_address"]
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_CALLABLE = "apps.core.lockout.locked_out"
AXES_VERBOSE = False
# Behind a reverse proxy every client has the proxy's address: name the header that carries the client's
# (e.g. HTTP_X_FORWARDED_FOR) so the per-client limit applies per client, not to everyone at once.
AXES_IPWARE_META_PRECEDENCE_ORDER = tuple(env.list("LOGIN_CLIENT_IP_HEADERS", default=["REMOTE_ADDR"]))

LOGIN_URL = "web:login"
LOGIN_REDIRECT_URL = "web:home"

# Production hardening; `manage.py check --deploy` is clean when DEBUG is off.
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SECURE_SSL_REDIRECT = strict_bool("SECURE_SSL_REDIRECT", not DEBUG)
SESSION_COOKIE_SECURE = not DEBUG
CSRF_COOKIE_SECURE = not DEBUG
SECURE_HSTS_SECONDS = strict_int("SECURE_HSTS_SECONDS", 0 if DEBUG else 31536000)
SECURE_HSTS_INCLUDE_SUBDOMAINS = not DEBUG
SECURE_HSTS_PRELOAD = not DEBUG
SECURE_CONTENT_TYPE_NOSNIFF = True
X_FRAME_OPTIONS = "DENY"

REST_FRAMEWORK = {
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "DEFAULT_PAGINATION_CLASS": "apps.core.api.pagination.StandardPagination",
    "EXCEPTION_HANDLER": "apps.core.api.exceptions.exception_handler",
    "PAGE_SIZE": 50,
    "DEFAULT_FILTER_BACKENDS": [
        "apps.core.api.filters.StrictFilterBackend",
        "apps.core.api.filters.OrderingFilter",
        "apps.core.api.filters.SearchFilter",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_PARSER_CLASSES": [
        "apps.core.api.parsers.BoundedJSONParser",
        "rest_framework.parsers.FormParser",
        "rest_framework.parsers.MultiPartParser",
    ],
    "DEFAULT_THROTTLE_CLASSES": [
        "apps.core.api.throttling.TokenRateThrottle",
        "apps.core.api.throttling.AnonymousRateThrottle",
    ],
    # The browsable API's forms are for staff only (apps/core/api/renderers.py).
    "DEFAULT_RENDERER_CLASSES": [
        "rest_framework.renderers.JSONRenderer",
        "apps.core.api.renderers.BrowsableAPIRenderer",
    ],
    # Bearer first so an anonymous request gets 401 with `WWW-Authenticate: Bearer`.
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "apps.tenancy.authentication.BearerTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
}
# Abuse resistance (docs/security.md): API tokens live at most TOKEN_MAX_DAYS from when their secret was
# issued; rotation issues a new secret and a new period.
TOKEN_MAX_DAYS = strict_int("TOKEN_MAX_DAYS", 90)
if TOKEN_MAX_DAYS < 1:
    raise ImproperlyConfigured(f"TOKEN_MAX_DAYS={TOKEN_MAX_DAYS} must be at least 1.")



def throttle_rate(name: str, default: str) -> str:
    """A DRF rate such as `600/min`: a count, a slash and a period (s, min, hour or day)."""
    raw = os.environ.get(name, default).strip()
    if not re.fullmatch(r"[0-9]+/(s|sec|second|m|min|minute|h|hour|d|day)", raw):
        raise ImproperlyConfigured(f"{name}={raw!r} is not a rate such as 600/min (count/s, min, hour or day).")
    return raw


# Requests per API token (per user for sessions), and per client address for anonymous requests.
API_THROTTLE_RATES = {
    "user": throttle_rate("API_THROTTLE_RATE", "1200/min"),
    "anon": throttle_rate("API_ANON_THROTTLE_RATE", "60/min"),
}
# Request bodies (JSON or form) larger than this are answered 413 in JSON (apps/core/api/exceptions.py).
API_MAX_BODY_BYTES = strict_int("API_MAX_BODY_BYTES", 1024 * 1024)
DATA_UPLOAD_MAX_MEMORY_SIZE = API_MAX_BODY_BYTES
# Throttle counts live in the cache: per process by default; set CACHE_URL (redis://…) so that every
# web process shares them.
CACHES = {
    "default": env.cache_url_config(os.environ["CACHE_URL"])
    if os.environ.get("CACHE_URL")
    else {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}
}

# Content-Security-Policy on every response (django-csp): scripts and styles only from our origin or with the
# response's nonce, nothing may frame the pages, and no plugin, base or foreign form target.
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": ["'self'"],
        "script-src": ["'self'", csp_constants.NONCE],
        "style-src": ["'self'", csp_constants.NONCE],
        "img-src": ["'self'", "data:"],
        "font-src": ["'self'", "data:"],
        "connect-src": ["'self'"],
        "object-src": ["'none'"],
        "base-uri": ["'self'"],
        "form-action": ["'self'"],
        "frame-ancestors": ["'none'"],
    },
}

SPECTACULAR_SETTINGS = {
    "TITLE": "Inference control plane API",
    "DESCRIPTION": "Models, runtimes, clusters and inference services for LLM serving on Kubernetes.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "apps.core.api.schema.add_error_responses",
    ],
    "ENUM_NAME_OVERRIDES": {
        "MembershipRoleEnum": "apps.core.choices.Role",
        "PoolRoleEnum": "apps.serving.choices.PoolRole",
        "DeploymentModeEnum": "apps.catalog.choices.DeploymentMode",
    },
}

# Celery: JSON only, late acks, one queue per kind of work. Task modules live in `workers/`.
# Without CELERY_BROKER_URL the broker is a folder (kombu's filesystem transport): no server to run,
# fine for one machine. Production sets redis:// or amqp://. The host is named so kombu does not warn
# "No hostname was supplied" on every connection (the filesystem transport ignores it).
DEFAULT_BROKER_URL = "filesystem://localhost//"
CELERY_BROKER_URL = secret("CELERY_BROKER_URL", DEFAULT_BROKER_URL)
DATA_DIR = Path(env.str("DATA_DIR", default=str(BASE_DIR / ".data")))
if CELERY_BROKER_URL.startswith("filesystem://"):
    _broker_dir = DATA_DIR / "broker"
    for _sub in ("queue", "processed", "control"):
        (_broker_dir / _sub).mkdir(parents=True, exist_ok=True)
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(_broker_dir / "queue"),
        "data_folder_out": str(_broker_dir / "queue"),
        "processed_folder": str(_broker_dir / "processed"),
        "control_folder": str(_broker_dir / "control"),
        "store_processed": False,
        "polling_interval": 0.2,
    }
    # The folder transport, with a worker that stops within a fraction of a second (controlplane/broker.py).
    CELERY_BROKER_TRANSPORT = "controlplane.broker:Transport"
    _default_results = f"file://{DATA_DIR / 'results'}"
    (DATA_DIR / "results").mkdir(parents=True, exist_ok=True)
elif CELERY_BROKER_URL.startswith("redis"):
    _default_results = CELERY_BROKER_URL
    # An unacknowledged task (its worker died) is delivered again after this long; it must exceed the
    # longest countdown we use (retries back off to at most 60 s).
    CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": strict_int("CELERY_VISIBILITY_TIMEOUT", 300)}
else:
    _default_results = "rpc://"
CELERY_RESULT_BACKEND = os.environ.get("CELERY_RESULT_BACKEND") or _default_results
CELERY_RESULT_EXPIRES = 3600
CELERY_TASK_SERIALIZER = "json"
CELERY_RESULT_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
# Workers log through LOGGING above (LOG_FORMAT), not Celery's own root handler.
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
# A prefix lets several stacks (or test runs) share one broker without taking each other's tasks.
CELERY_QUEUE_PREFIX = env.str("CELERY_QUEUE_PREFIX", default="")
CELERY_TASK_DEFAULT_QUEUE = CELERY_QUEUE_PREFIX + "default"
CELERY_TASK_ROUTES = tasknames.routes(CELERY_QUEUE_PREFIX)
CELERY_TIMEZONE = "UTC"
RECONCILE_RESYNC_SECONDS = strict_int("RECONCILE_RESYNC_SECONDS", 30)
RESYNC_TICK_SECONDS = strict_int("RESYNC_TICK_SECONDS", 10)
# A service marked queued longer than this is taken to have lost its message (broker restart): requeued.
RECONCILE_QUEUED_EXPIRY_SECONDS = strict_int("RECONCILE_QUEUED_EXPIRY_SECONDS", 300)
RECONCILE_RUN_RETENTION_DAYS = strict_int("RECONCILE_RUN_RETENTION_DAYS", 14)
# Every cluster call times out (apps/clusters/kubeclient.py: 10 s, discovery included); a reconcile or inventory
# pass of one service or cluster stops at this total and is retried, so no worker hangs on a cluster.
RECONCILE_PASS_DEADLINE_SECONDS = strict_int("RECONCILE_PASS_DEADLINE_SECONDS", 60)
# Reconcile passes read their objects from watch-fed caches (workers/kubecache.py, one watch per kind per
# worker process) instead of listing them on every pass; off: every pass lists from the API server.
KUBE_WATCH_CACHE = strict_bool("KUBE_WATCH_CACHE", True)
# Calls of one pass in flight at once against its cluster (applies side by side, events read side by side), per
# worker process; the client's connection pool (TELEMETRY_SCRAPE_CONCURRENCY, at least 4) is at least as large.
KUBE_PARALLEL_REQUESTS = strict_int("KUBE_PARALLEL_REQUESTS", 8)
CELERY_BEAT_SCHEDULE: dict = {
    "resync-services": {"task": tasknames.RESYNC, "schedule": RESYNC_TICK_SECONDS},
    "prune-history": {"task": tasknames.PRUNE_HISTORY, "schedule": 3600},
    "gpu-inventory": {"task": tasknames.SYNC_INVENTORIES,
                      "schedule": strict_int("INVENTORY_SECONDS", 30)},
}

# Where inference gateways share limits and publish requests held for services waking from zero; the
# activation check (workers/activation.py) reads the latter. Empty: no gateway holds requests.
GATEWAY_REDIS_URL = os.environ.get("GATEWAY_REDIS_URL", "")
# The inference gateway's address as tenants' applications reach it: the playground's curl and Python snippets
# call it with an inference key (make demo serves it here).
GATEWAY_PUBLIC_URL = os.environ.get("GATEWAY_PUBLIC_URL", "http://127.0.0.1:8080").rstrip("/")
# Where the control plane itself reaches the gateway (the portal's playground sends prompts there, with the
# inference key the user gives it): in a cluster, the gateway's Service; by default the public address.
GATEWAY_URL = os.environ.get("GATEWAY_URL", GATEWAY_PUBLIC_URL).rstrip("/")

# Engine telemetry (apps/telemetry, workers/telemetry.py): scrape period, per-request timeout, parallel
# scrapes per cycle, retention of raw rows and of one-minute rollups, and the queue heartbeat period.
TELEMETRY_SCRAPE_SECONDS = strict_int("TELEMETRY_SCRAPE_SECONDS", 5)
TELEMETRY_SCRAPE_TIMEOUT_SECONDS = strict_int("TELEMETRY_SCRAPE_TIMEOUT_SECONDS", 3)
TELEMETRY_SCRAPE_CONCURRENCY = strict_int("TELEMETRY_SCRAPE_CONCURRENCY", 32)
# One exposition may be at most this big; a cycle of one cluster stops fetching after this many seconds.
TELEMETRY_MAX_EXPOSITION_BYTES = strict_int("TELEMETRY_MAX_EXPOSITION_BYTES", 4 * 1024 * 1024)
TELEMETRY_CYCLE_DEADLINE_SECONDS = strict_int("TELEMETRY_CYCLE_DEADLINE_SECONDS", 30)
TELEMETRY_RAW_RETENTION_HOURS = strict_int("TELEMETRY_RAW_RETENTION_HOURS", 24)
TELEMETRY_ROLLUP_RETENTION_DAYS = strict_int("TELEMETRY_ROLLUP_RETENTION_DAYS", 30)
QUEUE_HEARTBEAT_SECONDS = strict_int("QUEUE_HEARTBEAT_SECONDS", 15)
# Bearer token for the control plane's own /metrics; staff sessions are always let in.
METRICS_TOKEN = secret("METRICS_TOKEN", "")
CELERY_BEAT_SCHEDULE |= {
    "telemetry-scrape": {"task": tasknames.TELEMETRY_SCRAPE, "schedule": TELEMETRY_SCRAPE_SECONDS,
                         "options": {"expires": TELEMETRY_SCRAPE_SECONDS}},
    "telemetry-compact": {"task": tasknames.TELEMETRY_COMPACT, "schedule": 300},
    "queue-heartbeats": {"task": tasknames.SEND_HEARTBEATS, "schedule": QUEUE_HEARTBEAT_SECONDS},
}

# Gateway usage (apps/gateway/rollup.py): how often the hourly rollup runs, and how many hours back it is
# recomputed for rows a gateway's spool delivers late. Retention follows the TELEMETRY_* rules above.
GATEWAY_ROLLUP_SECONDS = strict_int("GATEWAY_ROLLUP_SECONDS", 300)
GATEWAY_ROLLUP_LATE_HOURS = strict_int("GATEWAY_ROLLUP_LATE_HOURS", 2)
CELERY_BEAT_SCHEDULE |= {
    "gateway-usage-rollup": {"task": tasknames.GATEWAY_USAGE_ROLLUP, "schedule": GATEWAY_ROLLUP_SECONDS,
                             "options": {"expires": GATEWAY_ROLLUP_SECONDS}},
}

# Built-in autoscaler (apps/autoscaling, workers/tasks/autoscale.py): evaluation period and decision retention.
AUTOSCALE_SECONDS = strict_int("AUTOSCALE_SECONDS", 15)
AUTOSCALE_DECISION_RETENTION_DAYS = strict_int("AUTOSCALE_DECISION_RETENTION_DAYS", 30)
CELERY_BEAT_SCHEDULE |= {
    "autoscale": {"task": tasknames.AUTOSCALE_EVALUATE_ALL, "schedule": AUTOSCALE_SECONDS,
                  "options": {"expires": AUTOSCALE_SECONDS}},
    "autoscale-prune": {"task": tasknames.AUTOSCALE_PRUNE, "schedule": 3600},
}

# Canary rollouts (apps/rollouts, workers/tasks/rollout.py): how often running rollouts are judged when due.
ROLLOUT_SECONDS = strict_int("ROLLOUT_SECONDS", 15)
# A canary with no ready pod this long after its rollout started never became ready: it fails at once.
ROLLOUT_READY_SECONDS = strict_int("ROLLOUT_READY_SECONDS", 900)
CELERY_BEAT_SCHEDULE |= {
    "rollout": {"task": tasknames.ROLLOUT_STEP_ALL, "schedule": ROLLOUT_SECONDS,
                "options": {"expires": ROLLOUT_SECONDS}},
}
# What-if lab (apps/whatif): the largest trace a tenant may upload, the CPU and wall-clock seconds a run may use
# (all its scenarios together) before it stops and says so, and the most requests one run replays (its memory
# grows with them; a larger load fails before it runs).
WHATIF_TRACE_MAX_BYTES = strict_int("WHATIF_TRACE_MAX_BYTES", 16 * 1024 * 1024)
WHATIF_CPU_BUDGET_SECONDS = strict_int("WHATIF_CPU_BUDGET_SECONDS", 600)
WHATIF_WALL_BUDGET_SECONDS = strict_int("WHATIF_WALL_BUDGET_SECONDS", 1200)
WHATIF_MAX_REQUESTS = strict_int("WHATIF_MAX_REQUESTS", 200_000)
# How often tuning advice is refreshed (each service with recorded load: its rules, then a lab replay of what
# they propose).
WHATIF_ADVICE_SECONDS = strict_int("WHATIF_ADVICE_SECONDS", 900)
CELERY_BEAT_SCHEDULE |= {
    "whatif-advice": {"task": tasknames.WHATIF_ADVISE, "schedule": WHATIF_ADVICE_SECONDS,
                      "options": {"expires": WHATIF_ADVICE_SECONDS}},
}

# LOG_FORMAT=json: one JSON object per line with request id, tenant and service where known.
try:
    LOGGING = logging_config(env.str("LOG_FORMAT", default="text").strip().lower(),
                             env.str("LOG_LEVEL", default="INFO"))
except ValueError as exc:
    raise ImproperlyConfigured(str(exc)) from exc

# In-cluster credentials (a Cluster with `in_cluster`): the pod's ServiceAccount token and CA.
KUBERNETES_SERVICE_ACCOUNT_DIR = env.str("KUBERNETES_SERVICE_ACCOUNT_DIR",
                                         default="/var/run/secrets/kubernetes.io/serviceaccount")
