"""Which Unix user a portal account submits as, and who may see which job."""

from __future__ import annotations

import pwd
import re
from collections.abc import Callable

from django.conf import settings

from core.roles import Role, has_role, is_admin


def unix_user_for(user) -> str:
    """The Unix account Slurm runs this person's jobs as (no profile: their username)."""
    from jobs.models import ResearcherProfile

    profile = ResearcherProfile.objects.filter(user=user).only("unix_user").first()
    if profile is not None and profile.unix_user:
        return profile.unix_user
    return user.get_username()


def default_account_for(user) -> str:
    from jobs.models import ResearcherProfile

    profile = ResearcherProfile.objects.filter(user=user).only("default_account").first()
    return profile.default_account if profile is not None else ""


def profile_for_unix_user(unix_user: str):
    from jobs.models import ResearcherProfile

    if not unix_user:
        return None
    return ResearcherProfile.objects.select_related("user").filter(unix_user=unix_user).first()


def owns(user, job) -> bool:
    return bool(job.user) and job.user == unix_user_for(user)


def can_view_job(user, job) -> bool:
    return job_viewer(user)(job)


def job_viewer(user) -> Callable[[object], bool]:
    """can_view_job for many jobs at once: the person's roles and Unix account are read
    once, not once per job (the queue marks which of its rows may be opened)."""
    if is_admin(user) or has_role(user, Role.MANAGER):
        return lambda job: True
    if not has_role(user, Role.RESEARCHER):
        return lambda job: False
    mine = unix_user_for(user)
    return lambda job: bool(job.user) and job.user == mine


def can_act_on_job(user, job) -> bool:
    """Cancel and resubmit: the owning researcher or an admin; managers only watch."""
    if is_admin(user):
        return True
    return has_role(user, Role.RESEARCHER) and owns(user, job)


def can_view_script(user, job) -> bool:
    # Scripts may carry paths and secrets in set-up lines: never shown to managers.
    return can_act_on_job(user, job)


HIDDEN = "<hidden>"
# Rows stored before tokens were redacted at submission still hold them.
TOKEN_LINE = re.compile(r"^(export MEDBAY_JOB_TOKEN=).*$", re.M)


def redact_token(script: str) -> str:
    return TOKEN_LINE.sub(rf"\g<1>'{HIDDEN}'", script)


def visible_params(user, job) -> dict:
    """The job's parameters; set-up lines (often `export API_KEY=...`) only for the owner."""
    params = dict(job.params or {})
    setup = params.get("env_setup")
    if setup and not owns(user, job):
        params["env_setup"] = [HIDDEN for _ in setup]
    return params


def visible_script(user, job) -> str | None:
    """The script for the owner; admins get it with the set-up lines hidden; others None."""
    if not can_view_script(user, job) or not job.script:
        return None
    script = redact_token(job.script)
    if owns(user, job):
        return script
    setup = {line for line in (job.params or {}).get("env_setup") or () if line.strip()}
    lines = [f"# {HIDDEN} set-up line" if line in setup else line for line in script.split("\n")]
    return "\n".join(lines)


def can_submit(user) -> bool:
    return has_role(user, Role.RESEARCHER, Role.ADMIN)


def is_mapped_researcher_account(unix_user: str) -> bool:
    """A portal researcher's own Unix account: a profile's, one of their clusters'
    accounts, or a profileless username."""
    from django.contrib.auth import get_user_model

    from jobs.models import ClusterAccount, ResearcherProfile

    if ResearcherProfile.objects.filter(unix_user=unix_user).exists():
        return True
    if ClusterAccount.objects.filter(unix_user=unix_user, user__is_active=True).exists():
        return True
    User = get_user_model()
    return (
        User.objects.filter(username=unix_user, is_active=True)
        .exclude(researcher_profile__unix_user__gt="")
        .exists()
    )


def system_account_refusal(unix_user: str) -> str | None:
    """Why `unix_user` can never be a researcher's account (root, a system uid), or None.

    An account this host does not know cannot be checked here; sbatch refuses it.
    """
    if not unix_user or unix_user == "root":
        return f"Medbay never submits jobs as {unix_user or 'an empty user'!r}."
    try:
        uid = pwd.getpwnam(unix_user).pw_uid
    except KeyError:
        uid = None
    if uid is not None and uid < settings.MEDBAY_MIN_UID:
        return (
            f"{unix_user!r} is a system account (uid {uid}, below {settings.MEDBAY_MIN_UID}); "
            f"Medbay only submits as a researcher's own Unix account."
        )
    return None


def run_as_refusal(unix_user: str) -> str | None:
    """Why Medbay must not submit as `unix_user`, or None.

    Slurm runs the script as whoever submits it: a job owned by root (the sync
    records whatever squeue says) resubmitted by an admin would run as root, and
    a system account (uid below MEDBAY_MIN_UID) holds what a researcher must not.
    An account this host does not know cannot be checked here; sbatch refuses it.
    """
    reason = system_account_refusal(unix_user)
    if reason:
        return reason
    if not is_mapped_researcher_account(unix_user):
        return (
            f"{unix_user!r} is not the Unix account of any Medbay user; "
            f"Medbay only submits as a researcher's own Unix account."
        )
    return None
