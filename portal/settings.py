"""Django settings for Medbay, read from the environment (see CONTRACT.md).

Zero-config default: SQLite, the in-memory channel layer and the simulated
cluster. DATABASE_URL and REDIS_URL switch the same code to PostgreSQL and
channels-redis.
"""

from __future__ import annotations

import ipaddress
import os
import re
from pathlib import Path

from csp.constants import NONE, SELF
from django.core.exceptions import ImproperlyConfigured

from core.env import (
    database_from_url,
    env_bool,
    env_choice,
    env_float,
    env_int,
    env_list,
    env_pairs,
    env_str,
)
from identity.ldap_config import ldap_settings

BASE_DIR = Path(__file__).resolve().parent.parent

DEBUG = env_bool("DEBUG", False)
SECRET_KEY = env_str("SECRET_KEY")
if not SECRET_KEY:
    if not DEBUG:
        raise ImproperlyConfigured(
            "SECRET_KEY is not set. Set SECRET_KEY in the environment "
            "(or DEBUG=true for local development only)."
        )
    SECRET_KEY = "medbay-insecure-development-key-do-not-use-in-production"

ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["127.0.0.1", "localhost", "testserver"])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_htmx",
    "rest_framework",
    "rest_framework.authtoken",
    "drf_spectacular",
    # Swagger UI's files from our own static files, not a CDN (pinned by the package).
    "drf_spectacular_sidecar",
    "channels",
    "axes",
    "csp",
    # Medbay's apps, bottom layer first (README, Architecture). core/ and agent/ are
    # plain libraries, not apps.
    "clusters",
    "health",
    "remediation",
    "jobs",
    "sync",
    "demand",
    "reports",
    "identity",
    "demo",
    "portal",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    # Outside the input checks, so their 400s carry the policy too.
    "csp.middleware.CSPMiddleware",
    # Before anything reads the session, the path or a parameter (see core/inputs.py).
    "core.inputs.HostileInputMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    # Last: it turns a log-in that axes refused into the lockout answer.
    "axes.middleware.AxesMiddleware",
]
AUTHENTICATION_BACKENDS = [
    # First: it refuses a locked name before any password is checked.
    "identity.views.login.ThrottlingBackend",
    "django.contrib.auth.backends.ModelBackend",
]

# Site directory log-in (LDAP, django-auth-ldap): off unless MEDBAY_LDAP_URI is set.
# identity/ldap_config.py turns the MEDBAY_LDAP_* variables into AUTH_LDAP_* settings;
# identity/ldap_login.py maps each log-in through identity.directory (roles from groups,
# the Unix account from an attribute). After the throttle, so directory log-ins are
# counted and locked like local ones; before local accounts, which still log in
# when the directory is down.
_ldap = ldap_settings(os.environ)
MEDBAY_LDAP_URI = _ldap.pop("MEDBAY_LDAP_URI", "")
if MEDBAY_LDAP_URI:
    globals().update(_ldap)
    AUTHENTICATION_BACKENDS.insert(1, "identity.ldap_login.DirectoryBackend")

ROOT_URLCONF = "portal.urls"
ASGI_APPLICATION = "portal.asgi.application"

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
                "core.roles.role_context",
                "identity.cluster_view.switcher",
            ],
        },
    },
]

DATABASES = {"default": database_from_url(env_str("DATABASE_URL"), BASE_DIR / "medbay.sqlite3")}
if DATABASES["default"]["ENGINE"].endswith("sqlite3"):
    # The simulator, sync and engine write from several threads; wait for the
    # lock instead of failing with "database is locked". A deferred transaction
    # that reads and then writes cannot wait (SQLite fails its lock upgrade at
    # once), so transactions take the write lock when they begin; WAL lets pages
    # read while one writes.
    DATABASES["default"]["OPTIONS"] = {
        "timeout": 20,
        "transaction_mode": "IMMEDIATE",
        "init_command": "PRAGMA journal_mode=WAL;",
    }
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

