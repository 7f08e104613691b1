"""MEDBAY_LDAP_* variables to django-auth-ldap settings: off by default, every mistake named."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from identity.ldap_config import ldap_settings
from tests.identity.directory import require_ldap

pytestmark = pytest.mark.ldap

ROOT = Path(__file__).resolve().parents[2]
BASE = "dc=example,dc=org"
SITE = {
    "MEDBAY_LDAP_URI": "ldap://ldap.example.org",
    "MEDBAY_LDAP_BIND_DN": f"cn=portal,{BASE}",
    "MEDBAY_LDAP_BIND_PASSWORD": " secret with spaces ",
    "MEDBAY_LDAP_USER_SEARCH_BASE": f"ou=people,{BASE}",
    "MEDBAY_LDAP_GROUP_SEARCH_BASE": f"ou=groups,{BASE}",
    "MEDBAY_LDAP_ROLE_GROUPS": f"researcher=cn=ml-users,ou=groups,{BASE}",
}


@pytest.fixture(autouse=True)
def _library():
    require_ldap(server=False)


def test_without_a_uri_the_directory_log_in_is_off_and_the_backends_are_unchanged():
    assert ldap_settings({}) == {}
    assert ldap_settings({"MEDBAY_LDAP_URI": "  "}) == {}
    assert "identity.ldap_login.DirectoryBackend" not in settings.AUTHENTICATION_BACKENDS


def test_a_site_with_a_search_account_searches_people_and_groups_with_the_defaults():
    from django_auth_ldap.config import GroupOfNamesType

    values = ldap_settings(SITE)

    assert values["AUTH_LDAP_SERVER_URI"] == "ldap://ldap.example.org"
    assert values["AUTH_LDAP_BIND_PASSWORD"] == " secret with spaces "  # passwords kept whole
    assert values["AUTH_LDAP_USER_SEARCH"].base_dn == f"ou=people,{BASE}"
    assert values["AUTH_LDAP_USER_SEARCH"].filterstr == "(uid=%(user)s)"
    assert values["AUTH_LDAP_GROUP_SEARCH"].filterstr == "(objectClass=groupOfNames)"
    assert isinstance(values["AUTH_LDAP_GROUP_TYPE"], GroupOfNamesType)
    assert values["MEDBAY_LDAP_UNIX_USER_ATTR"] == "uid"
    assert values["AUTH_LDAP_CACHE_TIMEOUT"] == 0  # a group change counts at the next log-in
    assert values["MEDBAY_LDAP_DENY_GROUPS"] == ()


def test_posix_groups_a_deny_list_and_another_unix_attribute_are_read():
    from django_auth_ldap.config import PosixGroupType

    values = ldap_settings(
        SITE
        | {
            "MEDBAY_LDAP_GROUP_TYPE": "posixGroup",
            "MEDBAY_LDAP_DENY_GROUPS": f"cn=disabled,{BASE}; cn=left,{BASE}",
            "MEDBAY_LDAP_UNIX_USER_ATTR": "employeeNumber",
            "MEDBAY_LDAP_TIMEOUT_S": "2.5",
        }
    )

    assert isinstance(values["AUTH_LDAP_GROUP_TYPE"], PosixGroupType)
    assert values["AUTH_LDAP_GROUP_SEARCH"].filterstr == "(objectClass=posixGroup)"
    assert values["MEDBAY_LDAP_DENY_GROUPS"] == (f"cn=disabled,{BASE}", f"cn=left,{BASE}")
    assert values["MEDBAY_LDAP_UNIX_USER_ATTR"] == "employeeNumber"
    assert 2.5 in values["AUTH_LDAP_CONNECTION_OPTIONS"].values()


def test_a_dn_template_binds_as_the_person_without_a_search_account():
    site = {k: v for k, v in SITE.items() if k != "MEDBAY_LDAP_USER_SEARCH_BASE"}
    values = ldap_settings(site | {"MEDBAY_LDAP_USER_DN_TEMPLATE": f"uid=%(user)s,{BASE}"})

    assert values["AUTH_LDAP_USER_DN_TEMPLATE"] == f"uid=%(user)s,{BASE}"
    assert values["AUTH_LDAP_BIND_AS_AUTHENTICATING_USER"] is True
    assert "AUTH_LDAP_USER_SEARCH" not in values


@pytest.mark.parametrize(
    ("changes", "named"),
    [
        ({"MEDBAY_LDAP_URI": "http://ldap.example.org"}, "MEDBAY_LDAP_URI"),
        ({"MEDBAY_LDAP_USER_SEARCH_BASE": ""}, "MEDBAY_LDAP_USER_SEARCH_BASE"),
        ({"MEDBAY_LDAP_USER_DN_TEMPLATE": "uid=%(user)s"}, "not both"),
        ({"MEDBAY_LDAP_USER_FILTER": "(uid=alice)"}, "MEDBAY_LDAP_USER_FILTER"),
        ({"MEDBAY_LDAP_USER_FILTER": "uid=%(user)s"}, "MEDBAY_LDAP_USER_FILTER"),
        ({"MEDBAY_LDAP_GROUP_SEARCH_BASE": ""}, "MEDBAY_LDAP_GROUP_SEARCH_BASE"),
        ({"MEDBAY_LDAP_GROUP_TYPE": "nisNetgroup"}, "MEDBAY_LDAP_GROUP_TYPE"),
        ({"MEDBAY_LDAP_GROUP_FILTER": "objectClass=x"}, "MEDBAY_LDAP_GROUP_FILTER"),
        ({"MEDBAY_LDAP_START_TLS": "maybe"}, "MEDBAY_LDAP_START_TLS"),
        ({"MEDBAY_LDAP_TIMEOUT_S": "0"}, "MEDBAY_LDAP_TIMEOUT_S"),
        ({"MEDBAY_LDAP_TIMEOUT_S": "soon"}, "MEDBAY_LDAP_TIMEOUT_S"),
    ],
)
def test_each_mistake_is_a_configuration_error_naming_the_variable(changes, named):
    with pytest.raises(ImproperlyConfigured, match=named):
        ldap_settings(SITE | changes)


def check(**env) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("MEDBAY_LDAP_")}
    return subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=ROOT,
        env={**clean, "DEBUG": "true", **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_portal_starts_with_a_directory_and_refuses_a_role_map_without_a_role():
    assert check(**SITE).returncode == 0

    empty = check(**(SITE | {"MEDBAY_LDAP_ROLE_GROUPS": ""}))
    wizard = check(**(SITE | {"MEDBAY_LDAP_ROLE_GROUPS": "wizard=cn=x"}))

    assert empty.returncode != 0
    assert "MEDBAY_LDAP_ROLE_GROUPS is empty" in empty.stderr
    assert wizard.returncode != 0
    assert "MEDBAY_LDAP_ROLE_GROUPS: 'wizard' is not a Medbay role" in wizard.stderr
