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


def read_response() -> requests.Response:
    """A Response as requests leaves one it has read (its `_content` is set next)."""
    response = requests.Response()
    response._content_consumed = True
    return response


class RecordingSession(requests.Session):
    """Answers every request with one canned response and remembers what was asked."""

    def __init__(self, status: int = 200, body: object = None) -> None:
        super().__init__()
        self.status, self.body, self.sent = status, body, []

    def request(self, method, url, **kwargs):
        self.sent.append((method, url, kwargs))
        response = read_response()
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


# The endpoints each version's newest data_parser has for actions (from /openapi/v3).
SPEC_26_05 = {
    "/slurm/v0.0.45/node/{node_name}": {"get": {}, "post": {}, "delete": {}},
    "/slurm/v0.0.45/job/{job_id}": {"get": {}, "post": {}, "delete": {}},
    "/slurm/v0.0.45/job/{job_id}/requeue": {"get": {}},
}
SPEC_24_11 = {
    "/slurm/v0.0.42/node/{node_name}": {"get": {}, "post": {}, "delete": {}},
    "/slurm/v0.0.42/job/{job_id}": {"get": {}, "post": {}, "delete": {}},
}


def acting_backend(tmp_path, session, spec=SPEC_26_05, version="v0.0.45", **options):
    rest = backend(tmp_path, session, **options)
    rest.api_version, rest.openapi_paths = version, spec
    rest.cli_calls = []
    rest.run = lambda args, input_text=None: rest.cli_calls.append(list(args)) or ""
    return rest


def sent_as(sent) -> str:
    claims = jwt.decode(sent["headers"]["X-SLURM-USER-TOKEN"], KEY, algorithms=["HS256"])
    assert claims["sun"] == sent["headers"]["X-SLURM-USER-NAME"]
    return claims["sun"]


def test_node_and_job_actions_go_through_slurmrestd_as_the_operator(tmp_path):
    session = RecordingSession(body={"errors": [], "results": []})
    rest = acting_backend(tmp_path, session, operator="slurm-ops")
    rest.drain_node("gpu-02", "medbay: xid 79")
    rest.fail_node("gpu-03", "medbay: off the bus")
    rest.resume_node("gpu-02")
    rest.signal_job(7, "USR1")
    rest.signal_job(7, "TERM", batch_only=False)
    rest.hold_job(7)
    rest.release_job(7)
    rest.requeue_job(7, hold=True)
    base = "http://rest.test/slurm/v0.0.45"
    asked = [(m, u, s.get("json"), s.get("params")) for m, u, s in session.sent]
    assert asked == [
        ("POST", f"{base}/node/gpu-02", {"state": ["DRAIN"], "reason": "medbay: xid 79"}, None),
        ("POST", f"{base}/node/gpu-03", {"state": ["FAIL"], "reason": "medbay: off the bus"}, None),
        ("POST", f"{base}/node/gpu-02", {"state": ["RESUME"]}, None),
        ("DELETE", f"{base}/job/7", None, {"signal": "USR1", "flags": "BATCH_JOB"}),
        ("DELETE", f"{base}/job/7", None, {"signal": "TERM", "flags": "FULL_JOB"}),
        ("POST", f"{base}/job/7", {"hold": True}, None),
        ("POST", f"{base}/job/7", {"hold": False}, None),
        ("GET", f"{base}/job/7/requeue", None, {"Hold": ""}),
    ]  # fmt: skip
    assert {sent_as(sent) for _, _, sent in session.sent} == {"slurm-ops"}
    assert rest.cli_calls == []


def test_requeue_stays_on_the_cli_where_the_version_has_no_endpoint(tmp_path):
    session = RecordingSession(body={"errors": []})
    rest = acting_backend(tmp_path, session, SPEC_24_11, "v0.0.42", operator="slurm-ops")
    rest.requeue_job(7)
    rest.hold_job(7)
    assert rest.cli_calls == [["scontrol", "requeue", "7"]]
    assert [(m, u) for m, u, _ in session.sent] == [
        ("POST", "http://rest.test/slurm/v0.0.42/job/7")
    ]


def test_without_an_operator_every_action_stays_on_the_cli(tmp_path):
    session = RecordingSession(body={"errors": []})
    rest = acting_backend(tmp_path, session)
    rest.drain_node("gpu-02", "medbay: xid 79")
    rest.signal_job(7)
    rest.release_job(7)
    assert session.sent == []
    assert [call[:2] for call in rest.cli_calls] == [
        ["scontrol", "update"],
        ["scancel", "--signal=USR1"],
        ["scontrol", "release"],
    ]


def test_a_root_operator_is_refused_before_anything_reaches_slurm(tmp_path):
    session = RecordingSession(body={"errors": []})
    rest = acting_backend(tmp_path, session, operator="root")
    with pytest.raises(BackendError, match="never makes or uses a slurmrestd token for root"):
        rest.drain_node("gpu-02", "medbay: xid 79")
    assert session.sent == [] and rest.cli_calls == []


