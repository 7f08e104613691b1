"""ClusterBackend over slurmrestd (`MEDBAY_SLURM_API=rest`), with auth/jwt.

Reads (nodes, jobs, one job, ping) go through slurmrestd with the newest data_parser
version the server offers (`/openapi/v3`); their JSON is the same document
`scontrol show ... --json` prints for that version, so the same parsers read it.
Partitions stay on `scontrol -o show partition` (the JSON of 24.11 and 26.05 does not
say which partition is the default), and node and job actions stay on the CLI
(inherited from SlurmBackend): deploy/minicluster/README.md has the version table.

Job submission goes through slurmrestd as the researcher: with the site's JWT key
the backend mints a token for that one Unix user, valid for seconds, and submits
with it; Slurm runs the job as that user. No runuser, no sudo, and no token for root
or a system account is ever made: those are refused before anything reaches Slurm.
Plain Python, like SlurmBackend: no Django import.
"""

from __future__ import annotations

import os
import pwd
import re
import time
from collections.abc import Mapping
from functools import cached_property
from pathlib import Path
from typing import Any

import jwt
import msgspec
import requests

from clusters.backends.base import BackendError, JobInfo, JobSubmission, NodeInfo
from clusters.backends.slurm import (
    SlurmBackend,
    checked_env,
    checked_user,
    current_user,
    decode_json,
    home_of,
    raise_if_no_controller_answered,
    raise_json_errors,
)
from clusters.backends.slurm_parsers import decode_jobs_json, parse_jobs_json, parse_nodes_json

DEFAULT_TIMEOUT_S = 10.0
# A submission token only has to outlive one request.
TOKEN_LIFETIME_S = 30
DATA_PARSER_PATH = re.compile(r"^/slurm/(v0\.0\.(\d+))/jobs/?$")
# Statuses that retrying cannot fix: a bad request, a refused token, an unknown id.
PERMANENT_STATUSES = {400, 401, 403, 404, 405, 422, 511}
DEFAULT_MIN_UID = 1000


class JwtAuth:
    """Tokens for slurmrestd: minted per user from the site's HS256 key (auth/jwt's
    `jwt_key`), or read from a token file made for one user (`scontrol token`)."""

    def __init__(
        self,
        *,
        key_path: str | None = None,
        token_file: str | None = None,
        token_user: str | None = None,
        lifetime_s: int = TOKEN_LIFETIME_S,
    ) -> None:
        if not key_path and not token_file:
            raise ValueError("slurmrestd needs a JWT key or a token file")
        self.key_path = key_path
        self.token_file = token_file
        self.token_user = token_user or current_user()
        self.lifetime_s = lifetime_s

    @property
    def can_mint(self) -> bool:
        return bool(self.key_path)

    def token_for(self, user: str) -> str:
        # A token for root would let whoever reads it do anything on the cluster.
        if user == "root":
            raise BackendError(
                "Medbay never makes or uses a slurmrestd token for root: set "
                "MEDBAY_SLURM_JWT_USER to the account it reads Slurm as",
                permanent=True,
            )
        if self.key_path:
            try:
                key = Path(self.key_path).read_bytes()
            except OSError as error:
                raise BackendError(
                    f"cannot read the JWT key {self.key_path}: {error.strerror}", permanent=True
                ) from error
            now = int(time.time())
            claims = {"sun": user, "iat": now, "exp": now + self.lifetime_s}
            return jwt.encode(claims, key, algorithm="HS256")
        if user != self.token_user:
            raise BackendError(
                f"the token file is for {self.token_user}; a token for {user} needs the JWT key",
                permanent=True,
            )
        try:
            return Path(self.token_file).read_text().strip().removeprefix("SLURM_JWT=")
        except OSError as error:
            raise BackendError(
                f"cannot read the token file {self.token_file}: {error.strerror}", permanent=True
            ) from error


