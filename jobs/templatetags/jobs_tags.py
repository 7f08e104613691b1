import re

from django import template
from django.urls import reverse
from django.utils.html import conditional_escape, format_html
from django.utils.safestring import mark_safe

from jobs.access import can_view_script
from jobs.output import STREAMS
from jobs.queries import job_url as _job_url
from jobs.reasons import plain_reason as _plain_reason

register = template.Library()

# The forms remediation steps write job ids in (remediation/steps/jobs.py):
# "job(s) 1012, 1013", "job 1012", "requeued 1012", "already finished 1012", and
# a note per job, "1012 released", at the start or after "; ".
JOB_IDS = re.compile(
    r"(\b(?:jobs?|job\(s\)|requeued|cancelled|already finished) )(\d+(?:, \d+)*)\b"
    r"|(^|; )(\d+)(?= (?:released|ended|killed|started|is|was)\b)"
)
JOB_ID = re.compile(r"\d+")


@register.filter
def plain_reason(job) -> str:
    return _plain_reason(job)


@register.simple_tag(takes_context=True)
def output_streams(context, job) -> list[tuple[str, str]]:
    """The streams this viewer may read on the job page: both, or none (private)."""
    request = context.get("request")
    if request is None or not can_view_script(request.user, job):
        return []
    return list(STREAMS.items())


@register.filter
def job_url(job, page: str = "") -> str:
    """The job's page at its cluster address: `{{ job|job_url }}`, `{{ job|job_url:"story" }}`."""
    return _job_url(job, page)


def _job_path(slurm_id, cluster: str = "") -> str:
    # Without a cluster, the address by id alone: it leads on, or asks which cluster.
    if cluster:
        return reverse("cluster-job", args=[cluster, int(slurm_id)])
    return reverse("job-detail", args=[int(slurm_id)])


@register.filter
def job_link(slurm_id, cluster: str = "") -> str:
    """A link to job SLURM_ID's page, on CLUSTER where the page knows it."""
    if slurm_id in (None, ""):
        return "—"
    return format_html('<a href="{}">{}</a>', _job_path(slurm_id, cluster), slurm_id)


@register.filter(needs_autoescape=True)
def link_job_ids(message, cluster: str = "", autoescape=True) -> str:
    """MESSAGE, escaped, with the job ids it names linked to their job pages (on
    CLUSTER, where the page knows which)."""
    text = conditional_escape(message if message is not None else "")

    def link_ids(match: re.Match) -> str:
        before, ids = (match[1], match[2]) if match[1] is not None else (match[3], match[4])
        return before + JOB_ID.sub(
            lambda m: f'<a href="{_job_path(m[0], cluster)}">{m[0]}</a>', ids
        )

    # Only digits after a keyword and a space are linked; an entity such as &#x27; never
    # follows a space, so linking after escaping cannot break the markup.
    return mark_safe(JOB_IDS.sub(link_ids, str(text)))  # noqa: S308 (escaped above)


EVENT_KINDS = {
    "state": "State",
    "remediation": "Remediation",
    "step": "Step",
    "health": "Health",
    "checkpoint": "Checkpoint",
}


@register.filter
def event_kind(kind: str) -> str:
    return EVENT_KINDS.get(kind, kind)


@register.filter
def minutes(value) -> str:
    """A time limit in Slurm's minutes, as a person reads it: 90 -> "1 h 30 min"."""
    try:
        total = int(value)
    except (TypeError, ValueError):
        return "—"
    days, rest = divmod(total, 24 * 60)
    hours, mins = divmod(rest, 60)
    parts = [
        f"{days} d" if days else "",
        f"{hours} h" if hours else "",
        f"{mins} min" if mins else "",
    ]
    return " ".join(part for part in parts if part) or "0 min"


# Labels for the submitted parameters the form does not label itself.
PARAM_LABELS = {
    "signal_grace_s": "Checkpoint grace (seconds)",
    "output": "Output file",
    "portal_url": "Portal address",
    "progress_token": "Progress token",
}


@register.filter
def param_label(key) -> str:
    """A submitted parameter's name as the new-job form labels it."""
    from jobs.forms import JobForm

    field = JobForm.base_fields.get(key)
    if key in PARAM_LABELS:
        return PARAM_LABELS[key]
    if field is not None and field.label:
        return str(field.label)
    return str(key).replace("_", " ").capitalize()


@register.filter
def param_value(value) -> str:
    """None and empty as a dash, booleans as yes/no, lists one item after another."""
    if value is None or value == "" or value == []:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list | tuple):
        return "; ".join(str(item) for item in value)
    return str(value)