REDIS_URL = env_str("REDIS_URL")
# channels_redis's two layers: "lists" (each message pushed to each socket's list, read
# back one by one) or "pubsub" (one PUBLISH per group, each process handing it to its
# own sockets: 1,000 boards on two processes got a change in p95 178-385 ms against
# 374-511 ms on lists; channels_redis still calls that layer beta). README, "Sizing".
CHANNEL_LAYER = env_choice("CHANNEL_LAYER", "lists", ("lists", "pubsub"))
# redis-py 8 reads with a 5 s socket timeout by default, exactly the 5 s that the list
# layer blocks in BZPOPMIN waiting for a message: a quiet spell then raised TimeoutError
# and closed every socket with 1011.
REDIS_LAYER_HOSTS = [{"address": REDIS_URL, "socket_timeout": 30}]
if REDIS_URL and CHANNEL_LAYER == "pubsub":
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.pubsub.RedisPubSubChannelLayer",
            "CONFIG": {"hosts": REDIS_LAYER_HOSTS},
        }
    }
elif REDIS_URL:
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {
                "hosts": REDIS_LAYER_HOSTS,
                "capacity": 1500,
                "expiry": 10,
                # A socket renews its groups every 15 minutes (portal.consumers);
                # one left behind by a stopped process is forgotten within the hour.
                "group_expiry": 3600,
            },
        }
    }
if REDIS_URL:
    CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": REDIS_URL,
        }
    }
else:
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "board"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = env_str("TIME_ZONE", "UTC")
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = BASE_DIR / "staticfiles"

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        # Token first: its WWW-Authenticate header makes anonymous calls a 401.
        "identity.api_tokens.ApiTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_PAGINATION_CLASS": "portal.api.BoundedPagination",
    "DEFAULT_PARSER_CLASSES": [
        "core.inputs.SafeJSONParser",
        "rest_framework.parsers.FormParser",
        "rest_framework.parsers.MultiPartParser",
    ],
    "PAGE_SIZE": 100,
    "DEFAULT_SCHEMA_CLASS": "portal.api_schema.MedbayAutoSchema",
    "EXCEPTION_HANDLER": "portal.api.exception_handler",
    "UNAUTHENTICATED_USER": "django.contrib.auth.models.AnonymousUser",
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Medbay API",
    "DESCRIPTION": "Self-healing portal for GPU training clusters on Slurm.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    # Several models have a `status` or `action`; name the remediation enums.
    "ENUM_NAME_OVERRIDES": {
        "RemediationStatusEnum": "remediation.transitions.RunStatus",
        "RemediationActionEnum": "remediation.models.Action",
        # Nodes and jobs both have a `state` too.
        "NodeStateEnum": "clusters.models.NodeState",
        "JobStateEnum": "jobs.models.JobState",
    },
}

# Security headers that `manage.py check --deploy` expects when not debugging.
SESSION_COOKIE_HTTPONLY = True
CSRF_COOKIE_HTTPONLY = False  # htmx reads the token from the cookie-less meta tag
SECURE_CONTENT_TYPE_NOSNIFF = True
X_FRAME_OPTIONS = "DENY"
# Every script and stylesheet is a static file: no inline <script>, <style> or
# style="" anywhere (htmx's indicator style is off in base.html, plotly's rules
# come from static/vendor/plotly-*.css). Chromium matches same-host ws: and wss:
# with 'self' (CSP level 3), so the live sockets need no entry of their own.
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": [SELF],
        "script-src": [SELF],
        "style-src": [SELF],
        "img-src": [SELF, "data:"],
        "connect-src": [SELF],
        "object-src": [NONE],
        "base-uri": [SELF],
        "frame-ancestors": [NONE],
        "form-action": [SELF],
    },
}
if not DEBUG:
    SESSION_COOKIE_SECURE = env_bool("SESSION_COOKIE_SECURE", True)
    CSRF_COOKIE_SECURE = env_bool("CSRF_COOKIE_SECURE", True)
    SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", True)
    SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 31536000)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    SECURE_HSTS_PRELOAD = True
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SECURE_REDIRECT_EXEMPT = [r"^metrics$", r"^healthz$"]

