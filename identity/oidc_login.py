"""OpenID Connect log-in: the site's identity provider says who a person is.

mozilla-django-oidc runs the authorization-code flow (state, nonce, PKCE, the ID
token's signature checked against the provider's keys); this module adds what
Medbay needs on top of it:

- the provider's endpoints from its discovery document (`MEDBAY_OIDC_ISSUER`),
  fetched when someone logs in rather than at start-up, so a provider that is
  down stops OIDC log-ins (with a clear page) and not the portal;
- the person's claims become a `SiteIdentity` (user name, Unix account, roles
  from the mapped groups) applied by `identity.directory`, exactly as LDAP's are;
- a local administrator account (staff or superuser, with a password) is never
  taken over by a provider account of the same name.

Off unless MEDBAY_OIDC_CLIENT_ID is set (see settings.py).
"""

from __future__ import annotations

import logging
from functools import lru_cache

import requests
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.exceptions import ImproperlyConfigured, SuspiciousOperation
from django.db import transaction
from mozilla_django_oidc.auth import OIDCAuthenticationBackend

from identity.directory import (
    IdentityRefused,
    RoleMap,
    SiteIdentity,
    apply_site_identity,
    parse_role_map,
    roles_from_groups,
)

log = logging.getLogger(__name__)

# mozilla-django-oidc's endpoint settings, and their names in a discovery document.
ENDPOINTS = {
    "OIDC_OP_AUTHORIZATION_ENDPOINT": "authorization_endpoint",
    "OIDC_OP_TOKEN_ENDPOINT": "token_endpoint",
    "OIDC_OP_USER_ENDPOINT": "userinfo_endpoint",
    "OIDC_OP_JWKS_ENDPOINT": "jwks_uri",
}


class ProviderUnreachable(Exception):
    """The identity provider did not answer, or answered something that is not OIDC."""


class TokenRejected(SuspiciousOperation):
    """A signed ID token that was not issued by our provider to this portal."""


def enabled() -> bool:
    return bool(settings.MEDBAY_OIDC_ENABLED)


@lru_cache(maxsize=4)
def _role_map(text: str) -> RoleMap:
    return parse_role_map(text, "MEDBAY_OIDC_ROLE_GROUPS")


def role_map() -> RoleMap:
    return _role_map(settings.MEDBAY_OIDC_ROLE_GROUPS)


def endpoints() -> dict[str, str]:
    """The four endpoints, from explicit settings or the issuer's discovery document.

    Asked of the provider at every log-in (one small GET): that is what tells a
    person at once that the provider is down, on a Medbay page, before their
    browser is sent to a log-in page that will not load. Raises ProviderUnreachable.
    """
    explicit = {name: getattr(settings, name, "") for name in ENDPOINTS}
    if all(explicit.values()):
        fetch_json(explicit["OIDC_OP_JWKS_ENDPOINT"])  # the same check, on the keys
        return explicit
    document = fetch_json(f"{settings.MEDBAY_OIDC_ISSUER}/.well-known/openid-configuration")
    missing = [key for key in ENDPOINTS.values() if not isinstance(document.get(key), str)]
    if missing:
        raise ProviderUnreachable(f"the discovery document names no {', '.join(missing)}")
    return {name: explicit[name] or document[key] for name, key in ENDPOINTS.items()}


def fetch_json(url: str) -> dict:
    try:
        response = requests.get(url, timeout=settings.OIDC_TIMEOUT)
        response.raise_for_status()
        document = response.json()
    except (requests.RequestException, ValueError) as error:
        raise ProviderUnreachable(f"{url}: {error}") from error
    if not isinstance(document, dict):
        raise ProviderUnreachable(f"{url} did not answer a JSON object")
    return document


def claim_text(claims: dict, name: str) -> str:
    value = claims.get(name)
    return value.strip() if isinstance(value, str) else ""


def claim_groups(claims: dict) -> tuple[str, ...]:
    value = claims.get(settings.MEDBAY_OIDC_GROUPS_CLAIM)
    if isinstance(value, str):  # some providers send a single group as a string
        value = [value]
    if not isinstance(value, list):
        return ()
    return tuple(group for group in value if isinstance(group, str))


