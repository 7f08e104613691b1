"""The slurmrestd transport without a cluster: tokens, version choice, errors, refusals."""

from __future__ import annotations

import json
import os
import pwd

import jwt
import pytest
import requests

from clusters.backends.base import BackendError, JobSubmission
from clusters.backends.slurm import SlurmBackend
from clusters.backends.slurm_rest import JwtAuth, SlurmRestBackend, newest_data_parser

KEY = b"k" * 32


class RecordingSession(requests.Session):
    """Answers every request with one canned response and remembers what was asked."""

    def __init__(self, status: int = 200, body: object = None) -> None:
        super().__init__()
        self.status, self.body, self.sent = status, body, []

    def request(self, method, url, **kwargs):
        self.sent.append((method, url, kwargs))
        response = requests.Response()
        response.status_code = self.status
        response._content = json.dumps(self.body).encode() if self.body is not None else b""
        return response


def backend(tmp_path, session, **options) -> SlurmRestBackend:
    key = tmp_path / "jwt.key"
    key.write_bytes(KEY)
    auth = JwtAuth(key_path=str(key), token_user="medbay")
    rest = SlurmRestBackend("http://rest.test", auth, session=session, **options)
    rest.api_version = "v0.0.45"  # as if /openapi/v3 had been asked
    return rest


def test_the_newest_data_parser_with_a_jobs_endpoint_is_chosen():
    paths = {
        "/slurm/v0.0.42/jobs": {},
        "/slurm/v0.0.45/jobs/": {},
        "/slurm/v0.0.44/jobs": {},
        "/slurm/v0.0.46/diag": {},  # no jobs endpoint in that version: not usable
        "/slurmdb/v0.0.47/jobs": {},
    }
    assert newest_data_parser({"paths": paths}) == "v0.0.45"
    with pytest.raises(BackendError, match="no /slurm/v0.0.N/jobs"):
        newest_data_parser({"paths": {"/openapi/v3": {}}})


def test_a_minted_token_names_only_its_user_and_expires_within_a_minute(tmp_path):
    key = tmp_path / "jwt.key"
    key.write_bytes(KEY)
    token = JwtAuth(key_path=str(key)).token_for("alice")
    claims = jwt.decode(token, KEY, algorithms=["HS256"])
    assert claims["sun"] == "alice"
    assert 0 < claims["exp"] - claims["iat"] <= 60


def test_no_token_is_minted_or_read_for_root(tmp_path):
    key = tmp_path / "jwt.key"
    key.write_bytes(KEY)
    token_file = tmp_path / "token"
    token_file.write_text("abc.def.ghi")
    for auth in (
        JwtAuth(key_path=str(key)),
        JwtAuth(token_file=str(token_file), token_user="root"),
    ):
        with pytest.raises(BackendError, match="never makes or uses a slurmrestd token for root"):
            auth.token_for("root")


def test_a_token_file_speaks_only_for_its_own_user(tmp_path):
    token_file = tmp_path / "token"
    token_file.write_text("SLURM_JWT=abc.def.ghi\n")
    auth = JwtAuth(token_file=str(token_file), token_user="medbay")
    assert auth.token_for("medbay") == "abc.def.ghi"
    with pytest.raises(BackendError, match="needs the JWT key") as raised:
        auth.token_for("alice")
    assert raised.value.permanent


@pytest.mark.parametrize("user", ["root", "daemon"])
def test_root_and_system_accounts_are_refused_before_anything_reaches_slurm(tmp_path, user):
    session = RecordingSession(body={"job_id": 1})
    with pytest.raises(BackendError) as raised:
        backend(tmp_path, session).submit_job(JobSubmission(script="#!/bin/sh\n", user=user))
    assert raised.value.permanent
    assert session.sent == []