# Medbay's own settings.
MEDBAY_BACKEND = env_choice("MEDBAY_BACKEND", "simulated", ("simulated", "slurm"))
MEDBAY_FLEET = env_choice("MEDBAY_FLEET", "simulated", ("simulated", "slurm-spares", "kubernetes"))
SLURM_CONF = env_str("SLURM_CONF")
# How Medbay reaches Slurm: its command-line tools, or slurmrestd (reads and
# submission as the researcher with a per-user JWT; MEDBAY_SLURMRESTD_URL and
# MEDBAY_SLURM_JWT_KEY or MEDBAY_SLURM_JWT_TOKEN_FILE, read by the backend).
MEDBAY_SLURM_API = env_choice("MEDBAY_SLURM_API", "cli", ("cli", "rest"))
MEDBAY_SYNC_INTERVAL_S = env_float("MEDBAY_SYNC_INTERVAL_S", 2.0)
# After a slurmctld restart reverts partitions to slurm.conf, re-apply Medbay's
# pool membership automatically (false: only flag the drift on the board).
MEDBAY_REAPPLY_POOLS = env_bool("MEDBAY_REAPPLY_POOLS", True)
# The spare pool's partition is kept for replacements: researchers are not offered it
# in the job form (nor may submit to it) unless this is on.
MEDBAY_SPARE_FOR_RESEARCHERS = env_bool("MEDBAY_SPARE_FOR_RESEARCHERS", False)
MEDBAY_SIM_SEED = env_int("MEDBAY_SIM_SEED", 42)
MEDBAY_SIM_TIME_SCALE = env_float("MEDBAY_SIM_TIME_SCALE", 60.0)
# The layout a process builds its own simulator from (the demo's: an eighth infer, an
# eighth spare), so that separate `run_engine` processes act on the benchmark's nodes.
# Above this many nodes (after the filters) the board is the fleet view: a canvas of
# every GPU instead of a card per node (clusters.canvas).
MEDBAY_BOARD_TILES_MAX = env_int("MEDBAY_BOARD_TILES_MAX", 512)
MEDBAY_SIM_NODES = env_int("MEDBAY_SIM_NODES", 32)
MEDBAY_SIM_PREFIX = env_str("MEDBAY_SIM_PREFIX", "gpu")
# History older than this many days is deleted by `manage.py prune_history` once the
# daily rollups hold its figures (reports/retention.py); 0 keeps everything.
MEDBAY_HISTORY_RETENTION_DAYS = env_int("MEDBAY_HISTORY_RETENTION_DAYS", 0)
# Remediation circuit breaker and flapping quarantine (remediation/safety.py).
MEDBAY_BREAKER_PARTITION_PCT = env_float("MEDBAY_BREAKER_PARTITION_PCT", 10.0)
# However small the partition, this many of its nodes may be in remediation at once
# (never more than it has): at 10 % alone, a pool of four stopped at its first node.
MEDBAY_BREAKER_PARTITION_MIN_NODES = env_int("MEDBAY_BREAKER_PARTITION_MIN_NODES", 2)
if MEDBAY_BREAKER_PARTITION_MIN_NODES < 1:
    raise ImproperlyConfigured("MEDBAY_BREAKER_PARTITION_MIN_NODES must be at least 1")
MEDBAY_BREAKER_MAX_NODES = env_int("MEDBAY_BREAKER_MAX_NODES", 4)
MEDBAY_BREAKER_WINDOW_S = env_int("MEDBAY_BREAKER_WINDOW_S", 600)
# Training and inference follow demand (demand/; README "Training and inference follow
# demand"). The signals are sampled every MEDBAY_DEMAND_SAMPLE_S by the sync (and the demo);
# the inference load is the site's PromQL query (`{cluster}` is replaced by the cluster's
# name), read from the Prometheus at MEDBAY_DEMAND_PROMETHEUS_URL through its HTTP API.
MEDBAY_DEMAND_SAMPLE_S = env_float("MEDBAY_DEMAND_SAMPLE_S", 60.0)
if not 1 <= MEDBAY_DEMAND_SAMPLE_S <= 3600:
    raise ImproperlyConfigured("MEDBAY_DEMAND_SAMPLE_S must be between 1 and 3600 seconds")
