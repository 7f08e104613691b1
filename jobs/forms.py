"""The job form: Django field parsing, partition limits, then sbatch's own validation.

The HTML page, the htmx preview and `POST /api/v1/jobs/` all bind this form, so a
job is refused for the same reasons, with the same per-field messages, everywhere.
"""

from __future__ import annotations

from dataclasses import asdict

from django import forms
from django.conf import settings
from django.db.models import Count, Max

from clusters.models import Cluster, Partition, PoolKind
from clusters.status import POOL_FOR_PARTITION
from jobs.sbatch import GPU_FLAGS, TEMPLATES, JobParams, validate_params

AUTO_RESUME_CHOICES = (
    ("auto", "Automatic: on for multi-node GPU jobs"),
    ("yes", "Yes"),
    ("no", "No"),
)
# The preview shows the script exactly as submitted except for this secret, which is
# only issued when the job is really submitted.
PREVIEW_TOKEN = "issued-at-submit"
DEFAULT_GRACE_S = 120


def partition_limits(cluster: Cluster | None) -> dict[str, dict]:
    """Per partition: max_nodes, max_time_minutes, node count and the largest node's GPUs."""
    if cluster is None:
        return {}
    rows = (
        researcher_partitions(Partition.objects.filter(cluster=cluster))
        .annotate(node_total=Count("nodes"), max_gpus=Max("nodes__gpu_count"))
        .order_by("-is_default", "name")
    )
    return {
        row.name: {
            "name": row.name,
            "max_nodes": row.max_nodes,
            "max_time_minutes": row.max_time_minutes,
            "node_total": row.node_total,
            "max_gpus_per_node": row.max_gpus or 0,
            "grace_s": row.checkpoint_grace_s,
        }
        for row in rows
    }


def researcher_partitions(partitions):
    """Partitions researchers may submit to: every one but the spare pool's, whose
    nodes are kept free for replacements, unless MEDBAY_SPARE_FOR_RESEARCHERS says so."""
    if settings.MEDBAY_SPARE_FOR_RESEARCHERS:
        return partitions
    spare = [name for name, kind in POOL_FOR_PARTITION.items() if kind == PoolKind.SPARE]
    return partitions.exclude(name__in=spare)


def describe_limits(limits: dict) -> str:
    parts = [f"{limits['node_total']} nodes", f"up to {limits['max_gpus_per_node']} GPUs/node"]
    if limits["max_nodes"]:
        parts.append(f"max {limits['max_nodes']} nodes/job")
    if limits["max_time_minutes"]:
        parts.append(f"max {limits['max_time_minutes']} min")
    return f"{limits['name']} ({', '.join(parts)})"


