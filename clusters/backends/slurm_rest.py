"""ClusterBackend over slurmrestd (`MEDBAY_SLURM_API=rest`), with auth/jwt.

Reads (nodes, jobs, one job, ping) go through slurmrestd with the newest data_parser
version the server offers (`/openapi/v3`); their JSON is the same document
`scontrol show ... --json` prints for that version, so the same parsers read it.
Partitions stay on `scontrol -o show partition` (the JSON of 24.11 and 26.05 does not
say which partition is the default). The accounting import's reads (finished jobs) go
through `GET /slurmdb/vX/jobs` where the server offers it (slurmrestd runs the
openapi/slurmdbd plugin), parsed as `sacct --json`, and through sacct otherwise.

Node and job actions (drain/fail/down/resume, signal, hold/release, and requeue where
the version has an endpoint for it: v0.0.45 does, v0.0.42 does not) go through
slurmrestd when an operator account is configured (`MEDBAY_SLURM_JWT_OPERATOR`) and
the server's spec offers the endpoint; otherwise they stay on the CLI (inherited from
SlurmBackend). slurmctld decides who may act: node updates need a Slurm super user
(the SlurmUser, or AdminLevel=Administrator in slurmdbd), actions on other users'
jobs an operator. The operator is never root. deploy/minicluster/README.md has the
version table.

The sync's polls of nodes and jobs ask only for what changed (`update_time`, the
previous answer's `last_update` less a second): when nothing changed slurmctld sends
nothing and slurmrestd says so, with an empty 304 (26.05's nodes) or an empty list and
a warning ("No job changes since ..."), and the previous list is used again; after
any change it sends the whole list.

Job submission goes through slurmrestd as the researcher: with the site's JWT key
the backend mints a token for that one Unix user, valid for seconds, and submits
with it; Slurm runs the job as that user. slurmrestd ignores the script's #SBATCH
lines, so their options are sent as the job description's fields (sbatch_options.py).
No runuser, no sudo, and no token for root or a system account is ever made: those
are refused before anything reaches Slurm.
Plain Python, like SlurmBackend: no Django import.
"""

from __future__ import annotations

import os
import pwd
import re
import time
from collections.abc import Mapping
from datetime import datetime
from functools import cached_property
from pathlib import Path
from typing import Any

import jwt
import msgspec
import requests

from clusters.backends import slurm_accounting
from clusters.backends.base import (
    AccountingRecord,
    BackendError,
    JobInfo,
    JobSubmission,
    NodeInfo,
)
from clusters.backends.sbatch_options import job_fields
from clusters.backends.slurm import (
    RESUME_REFUSALS,
    SAFE_SIGNAL,
    SlurmBackend,
    checked_env,
    checked_node,
    checked_reason,
    checked_user,
    current_user,
    decode_json,
    home_of,
    raise_if_no_controller_answered,
    raise_json_errors,
)
from clusters.backends.slurm_parsers import decode_jobs_json, parse_jobs_json, parse_nodes_json
from clusters.backends.slurm_parsers.values import plain_number

