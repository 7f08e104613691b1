"""The shared end of LDAP and OIDC log-in: site groups to roles, the Unix account to the profile."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.exceptions import ImproperlyConfigured

from core.roles import Role, roles_of
from identity.directory import (
    IdentityRefused,
    SiteIdentity,
    apply_site_identity,
    parse_role_map,
    roles_from_groups,
)
from jobs.access import unix_user_for

ML_USERS = "cn=ml-users,ou=groups,dc=example,dc=org"


def test_role_maps_keep_the_commas_of_a_dn_and_allow_several_groups_per_role():
    mapping = parse_role_map(f"researcher={ML_USERS}; researcher=interns\nadmin=hpc-admins")
    assert mapping == {
        Role.RESEARCHER: frozenset({ML_USERS, "interns"}),
        Role.ADMIN: frozenset({"hpc-admins"}),
    }


@pytest.mark.parametrize("text", ["wizard=cn=x", "researcher=", "researcher"])
def test_a_role_map_naming_no_role_or_no_group_is_a_configuration_error(text):
    with pytest.raises(ImproperlyConfigured):
        parse_role_map(text)


def test_groups_match_dns_without_regard_to_case_or_spaces():
    mapping = parse_role_map(f"researcher={ML_USERS};manager=cn=leads,ou=groups,dc=example,dc=org")
    assert roles_from_groups(["CN=ML-Users, ou=groups,dc=Example,dc=org"], mapping) == {
        Role.RESEARCHER
    }
    assert roles_from_groups(["cn=other,dc=example,dc=org"], mapping) == frozenset()


def identity(**overrides) -> SiteIdentity:
    values = {
        "source": "ldap",
        "username": "alice",
        "unix_user": "alice-unix",
        "roles": frozenset({Role.RESEARCHER}),
    }
    return SiteIdentity(**(values | overrides))


@pytest.mark.django_db
def test_roles_and_unix_account_follow_the_site_at_every_log_in():
    user = get_user_model().objects.create_user("alice")
    own_group = Group.objects.create(name="beta-testers")
    user.groups.add(own_group)

    apply_site_identity(user, identity(roles=frozenset({Role.RESEARCHER, Role.MANAGER})))
    user.refresh_from_db()
    assert roles_of(user) == {Role.RESEARCHER, Role.MANAGER}
    assert unix_user_for(user) == "alice-unix"
    assert not user.is_staff

    apply_site_identity(user, identity(roles=frozenset({Role.ADMIN})))
    user = get_user_model().objects.get(pk=user.pk)
    assert roles_of(user) == {Role.ADMIN}
    assert user.is_staff
    assert own_group in user.groups.all()  # not a role: left alone

    apply_site_identity(user, identity(roles=frozenset()))
    user = get_user_model().objects.get(pk=user.pk)
    assert roles_of(user) == set()
    assert not user.is_staff


@pytest.mark.django_db
@pytest.mark.parametrize("unix_user", ["root", "daemon", ""])
def test_a_researcher_mapped_to_root_a_system_account_or_nothing_is_refused(unix_user):
    user = get_user_model().objects.create_user("alice")
    with pytest.raises(IdentityRefused):
        apply_site_identity(user, identity(unix_user=unix_user))
    assert roles_of(get_user_model().objects.get(pk=user.pk)) == set()