MEDBAY_DEMAND_PROMETHEUS_URL = env_str("MEDBAY_DEMAND_PROMETHEUS_URL", "").strip().rstrip("/")
MEDBAY_DEMAND_PROMQL = env_str("MEDBAY_DEMAND_PROMQL", "").strip()
MEDBAY_DEMAND_PROMQL_UNIT = env_choice(
    "MEDBAY_DEMAND_PROMQL_UNIT", "latency_ms", ("latency_ms", "queue_length")
)
MEDBAY_DEMAND_PROMETHEUS_TIMEOUT_S = env_float("MEDBAY_DEMAND_PROMETHEUS_TIMEOUT_S", 5.0)
if bool(MEDBAY_DEMAND_PROMETHEUS_URL) != bool(MEDBAY_DEMAND_PROMQL):
    raise ImproperlyConfigured(
        "MEDBAY_DEMAND_PROMETHEUS_URL and MEDBAY_DEMAND_PROMQL go together: set both "
        "(the Prometheus to ask and the query giving the inference load), or neither"
    )
if MEDBAY_DEMAND_PROMETHEUS_URL and not MEDBAY_DEMAND_PROMETHEUS_URL.startswith(
    ("http://", "https://")
):
    raise ImproperlyConfigured(
        "MEDBAY_DEMAND_PROMETHEUS_URL must start with http:// or https://, "
        f"got {MEDBAY_DEMAND_PROMETHEUS_URL!r}"
    )
if not 0 < MEDBAY_DEMAND_PROMETHEUS_TIMEOUT_S <= 60:
    raise ImproperlyConfigured("MEDBAY_DEMAND_PROMETHEUS_TIMEOUT_S must be between 0 and 60")
# The inference workload on Kubernetes (with MEDBAY_FLEET=kubernetes): its namespace, the
# label selector of its pods and the name of its HorizontalPodAutoscaler ("" for none).
MEDBAY_DEMAND_K8S_NAMESPACE = env_str("MEDBAY_DEMAND_K8S_NAMESPACE", "").strip()
MEDBAY_DEMAND_K8S_SELECTOR = env_str("MEDBAY_DEMAND_K8S_SELECTOR", "").strip()
MEDBAY_DEMAND_K8S_HPA = env_str("MEDBAY_DEMAND_K8S_HPA", "").strip()
if (MEDBAY_DEMAND_K8S_SELECTOR or MEDBAY_DEMAND_K8S_HPA) and not MEDBAY_DEMAND_K8S_NAMESPACE:
    raise ImproperlyConfigured(
        "MEDBAY_DEMAND_K8S_NAMESPACE must name the inference workload's namespace when "
        "MEDBAY_DEMAND_K8S_SELECTOR or MEDBAY_DEMAND_K8S_HPA is set"
    )
# Raw demand samples older than this many days are deleted once rolled up into hours.
MEDBAY_DEMAND_RAW_DAYS = env_int("MEDBAY_DEMAND_RAW_DAYS", 30)
if MEDBAY_DEMAND_RAW_DAYS < 1:
    raise ImproperlyConfigured("MEDBAY_DEMAND_RAW_DAYS must be at least 1")
MEDBAY_FLAP_FAULTS = env_int("MEDBAY_FLAP_FAULTS", 3)
MEDBAY_FLAP_WINDOW_H = env_float("MEDBAY_FLAP_WINDOW_H", 24.0)
# An application-class XID on a node of a multi-node job waits this long for the job's
# other nodes: the same fault on two or more is the job's own (remediation/correlation.py).
MEDBAY_JOB_FAULT_WINDOW_S = env_float("MEDBAY_JOB_FAULT_WINDOW_S", 10.0)
if not 0 < MEDBAY_JOB_FAULT_WINDOW_S <= 600:
    raise ImproperlyConfigured("MEDBAY_JOB_FAULT_WINDOW_S must be between 0 and 600 seconds")
# Files naming the parts nodes share (Slurm's topology.conf syntax: SwitchName=, Rack=,
# Power= with Nodes=); the same hardware fault on MEDBAY_PART_FAULT_MIN_NODES nodes under
# one part within MEDBAY_PART_FAULT_WINDOW_S is the part's. Slurm's own topology.conf
# beside SLURM_CONF is read too when it exists.
MEDBAY_TOPOLOGY_FILES = env_list("MEDBAY_TOPOLOGY_FILES", [])
MEDBAY_PART_FAULT_WINDOW_S = env_float("MEDBAY_PART_FAULT_WINDOW_S", 10.0)
MEDBAY_PART_FAULT_MIN_NODES = env_int("MEDBAY_PART_FAULT_MIN_NODES", 3)
if not 0 < MEDBAY_PART_FAULT_WINDOW_S <= 600:
    raise ImproperlyConfigured("MEDBAY_PART_FAULT_WINDOW_S must be between 0 and 600 seconds")
