"""The admin page's form for a cluster's configuration; `ClusterConfig.validate` decides."""

from __future__ import annotations

from django import forms

from clusters.config import ClusterConfig, ClusterConfigError, FleetKind, Transport, validate_name

PATH_HELP = "absolute path of a file on the hosts that run the sync and the engine"


class ClusterForm(forms.Form):
    """Name (when adding), transport, fleet, sync interval and whether it is watched."""

    name = forms.CharField(max_length=64, help_text="Slurm's ClusterName")
    transport = forms.ChoiceField(choices=Transport.choices)
    slurm_conf = forms.CharField(
        label="slurm.conf", required=False, max_length=512, help_text=PATH_HELP
    )
    slurmrestd_url = forms.CharField(
        label="slurmrestd URL", required=False, max_length=512, help_text="slurmrestd only"
    )
    jwt_key_file = forms.CharField(
        label="JWT key file",
        required=False,
        max_length=512,
        help_text="slurmrestd only: the path of the auth/jwt key, never the key itself",
    )
    fleet = forms.ChoiceField(choices=FleetKind.choices)
    kubeconfig = forms.CharField(
        required=False, max_length=512, help_text="Kubernetes only; empty: kubectl's default"
    )
    kube_context = forms.CharField(label="Kubernetes context", required=False, max_length=128)
    sync_interval_s = forms.FloatField(label="Sync interval (seconds)")
    enabled = forms.BooleanField(required=False, initial=True)

    def __init__(self, *args, adding: bool, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        if not adding:
            del self.fields["name"]

    def clean(self):
        data = super().clean()
        if self.errors:
            return data
        try:
            if "name" in self.fields:
                validate_name(data["name"])
            self.config = ClusterConfig(
                **{field: data[field] for field in ClusterConfig.__dataclass_fields__}
            ).validate()
        except ClusterConfigError as error:
            self.add_config_errors(error)
        return data

    def add_config_errors(self, error: ClusterConfigError) -> None:
        for field, message in error.errors.items():
            self.add_error(field if field in self.fields else None, message)


def initial_for(config: ClusterConfig, enabled: bool) -> dict:
    return {
        **{f: getattr(config, f) for f in ClusterConfig.__dataclass_fields__},
        "enabled": enabled,
    }
