from django import forms
from django.contrib import admin

from jobs.access import system_account_refusal
from jobs.models import (
    ClusterAccount,
    Job,
    JobProgress,
    JobStateChange,
    JobTemplate,
    JobToken,
    ResearcherProfile,
)


@admin.register(ResearcherProfile)
class ResearcherProfileAdmin(admin.ModelAdmin):
    list_display = ["user", "unix_user", "default_account", "notify_email", "notifications_opt_out"]
    search_fields = ["user__username", "unix_user"]


class ClusterAccountForm(forms.ModelForm):
    class Meta:
        model = ClusterAccount
        fields = ["user", "cluster", "unix_user", "default_account"]

    def clean_unix_user(self):
        # The same refusal as the default cluster's mapping: never root or a system uid.
        unix_user = self.cleaned_data["unix_user"]
        if refusal := system_account_refusal(unix_user):
            raise forms.ValidationError(refusal)
        return unix_user


@admin.register(ClusterAccount)
class ClusterAccountAdmin(admin.ModelAdmin):
    """Beside ResearcherProfile: a researcher's account on each cluster but the default."""

    form = ClusterAccountForm
    list_display = ["user", "cluster", "unix_user", "default_account", "created_at"]
    list_filter = ["cluster"]
    search_fields = ["user__username", "unix_user"]


@admin.register(Job)
class JobAdmin(admin.ModelAdmin):
    list_display = ["slurm_id", "name", "user", "partition", "state", "restart_count"]
    list_filter = ["state", "partition"]
    search_fields = ["slurm_id", "name", "user"]
    readonly_fields = ["script", "params"]


@admin.register(JobStateChange)
class JobStateChangeAdmin(admin.ModelAdmin):
    list_display = ["job", "from_state", "to_state", "actor", "at"]


@admin.register(JobToken)
class JobTokenAdmin(admin.ModelAdmin):
    list_display = ["job", "prefix", "created_at", "revoked_at", "last_used_at"]
    readonly_fields = ["token_hash", "prefix", "created_at", "last_used_at"]


@admin.register(JobProgress)
class JobProgressAdmin(admin.ModelAdmin):
    list_display = ["job", "step", "checkpoint_saved", "restart_count", "reported_at"]


@admin.register(JobTemplate)
class JobTemplateAdmin(admin.ModelAdmin):
    list_display = ["owner", "name", "updated_at"]
