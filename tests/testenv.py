"""Loaded by pytest before Django settings (see `-p tests.testenv` in pyproject).

The test run needs a SECRET_KEY like any non-debug deployment; setting it here
keeps `pytest` usable without a hand-made environment.
"""

import os

os.environ.setdefault("SECRET_KEY", "medbay-test-suite-key-not-secret-0123456789abcdef")
os.environ.setdefault("SECURE_SSL_REDIRECT", "false")
os.environ.setdefault("SESSION_COOKIE_SECURE", "false")
os.environ.setdefault("CSRF_COOKIE_SECURE", "false")
os.environ.setdefault("DB_CONN_MAX_AGE", "0")
