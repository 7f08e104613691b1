"""The accounting source through slurmrestd's `GET /slurmdb/vX/jobs`, on documents
recorded from the minicluster's 24.11 and 26.05 (tests/fixtures/slurm/V/rest/accounting:
alice's `sleep 6` with 2 GPUs in vision and bob's `exit 3`, which ended as alice's job
started; sacct and slurmrestd asked, as bob, for the same window, which starts 3 s into
alice's job and so after bob's ended)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
import requests

from clusters.backends.base import BackendError
from clusters.backends.slurm_accounting import finished_in
from clusters.backends.slurm_parsers import decode_accounting_json
from clusters.backends.slurm_rest import JwtAuth, SlurmRestBackend
from tests.clusters.test_slurm_backend import FakeSlurm

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "slurm"
# The newest data_parser of each version's slurmrestd.
VERSIONS = {"24.11": "v0.0.42", "26.05": "v0.0.45"}


def recorded(version: str, name: str) -> bytes:
    return (FIXTURES / version / "rest" / "accounting" / name).read_bytes()


def window(version: str) -> tuple[datetime, datetime]:
    start, end = recorded(version, "window.txt").split()[1:3]
    return (datetime.fromtimestamp(int(start), UTC), datetime.fromtimestamp(int(end), UTC))


def recorded_paths(version: str) -> dict[str, dict]:
    """The server's /openapi/v3 paths (jobs and slurmdb ones) with their methods."""
    methods = json.loads(recorded(version, "openapi_paths.json"))
    return {path: dict.fromkeys(names, {}) for path, names in methods.items()}


def slurmdb_path(version: str) -> str:
    # Both versions spell it with a trailing slash (`/slurmdb/v0.0.42/jobs/`).
    return f"/slurmdb/{VERSIONS[version]}/jobs/"


class Answering(requests.Session):
    """Answers every request with one recorded body and remembers what was asked."""

    def __init__(self, body: bytes, status: int = 200) -> None:
        super().__init__()
        self.body, self.status, self.sent = body, status, []

    def request(self, method, url, **kwargs):
        self.sent.append((method, url, kwargs))
        response = requests.Response()
        # As requests leaves a response it has read: the body is all in `_content`.
        response._content_consumed = True
        response.status_code, response._content = self.status, self.body
        return response


def rest_backend(tmp_path, version, session, paths=None, runner=None) -> SlurmRestBackend:
    key = tmp_path / "jwt.key"
    key.write_bytes(b"k" * 32)
    rest = SlurmRestBackend(
        "http://rest.test",
        JwtAuth(key_path=str(key), token_user="medbay"),
        session=session,
        runner=runner or FakeSlurm(),
    )
    # As if /openapi/v3 had been asked: the version's recorded paths.
    rest.openapi_paths = paths if paths is not None else recorded_paths(version)
    return rest


def recorded_versions():
    return [v for v in VERSIONS if (FIXTURES / v / "rest" / "accounting" / "window.txt").exists()]


@pytest.fixture(params=recorded_versions())
def version(request):
    return request.param


def test_finished_jobs_are_asked_of_slurmdb_for_sacct_s_window_every_attempt_and_whole_times(
    tmp_path, version
):
    session = Answering(recorded(version, f"slurmdb_{VERSIONS[version]}_jobs_window.json"))
    rest = rest_backend(tmp_path, version, session)
    start, end = window(version)
    rest.finished_jobs(start, end)
    ((method, url, sent),) = session.sent
    assert (method, url) == ("GET", "http://rest.test" + slurmdb_path(version))
    assert sent["params"] == {
        "start_time": str(int(start.timestamp())),
        "end_time": str(int(end.timestamp())),
        "show_duplicates": "true",
        "skip_steps": "true",
        "disable_truncate_usage_time": "true",
    }
    assert sent["headers"]["X-SLURM-USER-NAME"] == "medbay"
    assert rest.runner.commands() == []


def test_the_newest_data_parser_is_the_one_slurmdb_is_read_at(tmp_path, version):
    rest = rest_backend(tmp_path, version, Answering(b"{}"))
    assert rest.api_version == VERSIONS[version]
    assert rest.slurmdb_jobs_path() == slurmdb_path(version)


def test_slurmdbs_document_gives_the_records_sacct_gives_for_the_same_window(tmp_path, version):
    api = VERSIONS[version]
    rest = rest_backend(
        tmp_path, version, Answering(recorded(version, f"slurmdb_{api}_jobs_window.json"))
    )
    start, end = window(version)
    through_rest = rest.finished_jobs(start, end)
    from_sacct = finished_in(
        decode_accounting_json(recorded(version, "sacct_window.json")), start, end
    )
    assert through_rest == from_sacct
    (alice,) = through_rest
    assert (alice.user, alice.account, alice.qos, alice.partition) == (
        "alice", "vision", "normal", "train",
    )  # fmt: skip
    assert (alice.state, alice.gpus, alice.elapsed_s, alice.exit_code) == ("COMPLETED", 2, 6, 0)
    # The window starts 3 s into alice's job; her record still has its own start.
    assert alice.start_time < start


def test_without_the_no_truncation_flag_slurmrestd_cuts_times_to_the_window(version):
    """Why the query says disable_truncate_usage_time: recorded without it, the same
    window's alice starts at the window's start."""
    start, _ = window(version)
    api = VERSIONS[version]
    truncated = decode_accounting_json(
        recorded(version, f"slurmdb_{api}_jobs_window_truncated.json")
    )
    alice = next(record for record in truncated if record.user == "alice")
    assert alice.start_time == start


def test_an_empty_window_through_slurmdb_is_no_records(tmp_path, version):
    api = VERSIONS[version]
    rest = rest_backend(
        tmp_path, version, Answering(recorded(version, f"slurmdb_{api}_jobs_empty.json"))
    )
    start, end = window(version)
    assert rest.finished_jobs(start, end) == []


def test_slurmdbd_down_behind_slurmrestd_is_a_transient_error_in_its_words(tmp_path, version):
    api = VERSIONS[version]
    status = int(recorded(version, f"slurmdb_{api}_jobs_slurmdbd_down.status").split()[0])
    body = recorded(version, f"slurmdb_{api}_jobs_slurmdbd_down.json")
    rest = rest_backend(tmp_path, version, Answering(body, status))
    with pytest.raises(BackendError, match="Unable to connect to database") as raised:
        rest.finished_jobs(*window(version))
    assert not raised.value.permanent


def test_without_slurmdbs_endpoint_the_accounting_read_goes_through_sacct(tmp_path, version):
    """slurmrestd without openapi/slurmdbd (a cluster started --no-accounting)."""
    sacct = recorded(version, "sacct_window.json").decode()
    session = Answering(b"{}")
    without_slurmdb = {
        path: methods
        for path, methods in recorded_paths(version).items()
        if not path.startswith("/slurmdb/")
    }
    runner = FakeSlurm({("sacct",): (0, sacct, "")})
    rest = rest_backend(tmp_path, version, session, paths=without_slurmdb, runner=runner)
    start, end = window(version)
    records = rest.finished_jobs(start, end)
    assert session.sent == []
    assert [args[:2] for args in rest.runner.commands()] == [["sacct", "--json"]]
    assert [(record.user, record.account) for record in records] == [("alice", "vision")]
