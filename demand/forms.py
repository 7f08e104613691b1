"""The reallocation policy's form: it parses; `policies.validate` judges the values."""

from __future__ import annotations

from django import forms

from clusters.models import NodePool, PoolKind
from demand import rules
from demand.models import ReallocationPolicy
from demand.policies import validate

SIGNAL_CHOICES = [
    (str(rules.Signal.TRAINING), "training queue (Slurm)"),
    (str(rules.Signal.INFERENCE_LOAD), "inference load (Prometheus)"),
    (str(rules.Signal.INFERENCE_QUEUE), "inference partition's queue (Slurm)"),
    (str(rules.Signal.KUBERNETES), "inference pods and autoscaler (Kubernetes)"),
]
MAX_DAYS_S = 7 * 86400


class PolicyForm(forms.ModelForm):
    signals = forms.MultipleChoiceField(
        choices=SIGNAL_CHOICES,
        widget=forms.CheckboxSelectMultiple,
        help_text="Any of these missing or stale holds every move.",
    )

    class Meta:
        model = ReallocationPolicy
        fields = [
            "training_pool",
            "inference_pool",
            "enabled",
            "mode",
            "training_min_nodes",
            "training_max_nodes",
            "inference_min_nodes",
            "inference_max_nodes",
            "inference_unit",
            "inference_target",
            "training_max_wait_s",
            "hysteresis_s",
            "cooldown_s",
            "max_moves_per_hour",
            "allow_checkpoint_requeue",
            "stale_after_s",
            "signals",
        ]
        labels = {
            "enabled": "On",
            "training_max_nodes": "Training max nodes (empty: no maximum)",
            "inference_max_nodes": "Inference max nodes (empty: no maximum)",
            "training_max_wait_s": "Longest acceptable training wait (s)",
            "hysteresis_s": "Hysteresis (s): how long a condition must hold",
            "cooldown_s": "Cooldown per node (s)",
            "allow_checkpoint_requeue": "May checkpoint-requeue training jobs to move a node",
            "stale_after_s": "A signal older than this (s) is stale",
        }
        help_texts = {
            "inference_target": "A p95 latency in ms, or a number of requests waiting.",
            "mode": "automatic moves at once (behind the circuit breaker); approval asks first.",
        }

    def __init__(self, *args, cluster=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.cluster = cluster or (self.instance.cluster if self.instance.pk else None)
        if self.instance.pk:
            # A policy belongs to its pair: another pair is another policy.
            for name in ("training_pool", "inference_pool"):
                self.fields[name].disabled = True
        pools = NodePool.objects.filter(cluster=self.cluster).order_by("name")
        self.fields["training_pool"].queryset = pools.filter(kind=PoolKind.TRAINING)
        self.fields["inference_pool"].queryset = pools.filter(kind=PoolKind.INFERENCE)
        for name in ("training_max_wait_s", "hysteresis_s", "cooldown_s", "stale_after_s"):
            self.fields[name].max_value = MAX_DAYS_S
            self.fields[name].widget.attrs["max"] = MAX_DAYS_S
        if not self.is_bound and not self.instance.pk:
            self.initial.setdefault("signals", list(self.instance.signals))

    def clean(self):
        cleaned = super().clean()
        if self.errors:
            return cleaned
        policy = self.instance
        policy.cluster = self.cluster
        for name, value in cleaned.items():
            setattr(policy, name, value)
        # Every impossible value at once, each under its own field.
        for field, error in validate(policy).items():
            self.add_error(field if field in self.fields else None, error)
        return cleaned