DEFAULT_TIMEOUT_S = 10.0
# A submission token only has to outlive one request.
TOKEN_LIFETIME_S = 30
DATA_PARSER_PATH = re.compile(r"^/slurm/(v0\.0\.(\d+))/jobs/?$")
# Statuses that retrying cannot fix: a bad request, a refused token, an unknown id.
PERMANENT_STATUSES = {400, 401, 403, 404, 405, 422, 511}
# Slurm refusals retrying cannot fix, whatever the HTTP status: 24.11 answers a drain by
# a user who may not drain with 500 "Invalid user id" (26.05: 422). Protocol
# authentication error, invalid user id, invalid job id.
PERMANENT_SLURM_ERRORS = {1007, 2010, 2017}
DEFAULT_MIN_UID = 1000
# slurmrestd's warning when slurmctld answered SLURM_NO_CHANGE_IN_DATA to update_time.
NOT_MODIFIED = 304
NOTHING_CHANGED = re.compile(r"^No (?:job|node)s? changes since")
# Actions through slurmrestd: (path under /slurm/vX/, method) in the server's spec.
REST_ACTIONS = {
    "node_update": ("node/{node_name}", "post"),
    "job_signal": ("job/{job_id}", "delete"),
    "job_update": ("job/{job_id}", "post"),
    "job_requeue": ("job/{job_id}/requeue", "get"),  # v0.0.45 (26.05) on; a GET, as specified
}


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
        operator: str | None = None,
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
        # Node and job actions are made as this account (a Slurm operator/admin, never
        # root); without one they stay on the CLI.
        self.operator = operator
        # "nodes"/"jobs" -> (the server's last_update, the list it described).
        self.last_answer: dict[str, tuple[int, list]] = {}
        self.full_node_polls = False

    @classmethod
    def from_env(cls, slurm_conf: str | None = None, **options: Any) -> SlurmRestBackend:
        """From MEDBAY_SLURMRESTD_URL, MEDBAY_SLURM_JWT_KEY or MEDBAY_SLURM_JWT_TOKEN_FILE,
        and MEDBAY_SLURM_JWT_USER: the account reads are made as (the token file's user;
        by default the portal's own account, which must not be root);
        MEDBAY_SLURM_JWT_OPERATOR: the account node and job actions are made as."""
        url = os.environ.get("MEDBAY_SLURMRESTD_URL", "")
        if not url:
            raise BackendError("MEDBAY_SLURM_API=rest needs MEDBAY_SLURMRESTD_URL", permanent=True)
        auth = JwtAuth(
            key_path=os.environ.get("MEDBAY_SLURM_JWT_KEY") or None,
            token_file=os.environ.get("MEDBAY_SLURM_JWT_TOKEN_FILE") or None,
            token_user=os.environ.get("MEDBAY_SLURM_JWT_USER") or None,
        )
        operator = os.environ.get("MEDBAY_SLURM_JWT_OPERATOR") or None
        if operator:
            options.setdefault("operator", operator)
        return cls(url, auth, slurm_conf=slurm_conf, **options)

    # ------------------------------------------------------------ HTTP

    def request(
        self,
        method: str,
        path: str,
        *,
        user: str | None = None,
        body: Any = None,
        params: Mapping[str, str] | None = None,
        timeout: float | None = None,
    ) -> bytes:
        """The body of a successful request; BackendError with slurmrestd's own message."""
        user = user or self.reader
        headers = {"X-SLURM-USER-NAME": user, "X-SLURM-USER-TOKEN": self.auth.token_for(user)}
        try:
            response = self.session.request(
                method,
                self.url + path,
                headers=headers,
                json=body,
                params=params,
                timeout=timeout or self.rest_timeout,
                stream=True,
            )
            with response:
                content = read_body(response)
        except requests.Timeout as error:
            raise BackendError(
                f"slurmrestd timed out after {timeout or self.rest_timeout:g}s", permanent=False
            ) from error
        except requests.RequestException as error:
            raise BackendError(
                f"slurmrestd unreachable at {self.url}: {error}", permanent=False
            ) from error
        if response.status_code >= 400:
            raise rest_error(response, content)
        if response.status_code == NOT_MODIFIED:
            # An update_time poll with nothing changed (26.05's nodes answer so).
            return b""
        return content

    def get_json(self, path: str, params: Mapping[str, str] | None = None) -> dict[str, Any]:
        payload = decode_rest_json(self.request("GET", path, params=params))
        raise_json_errors(["slurmrestd"], payload)
        return payload

    @cached_property
    def openapi_paths(self) -> dict[str, Any]:
        """The server's `/openapi/v3` paths, asked once."""
        return decode_rest_json(self.request("GET", "/openapi/v3")).get("paths") or {}

    @cached_property
    def api_version(self) -> str:
        """The newest data_parser version (`v0.0.45`) the server offers."""
        return newest_data_parser({"paths": self.openapi_paths})

    def acts_through_rest(self, action: str) -> bool:
        """Whether `action` (a REST_ACTIONS key) goes through slurmrestd: an operator
        is configured and the server's spec has the endpoint at api_version."""
        if not self.operator:
            return False
        path, method = REST_ACTIONS[action]
        entry = self.openapi_paths.get(self.api(path)) or {}
        return method in entry

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

    def since_last_answer(self, what: str) -> dict[str, str] | None:
        """`update_time` for the next poll: a second before the last answer's
        `last_update`, so a change within that same second is never missed."""
        last = self.last_answer.get(what)
        return {"update_time": str(last[0] - 1)} if last else None

    def unchanged(self, what: str, payload: Mapping[str, Any]) -> list | None:
        """The previous list again when slurmrestd says nothing changed since."""
        last = self.last_answer.get(what)
        if last is None or payload.get(what):
            return None
        for warning in payload.get("warnings") or []:
            text = warning.get("description", "") if isinstance(warning, dict) else warning
            if isinstance(text, str) and NOTHING_CHANGED.match(text):
                return list(last[1])
        return None

    def remember(self, what: str, payload: Mapping[str, Any], parsed: list) -> None:
        last_update = plain_number(payload.get("last_update"))
        if last_update:
            self.last_answer[what] = (last_update, parsed)
        else:
            self.last_answer.pop(what, None)

    def nodes(self) -> list[NodeInfo]:
        since = None if self.full_node_polls else self.since_last_answer("nodes")
        try:
            body = self.request("GET", self.api("nodes"), params=since)
        except BackendError:
            if since is None:
                raise
            # 24.11's slurmrestd (v0.0.42) asks for partitions with the same update_time
            # and answers 500 "Unspecified error" when nodes changed but partitions did
            # not (measured); from then on this backend polls nodes in full.
            self.full_node_polls = True
            body = self.request("GET", self.api("nodes"))
        if not body and "nodes" in self.last_answer:
            return list(self.last_answer["nodes"][1])
        payload = decode_rest_json(body)
        raise_json_errors(["slurmrestd"], payload)
        unchanged = self.unchanged("nodes", payload)
        if unchanged is not None:
            return unchanged
        nodes = parse_nodes_json(payload)
        self.remember("nodes", payload, nodes)
        return list(nodes)

    def jobs(self) -> list[JobInfo]:
        body = self.request("GET", self.api("jobs"), params=self.since_last_answer("jobs"))
        if not body and "jobs" in self.last_answer:
            return list(self.last_answer["jobs"][1])
        payload = decode_jobs_json(body)
        raise_json_errors(["slurmrestd"], payload)
        unchanged = self.unchanged("jobs", payload)
        if unchanged is not None:
            return unchanged
        raise_if_no_controller_answered(["slurmrestd", "GET", "jobs"], payload)
        jobs = self.job_list_parser.parse(payload)
        self.remember("jobs", payload, jobs)
        return list(jobs)

    def job(self, job_id: int) -> JobInfo:
        payload = self.get_json(self.api(f"job/{int(job_id)}"))
        jobs = [job for job in parse_jobs_json(payload) if job.job_id == job_id]
        if not jobs:
            raise BackendError(f"Invalid job id specified for job {job_id}", permanent=True)
        return jobs[0]

    def slurmdb_jobs_path(self) -> str | None:
        """`/slurmdb/vX/jobs` as the server's spec spells it (24.11: `jobs/`), or None
        when slurmrestd runs without openapi/slurmdbd (a cluster without accounting)."""
        for path in (f"/slurmdb/{self.api_version}/jobs", f"/slurmdb/{self.api_version}/jobs/"):
            if "get" in (self.openapi_paths.get(path) or {}):
                return path
        return None

    def finished_jobs(self, start: datetime, end: datetime) -> list[AccountingRecord]:
        """Attempts that ended in [start, end), from slurmdbd through slurmrestd: the
        same records, window and filter as sacct's (slurm_accounting.py)."""
        path = self.slurmdb_jobs_path()
        if path is None:
            return super().finished_jobs(start, end)
        start, end = slurm_accounting.checked_window(start, end)
        body = self.request(
            "GET",
            path,
            params=slurm_accounting.slurmdb_query(start, end),
            timeout=slurm_accounting.SACCT_TIMEOUT_S,
        )
        records = slurm_accounting.records_from_document(f"slurmrestd GET {path}", body)
        return slurm_accounting.finished_in(records, start, end)

    # ------------------------------------------------------------ actions

    def act(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        params: Mapping[str, str] | None = None,
        what: str,
    ) -> None:
        """One action as the operator; slurmrestd's errors, and per-job results with
        an error code, are BackendErrors in its own words."""
        payload = decode_rest_json(
            self.request(method, self.api(path), user=self.operator, body=body, params=params)
        )
        raise_json_errors(["slurmrestd", what], payload)
        for result in payload.get("results") or payload.get("status") or []:
            if isinstance(result, dict) and result.get("error_code"):
                message = result.get("error") or result.get("why") or result["error_code"]
                raise BackendError(f"slurmrestd {what}: {message}", permanent=True)

    def set_node_state(self, node: str, state: str, reason: str) -> None:
        if not self.acts_through_rest("node_update"):
            return super().set_node_state(node, state, reason)
        body = {"state": [state.upper()], "reason": checked_reason(reason)}
        self.act("POST", f"node/{checked_node(node)}", body=body, what=f"{state} {node}")

    def resume_node(self, node: str) -> None:
        if not self.acts_through_rest("node_update"):
            return super().resume_node(node)
        try:
            self.act("POST", f"node/{checked_node(node)}", body={"state": ["RESUME"]},
                     what=f"resume {node}")  # fmt: skip
        except BackendError as error:
            # As on the CLI: a node that needs no resume is already where the caller wants it.
            if not any(refusal in error.message for refusal in RESUME_REFUSALS):
                raise
            if self.node_needs_resume(node):
                raise

    def signal_job(self, job_id: int, signal: str = "USR1", *, batch_only: bool = True) -> None:
        if not self.acts_through_rest("job_signal"):
            return super().signal_job(job_id, signal, batch_only=batch_only)
        if not SAFE_SIGNAL.match(signal or ""):
            raise BackendError(f"invalid signal name {signal!r}", permanent=True)
        # BATCH_JOB is `scancel --batch` (the batch shell only); FULL_JOB is `--full`.
        params = {"signal": signal, "flags": "BATCH_JOB" if batch_only else "FULL_JOB"}
        self.act("DELETE", f"job/{int(job_id)}", params=params, what=f"signal job {job_id}")

    def hold_job(self, job_id: int) -> None:
        if not self.acts_through_rest("job_update"):
            return super().hold_job(job_id)
        self.act("POST", f"job/{int(job_id)}", body={"hold": True}, what=f"hold job {job_id}")

    def release_job(self, job_id: int) -> None:
        if not self.acts_through_rest("job_update"):
            return super().release_job(job_id)
        self.act("POST", f"job/{int(job_id)}", body={"hold": False}, what=f"release {job_id}")

    def requeue_job(self, job_id: int, *, hold: bool = False) -> None:
        # v0.0.42 (24.11) has no requeue endpoint: `scontrol requeue` there.
        if not self.acts_through_rest("job_requeue"):
            return super().requeue_job(job_id, hold=hold)
        params = {"Hold": ""} if hold else None
        self.act("GET", f"job/{int(job_id)}/requeue", params=params, what=f"requeue {job_id}")

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
            # slurmrestd does not read the script's #SBATCH lines: their options go as
            # fields. The folder is the caller's, as the CLI's `sbatch --chdir` has it.
            **job_fields(submission.script),
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