def test_an_action_refused_by_slurm_keeps_slurmrestds_words(tmp_path):
    denied = {"errors": [{"error": "Invalid user id", "error_number": 2010}]}
    rest = acting_backend(tmp_path, RecordingSession(422, denied), operator="alice")
    with pytest.raises(BackendError, match="slurmrestd 422: Invalid user id") as raised:
        rest.drain_node("gpu-02", "medbay: xid 79")
    assert raised.value.permanent
    # 24.11 says the same with a 500: still not worth retrying.
    rest = acting_backend(tmp_path, RecordingSession(500, denied), operator="alice")
    with pytest.raises(BackendError, match="slurmrestd 500: Invalid user id") as raised:
        rest.drain_node("gpu-02", "medbay: xid 79")
    assert raised.value.permanent
    per_job = {
        "errors": [],
        "results": [{"job_id": 7, "error_code": 2017, "error": "Invalid job id"}],
    }
    rest = acting_backend(tmp_path, RecordingSession(200, per_job), operator="slurm-ops")
    with pytest.raises(BackendError, match="hold job 7: Invalid job id"):
        rest.hold_job(7)
    with pytest.raises(BackendError, match="invalid signal name"):
        rest.signal_job(7, "USR1; reboot")


def test_resuming_a_node_that_needs_no_resume_is_not_an_error(tmp_path, monkeypatch):
    refusal = {"errors": [{"error": "Invalid node state transition", "error_number": 2012}]}
    rest = acting_backend(tmp_path, RecordingSession(400, refusal), operator="slurm-ops")
    monkeypatch.setattr(rest, "node_needs_resume", lambda node: False)
    rest.resume_node("gpu-02")
    monkeypatch.setattr(rest, "node_needs_resume", lambda node: True)
    with pytest.raises(BackendError, match="Invalid node state transition"):
        rest.resume_node("gpu-02")


class ScriptedSession(requests.Session):
    """Answers with the given bodies in turn and remembers each request's params."""

    def __init__(self, *bodies) -> None:
        super().__init__()
        self.bodies, self.params = list(bodies), []

    def request(self, method, url, **kwargs):
        self.params.append(kwargs.get("params"))
        response = read_response()
        response.status_code = 200
        response._content = json.dumps(self.bodies.pop(0)).encode()
        return response


def stamp(number):
    return {"set": True, "infinite": False, "number": number}


def test_polls_ask_only_for_changes_since_the_last_answer_and_reuse_it_when_none(tmp_path):
    one_job = {"job_id": 5, "job_state": ["RUNNING"], "user_name": "alice", "partition": "train"}
    nothing = {"description": "No job changes since update_time[1799]=...", "source": "x"}
    session = ScriptedSession(
        {"jobs": [one_job], "last_update": stamp(1800), "errors": []},
        {"jobs": [], "errors": [], "warnings": [nothing]},
        {"jobs": [], "last_update": stamp(1900), "errors": []},  # the job has gone
    )
    rest = backend(tmp_path, session)
    first = rest.jobs()
    assert [job.job_id for job in first] == [5]
    assert rest.jobs() == first
    assert rest.jobs() == []
    # A second before last_update: a change in that same second still counts.
    assert session.params == [None, {"update_time": "1799"}, {"update_time": "1799"}]


def test_an_empty_answer_without_the_no_change_warning_is_not_taken_for_no_change(tmp_path):
    session = ScriptedSession(
        {"jobs": [], "last_update": stamp(1800), "errors": []},
        {"jobs": [], "errors": [], "last_update": stamp(0)},  # a stopped controller
    )
    rest = backend(tmp_path, session)
    assert rest.jobs() == []
    with pytest.raises(BackendError, match="Unable to contact slurm controller"):
        rest.jobs()
    assert session.params[1] == {"update_time": "1799"}


def test_a_304_to_a_changes_only_poll_reuses_the_previous_nodes(tmp_path):
    class NotModified(requests.Session):
        def __init__(self) -> None:
            super().__init__()
            self.params = []

        def request(self, method, url, **kwargs):
            self.params.append(kwargs.get("params"))
            response = read_response()
            if len(self.params) == 1:
                response.status_code = 200
                body = {"nodes": [{"name": "gpu-01", "state": ["IDLE"]}], "errors": []}
                response._content = json.dumps({**body, "last_update": stamp(1800)}).encode()
            else:
                response.status_code, response._content = 304, b""
            return response

    session = NotModified()
    rest = backend(tmp_path, session)
    first = rest.nodes()
    assert [node.name for node in first] == ["gpu-01"]
    assert rest.nodes() == first
    assert session.params == [None, {"update_time": "1799"}]


def test_a_server_that_fails_changes_only_node_polls_gets_full_ones_from_then_on(tmp_path):
    nodes = {"nodes": [{"name": "gpu-01", "state": ["IDLE"]}], "errors": []}

    class PartitionBug(requests.Session):
        """24.11: nodes changed, partitions not -> 500 "Unspecified error"."""

        def __init__(self) -> None:
            super().__init__()
            self.params = []

        def request(self, method, url, **kwargs):
            self.params.append(kwargs.get("params"))
            response = read_response()
            if kwargs.get("params"):
                response.status_code = 500
                response._content = json.dumps(
                    {"errors": [{"error": "Unspecified error"}]}
                ).encode()
            else:
                response.status_code = 200
                response._content = json.dumps({**nodes, "last_update": stamp(1800)}).encode()
            return response

    session = PartitionBug()
    rest = backend(tmp_path, session)
    for _ in range(3):
        assert [node.name for node in rest.nodes()] == ["gpu-01"]
    assert session.params == [None, {"update_time": "1799"}, None, None]
