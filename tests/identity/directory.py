"""The real test directory (deploy/ldap/up: OpenLDAP slapd on 127.0.0.1) for the `ldap` tests.

With CI=true a directory that cannot start, or a missing django-auth-ldap,
fails the run: the `ldap` tests must never be skipped there. Elsewhere they
are skipped with the reason.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
UP = REPO / "deploy" / "ldap" / "up"
DOWN = REPO / "deploy" / "ldap" / "down"
SUFFIX = "dc=medbay,dc=test"
GROUPS = f"ou=groups,{SUFFIX}"
PEOPLE = f"ou=people,{SUFFIX}"


def password_of(uid: str) -> str:
    return f"{uid}-directory-pw"  # deploy/ldap/lib.sh


def group_dn(cn: str) -> str:
    return f"cn={cn},{GROUPS}"


def person_dn(uid: str) -> str:
    return f"uid={uid},{PEOPLE}"


def _missing(server: bool) -> str:
    try:
        import django_auth_ldap  # noqa: F401
    except ImportError:
        return (
            "django-auth-ldap (apt-get install libldap2-dev libsasl2-dev; pip install -e '.[ldap]')"
        )
    if not server:
        return ""
    if os.geteuid() != 0:
        return "root, to start the test directory (deploy/ldap/up)"
    if not shutil.which("slapd") and not shutil.which("apt-get"):
        return "slapd, or apt-get to install it"
    return ""


def require_ldap(server: bool = True) -> None:
    """Skip (fail under CI=true) without django-auth-ldap, or what the directory needs."""
    missing = _missing(server)
    if missing:
        message = f"the ldap tests need {missing}"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message)
        pytest.skip(message)


def environment_from(stdout: str) -> dict[str, str]:
    environment = {}
    for line in stdout.splitlines():
        if line.startswith("export ") and "=" in line:
            key, _, value = line.removeprefix("export ").partition("=")
            environment[key.strip()] = shlex.split(value)[0] if value.strip() else ""
    return environment


def up() -> tuple[dict[str, str], float]:
    """Runs deploy/ldap/up; returns what it exported and how long it took."""
    started = time.monotonic()
    completed = subprocess.run([str(UP)], capture_output=True, text=True, timeout=300)
    if completed.returncode != 0:
        pytest.fail(f"deploy/ldap/up failed:\n{completed.stdout}\n{completed.stderr}")
    environment = environment_from(completed.stdout)
    assert "MEDBAY_LDAP_URI" in environment, completed.stdout
    return environment, time.monotonic() - started


def down() -> None:
    subprocess.run([str(DOWN)], capture_output=True, text=True, timeout=60, check=True)


def _as_admin(environment: dict[str, str]) -> list[str]:
    return [
        "-x",
        "-H",
        environment["MEDBAY_LDAP_URI"],
        "-D",
        environment["MEDBAY_LDAP_ADMIN_DN"],
        "-w",
        environment["MEDBAY_LDAP_ADMIN_PASSWORD"],
    ]


def modify(environment: dict[str, str], ldif: str) -> None:
    """ldapmodify as the directory's administrator, as a site's admin would."""
    subprocess.run(
        ["ldapmodify", *_as_admin(environment)],
        input=ldif,
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )


def _membership(change: str, group: str, uid: str) -> str:
    return (
        f"dn: {group_dn(group)}\nchangetype: modify\n{change}: member\nmember: {person_dn(uid)}\n"
    )


def remove_member(environment: dict[str, str], group: str, uid: str) -> None:
    modify(environment, _membership("delete", group, uid))


def add_member(environment: dict[str, str], group: str, uid: str) -> None:
    modify(environment, _membership("add", group, uid))


def members(environment: dict[str, str], group: str) -> set[str]:
    out = subprocess.run(
        ["ldapsearch", "-LLL", *_as_admin(environment), "-b", group_dn(group), "-s", "base"],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    ).stdout
    return {
        line.split("uid=", 1)[1].split(",", 1)[0] for line in out.splitlines() if "uid=" in line
    }


@pytest.fixture(scope="session")
def directory():
    """The running test directory's environment (the `export` lines of deploy/ldap/up)."""
    require_ldap()
    environment, seconds = up()
    environment["startup_seconds"] = f"{seconds:.2f}"
    yield environment
    # Whatever a test did to the directory, the next one starts from the seed.
    subprocess.run([str(UP), "--reset"], capture_output=True, timeout=300, check=False)