def identity_from_claims(claims: dict) -> SiteIdentity:
    groups = claim_groups(claims)
    return SiteIdentity(
        source="oidc",
        username=claim_text(claims, settings.MEDBAY_OIDC_USERNAME_CLAIM),
        unix_user=claim_text(claims, settings.MEDBAY_OIDC_UNIX_USER_CLAIM),
        roles=roles_from_groups(groups, role_map()),
        email=claim_text(claims, "email"),
        first_name=claim_text(claims, "given_name"),
        last_name=claim_text(claims, "family_name"),
        groups=groups,
    )


class OIDCBackend(OIDCAuthenticationBackend):
    """mozilla-django-oidc's backend, with endpoints found when a log-in needs them.

    Django builds a backend for every request of a logged-in user (get_user), so
    the constructor must not reach the provider: the library's one reads every
    endpoint setting there, this one waits for authenticate().
    """

    def __init__(self, *args, **kwargs):
        self.UserModel = get_user_model()

    def authenticate(self, request, **kwargs):
        if not enabled() or request is None or "code" not in request.GET:
            return None
        found = endpoints()
        self.OIDC_OP_TOKEN_ENDPOINT = found["OIDC_OP_TOKEN_ENDPOINT"]
        self.OIDC_OP_USER_ENDPOINT = found["OIDC_OP_USER_ENDPOINT"]
        self.OIDC_OP_JWKS_ENDPOINT = found["OIDC_OP_JWKS_ENDPOINT"]
        self.OIDC_RP_CLIENT_ID = settings.OIDC_RP_CLIENT_ID
        self.OIDC_RP_CLIENT_SECRET = settings.OIDC_RP_CLIENT_SECRET
        self.OIDC_RP_SIGN_ALGO = settings.OIDC_RP_SIGN_ALGO
        self.OIDC_RP_IDP_SIGN_KEY = None
        return super().authenticate(request, **kwargs)

    def verify_token(self, token, **kwargs):
        # The library checks the signature and the nonce, not who issued the token
        # nor for whom; a site's provider serves many applications.
        payload = super().verify_token(token, **kwargs)
        audience = payload.get("aud")
        audiences = audience if isinstance(audience, list) else [audience]
        if self.OIDC_RP_CLIENT_ID not in audiences:
            raise TokenRejected(f"ID token audience {audience!r} is not this portal")
        issuer = settings.MEDBAY_OIDC_ISSUER
        if issuer and payload.get("iss", "").rstrip("/") != issuer:
            raise TokenRejected(f"ID token issuer {payload.get('iss')!r} is not {issuer!r}")
        return payload

    def verify_claims(self, claims) -> bool:
        return bool(claim_text(claims, settings.MEDBAY_OIDC_USERNAME_CLAIM))

    def filter_users_by_claims(self, claims):
        username = claim_text(claims, settings.MEDBAY_OIDC_USERNAME_CLAIM)
        return self.UserModel.objects.filter(username__iexact=username)

    def create_user(self, claims):
        identity = identity_from_claims(claims)
        # One transaction: a refused identity leaves no account behind.
        with transaction.atomic():
            user = self.UserModel.objects.create_user(identity.username, email=identity.email)
            apply_site_identity(user, identity)
        return user

    def update_user(self, user, claims):
        identity = identity_from_claims(claims)
        if (user.is_superuser or user.is_staff) and user.has_usable_password():
            # Someone the provider calls "admin" must not become the local admin. Other
            # local accounts are the site's people: the provider's roles replace theirs.
            raise IdentityRefused(
                f"A local Medbay administrator account named {user.get_username()!r} "
                f"already exists; it logs in with its password, not through the identity "
                f"provider."
            )
        apply_site_identity(user, identity)
        return user


def check_settings() -> list[str]:
    """What is wrong with the OIDC settings, for a clear start-up or log-in error."""
    problems = []
    if not settings.OIDC_RP_CLIENT_SECRET:
        problems.append("MEDBAY_OIDC_CLIENT_SECRET is not set")
    explicit = [getattr(settings, name, "") for name in ENDPOINTS]
    if not settings.MEDBAY_OIDC_ISSUER and not all(explicit):
        problems.append(
            "set MEDBAY_OIDC_ISSUER, or all of MEDBAY_OIDC_AUTHORIZATION_ENDPOINT, "
            "MEDBAY_OIDC_TOKEN_ENDPOINT, MEDBAY_OIDC_USERINFO_ENDPOINT and MEDBAY_OIDC_JWKS_URI"
        )
    try:
        role_map()
    except ImproperlyConfigured as error:
        problems.append(str(error))
    return problems
