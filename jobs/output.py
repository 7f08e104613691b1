"""The end of a job's output and error files, read as the job's Unix user.

Views decide who may see a job's output (`accounts.can_view_script`); this
module finds the files and reads them through the backend, which reads as the
job's user (`clusters/backends/job_files.py`), and turns every failure into a
sentence for the page: a job page must never break because a file is missing.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass

from clusters.backends.base import BackendError, JobFileError, JobOutputPaths
from clusters.backends.job_files import expand_output_pattern
from clusters.backends.registry import backend_for

STREAMS = {"stdout": "Output", "stderr": "Errors"}
PAGE_TAIL_BYTES = 64 * 1024
RAW_TAIL_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True)
class StreamTail:
    """What a job's output or error panel shows: the file, its end, or why not."""

    stream: str
    path: str = ""
    text: str = ""
    problem: str = ""
    problem_kind: str = ""
    truncated: bool = False
    # Output and errors go to one file (Slurm's default without --error).
    one_file: bool = False

    @property
    def same_as_stdout(self) -> bool:
        """The error panel of a job with one file: the output panel shows it, once."""
        return self.one_file and self.stream == "stderr"

    @property
    def label(self) -> str:
        if self.one_file and self.stream == "stdout":
            return "Output and errors"
        return STREAMS[self.stream]


def read_stream(job, stream: str, *, max_bytes: int = PAGE_TAIL_BYTES, backend=None) -> StreamTail:
    """The last MAX_BYTES of the job's STREAM ("stdout" or "stderr")."""
    if stream not in STREAMS:
        raise ValueError(f"unknown stream {stream!r}")
    backend = backend or backend_for(job.cluster)
    paths, problem = output_paths(job, backend)
    if paths is None:
        return StreamTail(stream, problem=problem, problem_kind=JobFileError.FAILED)
    if paths.user and job.user and paths.user != job.user:
        # A reused job id (Slurm restarted with a new state save) is someone else's job.
        message = (
            f"Slurm says job {job.slurm_id} now belongs to {paths.user}; Medbay will not read it."
        )
        return StreamTail(stream, problem=message, problem_kind=JobFileError.REFUSED)
    path = paths.stdout if stream == "stdout" else paths.stderr
    one_file = paths.stderr == paths.stdout
    if one_file and stream == "stderr":
        return StreamTail(stream, path, one_file=True)
    try:
        tail = backend.read_job_file(job.user, path, max_bytes)
    except JobFileError as error:
        return StreamTail(stream, path, problem=error.message, problem_kind=error.kind)
    except BackendError as error:
        message = f"Could not read {path}: {error.message}"
        return StreamTail(stream, path, problem=message, problem_kind=JobFileError.FAILED)
    return StreamTail(stream, path, tail.text, truncated=tail.truncated, one_file=one_file)


def output_paths(job, backend) -> tuple[JobOutputPaths | None, str]:
    """Slurm's StdOut/StdErr while it still knows the job; afterwards what Medbay
    submitted (`--chdir` and `--output`), since Slurm forgets a finished job."""
    try:
        return backend.job_output_paths(job.slurm_id), ""
    except BackendError as error:
        paths = paths_from_params(job)
        if paths is not None:
            return paths, ""
        return None, (
            f"Slurm no longer reports where job {job.slurm_id} wrote its output "
            f"({error.message}), and it was not submitted through Medbay."
        )


def paths_from_params(job) -> JobOutputPaths | None:
    params = job.params or {}
    workdir = params.get("workdir") or ""
    if not workdir.startswith("/"):
        return None
    pattern = params.get("output") or "%x-%j.out"
    fields = {"job_id": job.slurm_id, "user": job.user, "name": job.name, "workdir": workdir}
    if job.node_names:
        fields["node"] = job.node_names[0]
    path = posixpath.normpath(expand_output_pattern(pattern, **fields))
    return JobOutputPaths(stdout=path, stderr=path, user=job.user)