def read_body(response: requests.Response) -> bytes:
    """The whole body, read at once: `response.content` reads 10 KB at a time, and
    the 34 MB of a 5,000-job list took 3,400 reads and a copy to join them, about a
    tenth of a sync cycle (bench/sync.py --api rest). With no chunk size, a streamed
    body is one read into one buffer (and joining one piece copies nothing)."""
    return b"".join(response.iter_content(chunk_size=None))


def rest_error(response: requests.Response, content: bytes) -> BackendError:
    """slurmrestd's own words: the `errors` of its JSON body, else the body's text."""
    permanent = response.status_code in PERMANENT_STATUSES
    try:
        payload = decode_json(content)
    except msgspec.MsgspecError:
        payload = None
    errors = payload.get("errors") if isinstance(payload, dict) else None
    if errors and any(
        isinstance(e, dict) and e.get("error_number") in PERMANENT_SLURM_ERRORS for e in errors
    ):
        permanent = True
    if errors:
        details = [
            str(e.get("error") or e.get("description") or e) if isinstance(e, dict) else str(e)
            for e in errors
        ]
        message = "; ".join(dict.fromkeys(details))
    else:
        message = content.decode("utf-8", "replace").strip()[:200] or response.reason
    return BackendError(f"slurmrestd {response.status_code}: {message}", permanent=permanent)