class SlurmRestBackend(SlurmBackend):
    """Reads Slurm through slurmrestd and submits as the researcher; acts via the CLI."""

    def __init__(
        self,
        url: str,
        auth: JwtAuth,
        *,
        slurm_conf: str | None = None,
        rest_timeout: float = DEFAULT_TIMEOUT_S,
        session: requests.Session | None = None,
        min_uid: int = DEFAULT_MIN_UID,
        **cli_options: Any,
    ) -> None:
        super().__init__(slurm_conf, **cli_options)
        self.url = url.rstrip("/")
        self.auth = auth
        self.rest_timeout = rest_timeout
        self.session = session or requests.Session()
        self.min_uid = min_uid
        # Reads are made as the portal's own account, like the CLI's.
        self.reader = auth.token_user

    @classmethod
    def from_env(cls, slurm_conf: str | None = None, **options: Any) -> SlurmRestBackend:
        """From MEDBAY_SLURMRESTD_URL, MEDBAY_SLURM_JWT_KEY or MEDBAY_SLURM_JWT_TOKEN_FILE,
        and MEDBAY_SLURM_JWT_USER: the account reads are made as (the token file's user;
        by default the portal's own account, which must not be root)."""
        url = os.environ.get("MEDBAY_SLURMRESTD_URL", "")
        if not url:
            raise BackendError("MEDBAY_SLURM_API=rest needs MEDBAY_SLURMRESTD_URL", permanent=True)
        auth = JwtAuth(
            key_path=os.environ.get("MEDBAY_SLURM_JWT_KEY") or None,
            token_file=os.environ.get("MEDBAY_SLURM_JWT_TOKEN_FILE") or None,
            token_user=os.environ.get("MEDBAY_SLURM_JWT_USER") or None,
        )
        return cls(url, auth, slurm_conf=slurm_conf, **options)

    # ------------------------------------------------------------ HTTP

    def request(
        self, method: str, path: str, *, user: str | None = None, body: Any = None
    ) -> bytes:
        """The body of a successful request; BackendError with slurmrestd's own message."""
        user = user or self.reader
        headers = {"X-SLURM-USER-NAME": user, "X-SLURM-USER-TOKEN": self.auth.token_for(user)}
        try:
            response = self.session.request(
                method, self.url + path, headers=headers, json=body, timeout=self.rest_timeout
            )
        except requests.Timeout as error:
            raise BackendError(
                f"slurmrestd timed out after {self.rest_timeout:g}s", permanent=False
            ) from error
        except requests.RequestException as error:
            raise BackendError(
                f"slurmrestd unreachable at {self.url}: {error}", permanent=False
            ) from error
        if response.status_code >= 400:
            raise rest_error(response)
        return response.content

    def get_json(self, path: str) -> dict[str, Any]:
        payload = decode_rest_json(self.request("GET", path))
        raise_json_errors(["slurmrestd"], payload)
        return payload

    @cached_property
    def api_version(self) -> str:
        """The newest data_parser version (`v0.0.45`) the server offers, asked once."""
        spec = decode_rest_json(self.request("GET", "/openapi/v3"))
        return newest_data_parser(spec)

    def api(self, path: str) -> str:
        return f"/slurm/{self.api_version}/{path}"

    # ------------------------------------------------------------ reads

    def controller_up(self) -> bool:
        try:
            payload = self.get_json(self.api("ping"))
        except BackendError:
            return False
        # `responding` is in every version; v0.0.45 dropped `pinged` ("UP"/"DOWN").
        pings = payload.get("pings") or []
        return any(ping.get("responding") is True for ping in pings if ping.get("primary", True))

    def nodes(self) -> list[NodeInfo]:
        return parse_nodes_json(self.get_json(self.api("nodes")))

    def jobs(self) -> list[JobInfo]:
        payload = decode_jobs_json(self.request("GET", self.api("jobs")))
        raise_json_errors(["slurmrestd"], payload)
        raise_if_no_controller_answered(["slurmrestd", "GET", "jobs"], payload)
        return self.job_list_parser.parse(payload)

    def job(self, job_id: int) -> JobInfo:
        payload = self.get_json(self.api(f"job/{int(job_id)}"))
        jobs = [job for job in parse_jobs_json(payload) if job.job_id == job_id]
        if not jobs:
            raise BackendError(f"Invalid job id specified for job {job_id}", permanent=True)
        return jobs[0]

    # ------------------------------------------------------------ submission

    def submit_job(self, submission: JobSubmission) -> int:
        """Submits as `submission.user` with a token minted for that user alone."""
        if not submission.script.strip():
            raise BackendError("the job script is empty", permanent=True)
        user = checked_user(submission.user)
        self.refuse_system_account(user)
        if not self.auth.can_mint:
            raise BackendError(
                "submitting as a researcher through slurmrestd needs the JWT key "
                "(MEDBAY_SLURM_JWT_KEY); a token file only speaks for its own user",
                permanent=True,
            )
        env_extra = checked_env(submission.extra_env)
        home = home_of(user)
        environment = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": home, "USER": user}
        environment.update(env_extra)
        job = {
            "script": submission.script,
            "current_working_directory": submission.workdir or home,
            "environment": [f"{key}={value}" for key, value in environment.items()],
        }
        payload = decode_rest_json(
            self.request("POST", self.api("job/submit"), user=user, body={"job": job})
        )
        raise_json_errors(["slurmrestd"], payload)
        job_id = payload.get("job_id")
        if not isinstance(job_id, int) or job_id <= 0:
            raise BackendError(f"slurmrestd returned no job id: {payload!r:.200}", permanent=True)
        return job_id

    def refuse_system_account(self, user: str) -> None:
        """Never a token for root or a system account, whatever the caller checked."""
        if user == "root":
            raise BackendError("Medbay never submits jobs as 'root'", permanent=True)
        try:
            uid = pwd.getpwnam(user).pw_uid
        except KeyError as error:
            raise BackendError(f"no Unix account {user!r} on this host", permanent=True) from error
        if uid < self.min_uid:
            raise BackendError(
                f"{user!r} is a system account (uid {uid}, below {self.min_uid}); "
                "Medbay only submits as a researcher's own Unix account",
                permanent=True,
            )


