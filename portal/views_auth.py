"""The log-in page, with failed attempts throttled (see portal.ratelimit)."""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth.views import LoginView
from django.shortcuts import render

from portal import ratelimit


class RateLimitedLoginView(LoginView):
    """Django's LoginView that refuses, with a 429, after too many failures."""

    def post(self, request, *args, **kwargs):
        # Refuse before checking the password, so a locked name cannot be guessed at.
        if ratelimit.is_locked(ratelimit.client_ip(request), self._username()):
            return self._locked()
        return super().post(request, *args, **kwargs)

    def form_invalid(self, form):
        ratelimit.record_failure(ratelimit.client_ip(self.request), self._username())
        return super().form_invalid(form)

    def form_valid(self, form):
        ratelimit.clear(ratelimit.client_ip(self.request), self._username())
        return super().form_valid(form)

    def _username(self) -> str:
        return str(self.request.POST.get("username", ""))[:150]

    def _locked(self):
        response = render(
            self.request,
            "error.html",
            {"status": 429, "message": ratelimit.lockout_message()},
            status=429,
        )
        response["Retry-After"] = str(settings.MEDBAY_LOGIN_WINDOW_S)
        return response