def test_a_submission_carries_a_token_for_the_researcher_only(tmp_path, monkeypatch):
    alice = pwd.struct_passwd(("alice", "x", 1001, 1001, "", "/home/alice", "/bin/sh"))
    monkeypatch.setattr(pwd, "getpwnam", lambda name: alice)
    session = RecordingSession(body={"job_id": 42, "errors": []})
    rest = backend(tmp_path, session)
    job_id = rest.submit_job(
        JobSubmission(
            script="#!/bin/sh\ntrue\n", user="alice", workdir="/tmp", extra_env={"A": "1"}
        )
    )
    assert job_id == 42
    ((method, url, sent),) = session.sent
    assert (method, url) == ("POST", "http://rest.test/slurm/v0.0.45/job/submit")
    assert sent["headers"]["X-SLURM-USER-NAME"] == "alice"
    claims = jwt.decode(sent["headers"]["X-SLURM-USER-TOKEN"], KEY, algorithms=["HS256"])
    assert claims["sun"] == "alice"
    job = sent["json"]["job"]
    assert job["current_working_directory"] == "/tmp"
    assert "A=1" in job["environment"]


def test_slurmrestd_errors_keep_their_words_and_their_kind(tmp_path):
    refused = {"errors": [{"error": "Protocol authentication error", "error_number": 1007}]}
    with pytest.raises(BackendError) as raised:
        backend(tmp_path, RecordingSession(511, refused)).nodes()
    assert raised.value.message == "slurmrestd 511: Protocol authentication error"
    assert raised.value.permanent
    unknown = {"errors": [{"error": "Invalid job id specified", "error_number": 2017}]}
    with pytest.raises(BackendError, match="Invalid job id specified") as raised:
        backend(tmp_path, RecordingSession(404, unknown)).job(99)
    assert raised.value.permanent
    with pytest.raises(BackendError) as raised:
        backend(tmp_path, RecordingSession(503, {"errors": ["busy"]})).nodes()
    assert not raised.value.permanent


def test_an_unreachable_slurmrestd_is_a_transient_error(tmp_path):
    class Refusing(requests.Session):
        def request(self, *args, **kwargs):
            raise requests.ConnectionError("connection refused")

    with pytest.raises(BackendError, match="slurmrestd unreachable") as raised:
        backend(tmp_path, Refusing()).jobs()
    assert not raised.value.permanent


def test_an_empty_job_list_without_an_update_time_is_an_outage(tmp_path):
    down = {"jobs": [], "errors": [], "last_update": {"set": True, "number": 0}}
    with pytest.raises(BackendError, match="Unable to contact slurm controller"):
        backend(tmp_path, RecordingSession(200, down)).jobs()


def test_rest_needs_a_url(monkeypatch):
    monkeypatch.delenv("MEDBAY_SLURMRESTD_URL", raising=False)
    with pytest.raises(BackendError, match="MEDBAY_SLURMRESTD_URL"):
        SlurmRestBackend.from_env()
    assert "MEDBAY_SLURMRESTD_URL" not in os.environ


def test_medbay_slurm_api_rest_gives_the_portal_the_slurmrestd_backend(
    settings, monkeypatch, tmp_path
):
    from clusters.backends import registry

    key = tmp_path / "jwt.key"
    key.write_bytes(KEY)
    monkeypatch.setenv("MEDBAY_SLURMRESTD_URL", "http://rest.test:6820/")
    monkeypatch.setenv("MEDBAY_SLURM_JWT_KEY", str(key))
    monkeypatch.setenv("MEDBAY_SLURM_JWT_USER", "medbay")
    settings.MEDBAY_BACKEND, settings.MEDBAY_MIN_UID = "slurm", 2000
    try:
        for api, expected in (("rest", SlurmRestBackend), ("cli", SlurmBackend)):
            settings.MEDBAY_SLURM_API = api
            registry.use(None)
            assert type(registry.get_backend()) is expected
        settings.MEDBAY_SLURM_API = "rest"
        registry.use(None)
        built = registry.get_backend()
        assert (built.url, built.reader, built.min_uid) == ("http://rest.test:6820", "medbay", 2000)
    finally:
        registry.use(None)