def decode_rest_json(body: bytes) -> dict[str, Any]:
    try:
        payload = decode_json(body)
    except msgspec.MsgspecError as error:
        raise BackendError(f"slurmrestd sent invalid JSON: {error}", permanent=True) from error
    if not isinstance(payload, dict):
        raise BackendError("slurmrestd sent JSON that is not an object", permanent=True)
    return payload


def newest_data_parser(spec: Mapping[str, Any]) -> str:
    """The newest `v0.0.N` with a jobs endpoint among the spec's paths."""
    found = [
        (int(match.group(2)), match.group(1))
        for path in spec.get("paths") or {}
        if (match := DATA_PARSER_PATH.match(path))
    ]
    if not found:
        raise BackendError("slurmrestd offers no /slurm/v0.0.N/jobs endpoint", permanent=True)
    return max(found)[1]


def rest_error(response: requests.Response) -> BackendError:
    """slurmrestd's own words: the `errors` of its JSON body, else the body's text."""
    permanent = response.status_code in PERMANENT_STATUSES
    try:
        payload = decode_json(response.content)
    except msgspec.MsgspecError:
        payload = None
    errors = payload.get("errors") if isinstance(payload, dict) else None
    if errors:
        details = [
            str(e.get("error") or e.get("description") or e) if isinstance(e, dict) else str(e)
            for e in errors
        ]
        message = "; ".join(dict.fromkeys(details))
    else:
        message = response.text.strip()[:200] or response.reason
    return BackendError(f"slurmrestd {response.status_code}: {message}", permanent=permanent)
