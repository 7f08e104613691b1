"""Your API tokens: see them (by prefix), create one (shown once), revoke them."""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.shortcuts import redirect, render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_http_methods, require_POST

from core.roles import ANY_ROLE, role_required
from identity import accounts


class TokenForm(forms.Form):
    name = forms.CharField(
        max_length=100,
        help_text="what it is for, e.g. “laptop scripts”",
        error_messages={"required": "Give the token a name, so that you can tell it apart."},
    )


@never_cache  # the answer to a creation holds the whole token: no cache may keep it
@require_http_methods(["GET", "POST"])
@role_required(*ANY_ROLE)
def api_tokens(request):
    form = TokenForm(request.POST if request.method == "POST" else None)
    created, raw = None, None
    status = 200
    if request.method == "POST":
        if form.is_valid():
            created, raw = accounts.issue_api_token(request.user, form.cleaned_data["name"])
            form = TokenForm()
        else:
            status = 400
    context = {
        "form": form,
        "tokens": accounts.tokens_of(request.user),
        "created": created,
        "raw": raw,
    }
    return render(request, "accounts/api_tokens.html", context, status=status)


@require_POST
@role_required(*ANY_ROLE)
def api_token_revoke(request, token_id: int):
    if accounts.revoke_api_token(request.user, token_id):
        messages.success(request, "Token revoked: it no longer works.")
    else:
        # Someone else's token looks the same as none at all.
        messages.error(request, "No such token of yours (already revoked?).")
    return redirect("api-tokens")
