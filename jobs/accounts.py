"""Which Unix user a portal account submits as, and who may see which job."""

from __future__ import annotations

from portal.roles import Role, has_role, is_admin


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
    if is_admin(user) or has_role(user, Role.MANAGER):
        return True
    return has_role(user, Role.RESEARCHER) and owns(user, job)


def can_act_on_job(user, job) -> bool:
    """Cancel and resubmit: the owning researcher or an admin; managers only watch."""
    if is_admin(user):
        return True
    return has_role(user, Role.RESEARCHER) and owns(user, job)


def can_view_script(user, job) -> bool:
    # Scripts may carry paths and secrets in set-up lines: never shown to managers.
    return can_act_on_job(user, job)


def can_submit(user) -> bool:
    return has_role(user, Role.RESEARCHER, Role.ADMIN)