if MEDBAY_PART_FAULT_MIN_NODES < 2:
    raise ImproperlyConfigured("MEDBAY_PART_FAULT_MIN_NODES must be 2 or more")
# The catalogue's cause classes each rule groups (agent/xid.py Cause; each XID's page
# shows its class): a job's own fault, and a shared part's.
MEDBAY_JOB_FAULT_CAUSES = env_list("MEDBAY_JOB_FAULT_CAUSES", ["application"])
MEDBAY_PART_FAULT_CAUSES = env_list(
    "MEDBAY_PART_FAULT_CAUSES", ["hardware", "pcie", "nvlink", "memory_ecc"]
)
from agent.xid import Cause as _Cause  # noqa: E402 - plain library code, no Django

for _name, _causes in (
    ("MEDBAY_JOB_FAULT_CAUSES", MEDBAY_JOB_FAULT_CAUSES),
    ("MEDBAY_PART_FAULT_CAUSES", MEDBAY_PART_FAULT_CAUSES),
):
    _unknown = sorted(set(_causes) - {str(cause) for cause in _Cause})
    if _unknown:
        raise ImproperlyConfigured(
            f"{_name}: unknown cause class {', '.join(_unknown)}; expected some of "
            f"{', '.join(str(cause) for cause in _Cause)}"
        )
for _path in MEDBAY_TOPOLOGY_FILES:
    try:
        from clusters.backends.slurm_parsers.topology import parse_parts

        parse_parts(Path(_path).read_text(), source=_path)
    except (OSError, ValueError) as _error:
        raise ImproperlyConfigured(f"MEDBAY_TOPOLOGY_FILES: {_error}") from None
# Requests admins write in a node's Slurm reason (`scontrol update nodename=X state=fail
# reason="Action:Replace ..."`), as `WORD=action` or `WORD=action/approval` pairs: the
# action (replace, reboot or drain) and whether the run waits for a second admin.
# Setting it replaces the default table; matching ignores case (README: Acting from Slurm).
MEDBAY_SLURM_REASON_ACTIONS = env_pairs(
    "MEDBAY_SLURM_REASON_ACTIONS",
    {"Action:Replace": "replace", "Action:Reboot": "reboot", "Action:Drain": "drain"},
)
for _word, _meaning in MEDBAY_SLURM_REASON_ACTIONS.items():
    _action, _, _mode = _meaning.partition("/")
    if (
        " " in _word
        or _action not in ("replace", "reboot", "drain")
        or _mode not in ("", "automatic", "approval")
    ):
        raise ImproperlyConfigured(
            f"MEDBAY_SLURM_REASON_ACTIONS: {_word}={_meaning} must be a word without spaces "
            "and one of replace, reboot or drain, optionally followed by /approval or /automatic"
        )
# Partitions whose jobs, on a node an admin asked to replace from Slurm, are signalled to
# checkpoint and requeued after the grace instead of being left to finish (HyperPod's way).
MEDBAY_SLURM_REPLACE_REQUEUE_PARTITIONS = env_list("MEDBAY_SLURM_REPLACE_REQUEUE_PARTITIONS", [])
# Jobs are never submitted as root or an account with a uid below this (system accounts).
MEDBAY_MIN_UID = env_int("MEDBAY_MIN_UID", 1000)
# Where jobs post progress reports and notifications link to (must be reachable from nodes).
MEDBAY_PORTAL_URL = env_str("MEDBAY_PORTAL_URL", "http://127.0.0.1:8000")
EMAIL_BACKEND = env_str("EMAIL_BACKEND", "django.core.mail.backends.console.EmailBackend")
DEFAULT_FROM_EMAIL = env_str("DEFAULT_FROM_EMAIL", "medbay@localhost")

# /metrics answers these client addresses or networks, or anyone with the token.
MEDBAY_METRICS_ALLOW = env_list("MEDBAY_METRICS_ALLOW", ["127.0.0.1", "::1"])
for _entry in MEDBAY_METRICS_ALLOW:
    try:
        ipaddress.ip_network(_entry, strict=False)
    except ValueError:
        raise ImproperlyConfigured(
            f"MEDBAY_METRICS_ALLOW must list IP addresses or networks, got {_entry!r}"
        ) from None
