"""The OpenID Connect log-in's two pages: the start (off to the provider) and its callback.

Both are mozilla-django-oidc's views; what they add is that every way a log-in
can fail ends on a page that says what happened and what to do (the provider
down, the person cancelled at the provider, a callback this browser did not
start, an account Medbay refuses), never a 500 or the library's bare redirect.
"""

from __future__ import annotations

import logging

import requests
from django.conf import settings
from django.core.exceptions import SuspiciousOperation
from django.shortcuts import redirect, render
from django.urls import path
from django.views.generic import View
from mozilla_django_oidc.views import (
    OIDCAuthenticationCallbackView,
    OIDCAuthenticationRequestView,
)

from identity.directory import IdentityRefused
from identity.oidc_login import (
    ProviderUnreachable,
    TokenRejected,
    check_settings,
    enabled,
    endpoints,
)

log = logging.getLogger(__name__)


def provider_name() -> str:
    return settings.MEDBAY_OIDC_NAME


def login_button(request) -> dict:
    """Template context: the log-in page offers the provider when OIDC is on."""
    return {"oidc_login_name": provider_name()} if enabled() else {}


def failure(request, message: str, status: int):
    context = {"provider": provider_name(), "message": message}
    return render(request, "registration/oidc_error.html", context, status=status)


def unreachable(request, error: Exception):
    log.warning("OIDC provider unreachable: %s", error)
    message = (
        f"{provider_name()} could not be reached, so Medbay cannot check who you are. "
        f"Try again in a few minutes; if it keeps failing, tell your site's administrators."
    )
    return failure(request, message, 502)


class LoginStart(OIDCAuthenticationRequestView):
    """Sends the browser to the provider's log-in form (state, nonce and PKCE in the session)."""

    def __init__(self, **kwargs):
        # The library's constructor reads the endpoint; here it may need the network.
        View.__init__(self, **kwargs)

    def get(self, request):
        if not enabled():
            return redirect("login")  # an old bookmark, from when log-in went through OIDC
        problems = check_settings()
        if problems:
            log.error("OIDC settings: %s", "; ".join(problems))
            message = "Log-in through the identity provider is not set up correctly on this portal."
            return failure(request, message + " " + "; ".join(problems) + ".", 503)
        try:
            self.OIDC_OP_AUTH_ENDPOINT = endpoints()["OIDC_OP_AUTHORIZATION_ENDPOINT"]
        except ProviderUnreachable as error:
            return unreachable(request, error)
        self.OIDC_RP_CLIENT_ID = settings.OIDC_RP_CLIENT_ID
        return super().get(request)


STALE = (
    "This log-in answer does not match a log-in started in this browser (it may have "
    "expired, or been started in another tab or browser). Start again."
)


class LoginCallback(OIDCAuthenticationCallbackView):
    """Where the provider sends the browser back with a code (or an error)."""

    def get(self, request):
        if not enabled():
            return redirect("login")
        state = request.GET.get("state")
        if "code" in request.GET and state not in request.session.get("oidc_states", {}):
            return failure(request, STALE, 400)
        self.user = None
        try:
            return super().get(request)
        except IdentityRefused as refused:
            log.warning("OIDC log-in refused: %s", refused)
            return failure(request, f"Medbay refused this log-in. {refused}", 403)
        except (ProviderUnreachable, requests.ConnectionError, requests.Timeout) as error:
            return unreachable(request, error)
        except requests.HTTPError as error:
            log.warning("OIDC provider refused the token or user info request: %s", error)
            message = (
                f"{provider_name()} would not complete this log-in (the log-in may have "
                f"expired). Start again."
            )
            return failure(request, message, 502)
        except TokenRejected as error:
            log.error("OIDC ID token rejected: %s", error)
            message = (
                f"The answer from {provider_name()} was not issued for this portal (its "
                f"issuer or audience does not match Medbay's settings). Tell your site's "
                f"administrators."
            )
            return failure(request, message, 502)
        except SuspiciousOperation as error:  # nonce or signature checks
            log.warning("OIDC callback failed its checks: %s", error)
            return failure(request, STALE, 400)

    def login_failure(self):
        request = self.request
        error = request.GET.get("error")
        if error:
            # Shown escaped and cut short: anyone can craft this link.
            description = request.GET.get("error_description", "")[:200]
            if error == "access_denied":
                message = f"The log-in was cancelled or refused at {provider_name()}."
            else:
                message = f"{provider_name()} answered with an error ({error})."
            return failure(request, f"{message} {description}".strip(), 403)
        if self.user is not None and not self.user.is_active:
            message = "Your Medbay account is disabled. Ask an administrator to enable it."
            return failure(request, message, 403)
        if "code" not in request.GET:
            return failure(request, STALE, 400)
        message = (
            f"{provider_name()} did not say who you are (its answer has no "
            f"{settings.MEDBAY_OIDC_USERNAME_CLAIM!r} claim), so Medbay cannot log you in."
        )
        return failure(request, message, 403)


urlpatterns = [
    path("authenticate/", LoginStart.as_view(), name="oidc_authentication_init"),
    path("callback/", LoginCallback.as_view(), name="oidc_authentication_callback"),
]
