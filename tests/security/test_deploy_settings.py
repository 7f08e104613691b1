"""A production configuration (DEBUG off, a real SECRET_KEY) passes Django's deploy checks
and sends secure cookies, HSTS and an HTTPS redirect.

Settings are read once per process, so each test starts a fresh one with the
production environment, without the test suite's relaxations (tests/testenv.py).
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RELAXED = ("SECURE_SSL_REDIRECT", "SESSION_COOKIE_SECURE", "CSRF_COOKIE_SECURE", "DEBUG")

PROBE = """
import json
import django
django.setup()
from django.conf import settings
from django.test import Client

client = Client()
https = client.get("/login/", secure=True)
http = client.get("/login/")
healthz = client.get("/healthz")
csrf = https.cookies[settings.CSRF_COOKIE_NAME]
print(json.dumps({
    "hsts": https.get("Strict-Transport-Security", ""),
    "http_status": http.status_code,
    "http_location": http.get("Location", ""),
    "healthz_over_http": healthz.status_code,
    "csrf_cookie_secure": bool(csrf["secure"]),
    "session_cookie_secure": settings.SESSION_COOKIE_SECURE,
    "session_cookie_httponly": settings.SESSION_COOKIE_HTTPONLY,
    "nosniff": https.get("X-Content-Type-Options", ""),
    "frame_options": https.get("X-Frame-Options", ""),
}))
"""


def production_env(tmp_path) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if key not in RELAXED}
    env.update(
        DEBUG="false",
        SECRET_KEY=secrets.token_urlsafe(50),
        ALLOWED_HOSTS="medbay.example.org,testserver",
        DATABASE_URL=f"sqlite:///{tmp_path / 'deploy.sqlite3'}",
        DJANGO_SETTINGS_MODULE="portal.settings",
    )
    return env


def test_check_deploy_finds_nothing_to_warn_about_with_debug_off(tmp_path):
    result = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT,
        env=production_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
    )

    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout


def test_production_sends_secure_cookies_hsts_and_redirects_plain_http(tmp_path):
    result = subprocess.run(
        [sys.executable, "-c", PROBE],
        cwd=ROOT,
        env=production_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout.strip().splitlines()[-1])

    assert "max-age=31536000" in seen["hsts"]
    assert "includeSubDomains" in seen["hsts"]
    assert seen["http_status"] == 301
    assert seen["http_location"].startswith("https://")
    assert seen["healthz_over_http"] == 200, "load balancers probe /healthz over plain HTTP"
    assert seen["csrf_cookie_secure"] is True
    assert seen["session_cookie_secure"] is True
    assert seen["session_cookie_httponly"] is True
    assert seen["nosniff"] == "nosniff"
    assert seen["frame_options"] == "DENY"
