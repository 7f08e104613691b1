"""Typed readers for settings that come from the environment.

Each reader fails loudly with the variable's name, so a typo in a deployment
environment file is a clear start-up error rather than a silent default.
"""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

from django.core.exceptions import ImproperlyConfigured

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def env_str(name: str, default: str = "") -> str:
    return os.environ.get(name, default)


def env_bool(name: str, default: bool = False) -> bool:
    raw = os.environ.get(name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name} must be a boolean (true/false), got {raw!r}")


def env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be an integer, got {raw!r}") from None


def env_float(name: str, default: float) -> float:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        return float(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be a number, got {raw!r}") from None


def env_list(name: str, default: list[str]) -> list[str]:
    raw = os.environ.get(name)
    if raw is None:
        return default
    return [item.strip() for item in raw.split(",") if item.strip()]


def env_pairs(name: str, default: dict[str, str]) -> dict[str, str]:
    """`KEY=value;KEY=value` as a dict (keys keep their case); `default` when unset."""
    raw = os.environ.get(name)
    if raw is None:
        return dict(default)
    pairs = {}
    for item in raw.split(";"):
        if not item.strip():
            continue
        key, sep, value = item.partition("=")
        if not sep or not key.strip() or not value.strip():
            raise ImproperlyConfigured(
                f"{name} must be KEY=value pairs separated by ';', got {item!r}"
            )
        pairs[key.strip()] = value.strip()
    return pairs


def env_choice(name: str, default: str, choices: tuple[str, ...]) -> str:
    value = os.environ.get(name, default).strip() or default
    if value not in choices:
        raise ImproperlyConfigured(f"{name} must be one of {', '.join(choices)}; got {value!r}")
    return value


# Connections one process may hold (DB_POOL_MAX_SIZE; 0 turns the pool off and keeps a
# persistent connection per thread for DB_CONN_MAX_AGE seconds). A thread that needs one
# while all are lent waits for one (up to 30 s), so this is also how many requests of a
# process reach the database at once; the pool opens them only as they are needed.
DEFAULT_POOL_MAX_SIZE = 10


def database_from_url(url: str | None, sqlite_path: Path) -> dict:
    """A Django DATABASES entry from a `postgres://` or `sqlite:///` URL."""
    if not url:
        return {"ENGINE": "django.db.backends.sqlite3", "NAME": str(sqlite_path)}
    parts = urlsplit(url)
    if parts.scheme in ("sqlite", "sqlite3"):
        path = unquote(parts.path)
        if path.startswith("//"):
            path = path[1:]
        elif path.startswith("/"):
            path = path[1:] or str(sqlite_path)
        return {"ENGINE": "django.db.backends.sqlite3", "NAME": path or str(sqlite_path)}
    if parts.scheme in ("postgres", "postgresql", "pgsql"):
        options: dict = {key: values[-1] for key, values in parse_qs(parts.query).items()}
        config = {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": unquote(parts.path.lstrip("/")) or "postgres",
            "USER": unquote(parts.username or ""),
            "PASSWORD": unquote(parts.password or ""),
            "HOST": parts.hostname or "",
            "PORT": str(parts.port or ""),
            "OPTIONS": options,
            "CONN_MAX_AGE": env_int("DB_CONN_MAX_AGE", 60),
            "CONN_HEALTH_CHECKS": True,
        }
        pool_size = env_int("DB_POOL_MAX_SIZE", DEFAULT_POOL_MAX_SIZE)
        if pool_size > 0:
            # Under daphne every request runs its view in a thread of its own, and a
            # persistent connection belongs to its thread: with DB_CONN_MAX_AGE alone a
            # burst of reports opened a connection per request until PostgreSQL refused
            # clients ("too many clients", bench/storm.py). A per-process pool (psycopg's)
            # bounds them, and a request borrows one instead of connecting afresh.
            options["pool"] = {"min_size": 1, "max_size": pool_size, "timeout": 30}
            # Django hands pooled connections back itself; the health check then makes
            # the pool test a connection before lending it, so a PostgreSQL restart
            # costs no request an error.
            config["CONN_MAX_AGE"] = 0
        return config
    raise ImproperlyConfigured(
        f"DATABASE_URL must start with postgres:// or sqlite:///, got scheme {parts.scheme!r}"
    )