MEDBAY_METRICS_TOKEN = env_str("MEDBAY_METRICS_TOKEN")
# An agent run with `--interval 60` reports its checks every minute; one silent for
# longer (its token's last use is kept to the minute) counts in medbay_agents_silent.
MEDBAY_AGENT_SILENT_AFTER_S = env_int("MEDBAY_AGENT_SILENT_AFTER_S", 180)
# The site's Grafana, where the Medbay dashboard (deploy/grafana/medbay.json) is
# imported: node and run pages link to it. Unset: no links.
MEDBAY_GRAFANA_URL = env_str("MEDBAY_GRAFANA_URL").rstrip("/")
# Addresses a person's webhook may reach beyond the public internet (jobs/webhooks.py):
# IP addresses, networks or host names, e.g. `10.20.0.0/16,hooks.corp.example`.
MEDBAY_WEBHOOK_ALLOW = env_list("MEDBAY_WEBHOOK_ALLOW", [])
_HOST_NAME = re.compile(r"(?!-)[a-z0-9-]{1,63}(?<!-)(\.(?!-)[a-z0-9-]{1,63}(?<!-))*\.?", re.I)
for _entry in MEDBAY_WEBHOOK_ALLOW:
    try:
        ipaddress.ip_network(_entry, strict=False)
        continue
    except ValueError:
        pass
    # A name whose last label is a number is a mistyped address (300.1.2.3), not a host.
    _last_label = _entry.rstrip(".").rsplit(".", 1)[-1]
    if not _HOST_NAME.fullmatch(_entry) or len(_entry) > 253 or _last_label.isdigit():
        raise ImproperlyConfigured(
            f"MEDBAY_WEBHOOK_ALLOW must list IP addresses, networks or host names, got {_entry!r}"
        )
# Failed log-ins allowed per client address and user name within the window.
MEDBAY_LOGIN_MAX_FAILURES = env_int("MEDBAY_LOGIN_MAX_FAILURES", 10)
MEDBAY_LOGIN_WINDOW_S = env_int("MEDBAY_LOGIN_WINDOW_S", 300)
# django-axes applies them to every authenticate(request, ...): /login/, /admin/login/,
# /api/v1/auth/token/ (see identity/views/login.py).
AXES_FAILURE_LIMIT = MEDBAY_LOGIN_MAX_FAILURES
AXES_COOLOFF_TIME = "identity.views.login.cool_off"
AXES_LOCKOUT_PARAMETERS = [["ip_address", "username"]]
AXES_USERNAME_CALLABLE = "identity.views.login.username_key"
AXES_CLIENT_IP_CALLABLE = "identity.views.login.client_ip"
AXES_LOCKOUT_CALLABLE = "identity.views.login.lockout"
AXES_RESET_ON_SUCCESS = True
AXES_DISABLE_ACCESS_LOG = True
AXES_VERBOSE = False
# Live sockets (portal/sockets.py): one person's open sockets on all processes (the next
# is closed with 4429 and its page polls instead), the regions one socket may watch, and
# the pushed regions one process renders at once (the others wait their turn). Renders
# hold the GIL: 150 flooding sockets slowed another person's handshake to a median of
# 1.08 s with 4 at once, 0.65 s with 2.
MEDBAY_SOCKETS_PER_USER = env_int("MEDBAY_SOCKETS_PER_USER", 20)
MEDBAY_WATCHES_PER_SOCKET = env_int("MEDBAY_WATCHES_PER_SOCKET", 16)
MEDBAY_RENDERS_IN_FLIGHT = env_int("MEDBAY_RENDERS_IN_FLIGHT", 2)
for _limit in ("MEDBAY_SOCKETS_PER_USER", "MEDBAY_WATCHES_PER_SOCKET", "MEDBAY_RENDERS_IN_FLIGHT"):
    if globals()[_limit] < 1:
        raise ImproperlyConfigured(f"{_limit} must be at least 1, got {globals()[_limit]}")

