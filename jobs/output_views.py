"""A job's output and error files: the panels on the job page and a plain-text view.

Only the job's owner and admins may read them (`can_view_script`): output can
carry paths, hostnames and secrets a training script prints. Managers get a
sentence, researchers looking at someone else's job a 403 from `job_for`.
"""

from __future__ import annotations

from django.http import HttpResponse, HttpResponseBadRequest
from django.shortcuts import render
from django.views.decorators.http import require_GET

from clusters.addresses import asks_which_cluster
from core.roles import ANY_ROLE, role_required
from jobs.access import can_view_script
from jobs.output import RAW_TAIL_BYTES, STREAMS, read_stream
from jobs.queries import job_at

PRIVATE = "This job's output is private: only its owner and administrators can read it."


@role_required(*ANY_ROLE)
@require_GET
@asks_which_cluster
def output_panel(request, slurm_id: int, cluster: str = ""):
    """One stream's panel; while the job is active it polls itself (live follow)."""
    job = job_at(request.user, slurm_id, cluster)
    if not can_view_script(request.user, job):
        return render(request, "jobs/partials/output_private.html", {"job": job}, status=403)
    stream = request.GET.get("stream", "stdout")
    if stream not in STREAMS:
        return HttpResponseBadRequest("stream must be stdout or stderr.")
    context = {"job": job, "tail": read_stream(job, stream)}
    return render(request, "jobs/partials/output_stream.html", context)


@role_required(*ANY_ROLE)
@require_GET
@asks_which_cluster
def output_raw(request, slurm_id: int, cluster: str = ""):
    """The stream's last 4 MiB as text/plain; `download=1` saves it as a file.

    A file that cannot be read is not an error of the request (the no-JS link
    leads here before anyone knows): the reason is the page, never a download.
    """
    job = job_at(request.user, slurm_id, cluster)
    if not can_view_script(request.user, job):
        return _plain(PRIVATE + "\n", status=403)
    stream = request.GET.get("stream", "stdout")
    if stream not in STREAMS:
        return HttpResponseBadRequest("stream must be stdout or stderr.")
    tail = read_stream(job, stream, max_bytes=RAW_TAIL_BYTES)
    if tail.same_as_stdout:
        tail = read_stream(job, "stdout", max_bytes=RAW_TAIL_BYTES)
    if tail.problem:
        return _plain(f"{STREAMS[stream]} of job {job.slurm_id}: {tail.problem}\n")
    response = _plain(tail.text)
    disposition = "attachment" if request.GET.get("download") == "1" else "inline"
    suffix = "out" if stream == "stdout" else "err"
    response["Content-Disposition"] = f'{disposition}; filename="job-{job.slurm_id}.{suffix}.txt"'
    return response


def _plain(text: str, *, status: int = 200) -> HttpResponse:
    response = HttpResponse(text, content_type="text/plain; charset=utf-8", status=status)
    # The file is the researcher's, not ours: never let a browser sniff it into HTML.
    response["X-Content-Type-Options"] = "nosniff"
    response["Content-Security-Policy"] = "default-src 'none'; sandbox"
    return response