class JobForm(forms.Form):
    # The clusters where the researcher has a Unix account, read when the form is bound.
    cluster = forms.ChoiceField(
        required=False,
        help_text="the cluster to run on: one where you have a Unix account "
        "(left out: the portal's default cluster)",
        error_messages={
            "invalid_choice": "You have no Unix account on cluster %(value)s, so Medbay cannot "
            "submit there; an admin maps one for you."
        },
    )
    job_name = forms.CharField(max_length=64)
    partition = forms.ChoiceField()
    account = forms.CharField(max_length=64, required=False)
    nodes = forms.IntegerField(min_value=1, max_value=4096, initial=1)
    gpus_per_node = forms.IntegerField(min_value=0, max_value=64, initial=0, label="GPUs per node")
    gpu_flag = forms.ChoiceField(
        choices=[(flag, f"--{flag}") for flag in GPU_FLAGS], initial="gres", label="GPU option"
    )
    cpus_per_task = forms.IntegerField(min_value=1, max_value=1024, initial=1)
    mem = forms.CharField(
        max_length=16, required=False, label="Memory", help_text="MB, or e.g. 32G"
    )
    time_limit = forms.IntegerField(
        min_value=1, max_value=366 * 24 * 60, initial=60, label="Time limit (minutes)"
    )
    workdir = forms.CharField(max_length=1024, label="Working directory")
    env_setup = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 3}),
        required=False,
        label="Environment set-up lines",
    )
    template = forms.ChoiceField(choices=[(t, t) for t in TEMPLATES], initial="python")
    command = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 4}),
        label="Command or script body",
        help_text="torchrun/python: the script and its arguments; custom: the whole body.",
    )
    checkpoint_dir = forms.CharField(max_length=1024, required=False)
    # Optional, as the API documents it: left out, it is "auto".
    auto_resume = forms.ChoiceField(choices=AUTO_RESUME_CHOICES, initial="auto", required=False)

    def __init__(
        self,
        *args,
        cluster: Cluster | None = None,
        clusters: list[Cluster] | None = None,
        **kwargs,
    ):
        super().__init__(*args, **kwargs)
        self.clusters = clusters or ([cluster] if cluster else [])
        self.fields["cluster"].choices = [(row.name, row.name) for row in self.clusters]
        if cluster is not None:
            self.fields["cluster"].initial = cluster.name
        self.limits = partition_limits(cluster)
        self.fields["partition"].choices = [
            (name, describe_limits(limits)) for name, limits in self.limits.items()
        ]
        first = next(iter(self.limits.values()), None)
        if first:
            # The default partition comes first; the page shows it chosen, so it is.
            self.fields["partition"].initial = first["name"]
        if first and first["max_gpus_per_node"] and "gpus_per_node" not in self.initial:
            # A job on a GPU partition nearly always wants a GPU; 0 was a trap.
            self.fields["gpus_per_node"].initial = 1
        self.params: JobParams | None = None
        self.rebind = lambda data: type(self)(data, cluster=cluster, clusters=clusters)

    def chosen_cluster(self) -> Cluster | None:
        """The cluster the valid form submits to: the one chosen, else the first offered."""
        name = self.cleaned_data.get("cluster")
        default = self.clusters[0] if self.clusters else None
        return next((row for row in self.clusters if row.name == name), default)

    def prefilled(self) -> JobForm:
        """This form bound to what it shows, to preview a form that opens filled in."""
        data = {name: self[name].value() for name in self.fields}
        return self.rebind({name: value for name, value in data.items() if value is not None})

    def clean(self):
        """Every problem in one answer: a field Django refused (missing, not a number)
        stands in for a harmless value, so the partition limits and sbatch's own
        checks still judge every other field, and each message lands on its field."""
        data = super().clean()
        refused = set(self.errors)
        if "partition" not in refused:
            self._check_partition_limits(data)
        complete = {**FILLERS, "partition": next(iter(self.limits), ""), **data}
        params = self.build_params(complete, progress_token=PREVIEW_TOKEN)
        derived = params.checkpoint_dir is not None and not data.get("checkpoint_dir", "").strip()
        for field, messages in validate_params(params).items():
            if field in refused or (field == "checkpoint_dir" and derived):
                # Refused already, or a checkpoint place derived from the working
                # directory, whose own error says what to fix.
                continue
            if field not in self.fields and refused:
                continue  # a derived value (grace, portal) judged on a stand-in
            target = field if field in self.fields else None
            for message in messages:
                self.add_error(target, message if target else f"{field}: {message}")
        if not self.errors:
            self.params = params
        return data

    def _check_partition_limits(self, data) -> None:
        limits = self.limits[data["partition"]]
        nodes, minutes, gpus = (data.get(k) for k in ("nodes", "time_limit", "gpus_per_node"))
        if nodes is not None and limits["max_nodes"] and nodes > limits["max_nodes"]:
            self.add_error("nodes", f"{limits['name']} allows at most {limits['max_nodes']}.")
        elif nodes is not None and nodes > limits["node_total"]:
            self.add_error("nodes", f"{limits['name']} has only {limits['node_total']} nodes.")
        if (
            minutes is not None
            and limits["max_time_minutes"]
            and minutes > limits["max_time_minutes"]
        ):
            self.add_error(
                "time_limit",
                f"{limits['name']} allows at most {limits['max_time_minutes']} minutes.",
            )
        if gpus is not None and gpus > limits["max_gpus_per_node"]:
            self.add_error(
                "gpus_per_node",
                f"Nodes in {limits['name']} have at most {limits['max_gpus_per_node']} GPUs.",
            )

    def build_params(self, data, *, progress_token: str | None = None) -> JobParams:
        from django.conf import settings

        choice = data["auto_resume"] or "auto"
        auto_resume = resolve_auto_resume(choice, data["nodes"], data["gpus_per_node"])
        checkpoint_dir = data["checkpoint_dir"].strip() or None
        if auto_resume and checkpoint_dir is None and choice == "auto":
            # Automatic resume needs somewhere to checkpoint; the researcher did not
            # ask for it explicitly, so give it a place rather than an error.
            checkpoint_dir = data["workdir"].rstrip("/") + "/checkpoints"
        grace = self.limits.get(data["partition"], {}).get("grace_s") or DEFAULT_GRACE_S
        # Slurm refuses a signal lead time as long as the job itself; short test
        # jobs get half their time limit instead.
        grace = min(grace, max(1, data["time_limit"] * 60 // 2))
        mem = data["mem"].strip() or None
        return JobParams(
            job_name=data["job_name"],
            partition=data["partition"],
            account=data["account"].strip() or None,
            nodes=data["nodes"],
            gpus_per_node=data["gpus_per_node"],
            gpu_flag=data["gpu_flag"],
            cpus_per_task=data["cpus_per_task"],
            mem=int(mem) if mem and mem.isdigit() else mem,
            time_limit=data["time_limit"],
            workdir=data["workdir"].strip(),
            env_setup=tuple(line for line in data["env_setup"].splitlines() if line.strip()),
            template=data["template"],
            command=data["command"],
            checkpoint_dir=checkpoint_dir,
            auto_resume=auto_resume,
            signal_grace_s=grace,
            portal_url=settings.MEDBAY_PORTAL_URL if progress_token else None,
            progress_token=progress_token,
        )


# Valid stand-ins for fields the form refused, so that clean() can judge the rest.
FILLERS = {
    "job_name": "job",
    "account": "",
    "nodes": 1,
    "gpus_per_node": 0,
    "gpu_flag": "gres",
    "cpus_per_task": 1,
    "mem": "",
    "time_limit": 60,
    "workdir": "/",
    "env_setup": "",
    "template": "python",
    "command": "true",
    "checkpoint_dir": "",
    "auto_resume": "auto",
}


def resolve_auto_resume(choice: str, nodes: int, gpus_per_node: int) -> bool:
    if choice == "auto":
        return nodes > 1 and gpus_per_node > 0
    return choice == "yes"


FORM_FIELDS = tuple(JobForm.base_fields)

RUN_AS_OWNER, RUN_AS_SELF = "owner", "self"


class ResubmitForm(JobForm):
    """The job form, plus how to run it when someone resubmits another person's job.

    Nobody runs code as someone else: the job's stored script runs unchanged as its
    owner, or the edited one runs as the resubmitter's own Unix account. Without
    `owner` (her own job) there is nothing to choose and the field is left out.
    """

    run_as = forms.ChoiceField(
        choices=[(RUN_AS_OWNER, RUN_AS_OWNER), (RUN_AS_SELF, RUN_AS_SELF)],
        required=False,
        widget=forms.RadioSelect,
        label="Run it",
    )

    field_order = ["run_as"]

    def __init__(self, *args, owner: str | None = None, me: str = "", **kwargs):
        super().__init__(*args, **kwargs)
        cluster, clusters = kwargs.get("cluster"), kwargs.get("clusters")
        self.rebind = lambda data: type(self)(
            data, cluster=cluster, clusters=clusters, owner=owner, me=me
        )
        if owner is None:
            del self.fields["run_as"]
            return
        self.fields["run_as"].choices = [
            (
                RUN_AS_OWNER,
                f"Unchanged, as {owner}: the stored script runs exactly as {owner} wrote it; "
                f"{owner}'s set-up lines are kept (not shown). Any edit is refused.",
            ),
            (
                RUN_AS_SELF,
                f"Edited, as you ({me}): your edits run under your own Unix account, "
                f"with your set-up lines only; {owner}'s are not carried.",
            ),
        ]
        setup = f"Empty keeps {owner}'s with the stored script; with your edits, only yours run."
        self.fields["env_setup"].help_text = setup

    @property
    def as_self(self) -> bool:
        """Whether the job runs as the resubmitter; left out, it is the stored script as is."""
        return self.cleaned_data.get("run_as") == RUN_AS_SELF


def initial_from_params(params: dict) -> dict:
    """Form data from stored parameters (a Job's or a template's)."""
    initial = {name: params[name] for name in FORM_FIELDS if name in params}
    if isinstance(initial.get("env_setup"), list | tuple):
        initial["env_setup"] = "\n".join(initial["env_setup"])
    if isinstance(initial.get("auto_resume"), bool):
        initial["auto_resume"] = "yes" if initial["auto_resume"] else "no"
    if initial.get("mem") is not None:
        initial["mem"] = str(initial["mem"])
    for name in ("account", "checkpoint_dir", "mem"):
        if initial.get(name) is None:
            initial.pop(name, None)
    return initial


def stored_params(params: JobParams) -> dict:
    """JobParams as JSON for the Job row and templates, without the secret token."""
    data = asdict(params)
    data["env_setup"] = list(params.env_setup)
    data.pop("progress_token", None)
    data.pop("portal_url", None)
    return data


def form_data_from_json(payload: dict) -> dict:
    """API JSON to form data: lists become lines, booleans become the choice values."""
    data = {}
    for name in FORM_FIELDS:
        if name not in payload or payload[name] is None:
            continue
        value = payload[name]
        if name == "env_setup" and isinstance(value, list):
            value = "\n".join(str(line) for line in value)
        elif name == "auto_resume" and isinstance(value, bool):
            value = "yes" if value else "no"
        data[name] = value
    return data