# OpenID Connect log-in (identity/oidc_login.py, identity/views/oidc.py; mozilla-django-oidc).
# On when MEDBAY_OIDC_CLIENT_ID is set; unset, the log-in page and the tests are unchanged.
# Endpoints come from the issuer's discovery document unless all four are given.
MEDBAY_OIDC_CLIENT_ID = env_str("MEDBAY_OIDC_CLIENT_ID")
MEDBAY_OIDC_ENABLED = bool(MEDBAY_OIDC_CLIENT_ID)
MEDBAY_OIDC_ISSUER = env_str("MEDBAY_OIDC_ISSUER").rstrip("/")
MEDBAY_OIDC_NAME = env_str("MEDBAY_OIDC_NAME", "single sign-on")  # "Log in with <name>"
# `researcher=ml-users;admin=hpc-admins;manager=leads`, matched against the groups claim.
MEDBAY_OIDC_ROLE_GROUPS = env_str("MEDBAY_OIDC_ROLE_GROUPS") or env_str("MEDBAY_OIDC_ROLE_CLAIMS")
MEDBAY_OIDC_GROUPS_CLAIM = env_str("MEDBAY_OIDC_GROUPS_CLAIM", "groups")
MEDBAY_OIDC_USERNAME_CLAIM = env_str("MEDBAY_OIDC_USERNAME_CLAIM", "preferred_username")
MEDBAY_OIDC_UNIX_USER_CLAIM = env_str("MEDBAY_OIDC_UNIX_USER_CLAIM", "preferred_username")
OIDC_RP_CLIENT_ID = MEDBAY_OIDC_CLIENT_ID
OIDC_RP_CLIENT_SECRET = env_str("MEDBAY_OIDC_CLIENT_SECRET")
OIDC_OP_AUTHORIZATION_ENDPOINT = env_str("MEDBAY_OIDC_AUTHORIZATION_ENDPOINT")
OIDC_OP_TOKEN_ENDPOINT = env_str("MEDBAY_OIDC_TOKEN_ENDPOINT")
OIDC_OP_USER_ENDPOINT = env_str("MEDBAY_OIDC_USERINFO_ENDPOINT")
OIDC_OP_JWKS_ENDPOINT = env_str("MEDBAY_OIDC_JWKS_URI")  # with the other three, no discovery
OIDC_RP_SIGN_ALGO = env_str("MEDBAY_OIDC_SIGN_ALGO", "RS256")
OIDC_RP_SCOPES = env_str("MEDBAY_OIDC_SCOPES", "openid email profile groups")
OIDC_USE_PKCE = True
# How the client secret reaches the token endpoint: HTTP Basic (most providers) or the form.
OIDC_TOKEN_USE_BASIC_AUTH = (
    env_choice("MEDBAY_OIDC_TOKEN_AUTH", "basic", ("basic", "post")) != "post"
)
# Without a timeout a provider that accepts the connection and never answers hangs a worker.
OIDC_TIMEOUT = env_float("MEDBAY_OIDC_TIMEOUT_S", 10.0)
if MEDBAY_OIDC_ENABLED:
    if not OIDC_RP_CLIENT_SECRET:
        raise ImproperlyConfigured(
            "MEDBAY_OIDC_CLIENT_ID is set; set MEDBAY_OIDC_CLIENT_SECRET too"
        )
    if not MEDBAY_OIDC_ISSUER and not all(
        (
            OIDC_OP_AUTHORIZATION_ENDPOINT,
            OIDC_OP_TOKEN_ENDPOINT,
            OIDC_OP_USER_ENDPOINT,
            OIDC_OP_JWKS_ENDPOINT,
        )
    ):
        raise ImproperlyConfigured(
            "MEDBAY_OIDC_CLIENT_ID is set: set MEDBAY_OIDC_ISSUER too, or all of "
            "MEDBAY_OIDC_AUTHORIZATION_ENDPOINT, MEDBAY_OIDC_TOKEN_ENDPOINT, "
            "MEDBAY_OIDC_USERINFO_ENDPOINT and MEDBAY_OIDC_JWKS_URI"
        )
    AUTHENTICATION_BACKENDS.append("identity.oidc_login.OIDCBackend")
TEMPLATES[0]["OPTIONS"]["context_processors"].append("identity.views.oidc.login_button")

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
    "loggers": {"django.channels.server": {"level": "WARNING"}},
}
