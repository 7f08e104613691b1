"""Time of one Slurm -> database reconciliation cycle on a large cluster.

    python bench/sync.py [--api cli|rest] [--slurm-version 22.05|24.11] [--nodes 1024]
                         [--jobs 5000] [--cycles 15]

The snapshot is built from real Slurm output: one node record and one job record
from tests/fixtures/slurm/<version>/ are cloned with new names, ids and states,
serialised as Slurm prints them and parsed with the production parsers on every
cycle. Each cycle changes 2 % of the nodes (drain or resume) and 5 % of the jobs
(start, finish or requeue), then times `sync_once` (parse, drift check, diff,
writes, live publish) on PostgreSQL by default.

--clusters N syncs N clusters of --nodes and --jobs each, one after another as one
process's sync loops share its interpreter, and one cluster of N times the nodes and
jobs, in the same run; prints "clusters", "cycle_ms_p50" (all N clusters' cycles
together), "cluster_cycle_ms_p50" (one of them), "one_cluster_ms_p50" (the one big
cluster), "ratio_to_one_cluster" and "queries_per_cycle" (all N together; and
"one_cluster_queries_per_cycle"), beside the common figures.

Prints {"nodes", "jobs", "cycle_ms_p50", "cycle_ms_p95", "cycle_cpu_ms_p50",
"parse_cpu_ms_p50" (the share of the cycle spent parsing Slurm's output),
"queries_per_cycle", "queries_constant", "peak_rss_mb" (this process's peak resident
memory: the synthetic Slurm's own records included, so an upper bound for a sync
process), "rss_before_sync_mb" (those records alone), "slurm_version", "db"}.

--api rest (24.11 by default, the version with slurmrestd answers recorded) syncs
three clusters from the same records and the same changes in one run, in turn:
"cli", the CLI sync above (Slurm's JSON already in memory); "rest", the production
SlurmRestBackend over real HTTP to a stand-in slurmrestd in a process of its own
(bench/_slurmrestd.py: slurmrestd's documents and its update_time behaviour); and
"cli_pipe", the production SlurmBackend reading the same JSON through a pipe from a
child process, as from `scontrol`. Neither Slurm's own serialisation nor
slurmrestd's is timed (it is done before each cycle). Prints, for each of the three,
<side>_cycle_ms_p50/_p95, _cycle_cpu_ms_p50, _read_cpu_ms_p50 (reading, decoding and
parsing the snapshot), _idle_cycle_ms_p50 (a cycle in which nothing changed: REST's
changes-only polls then get no job list) and _queries_per_cycle; "ratio" (rest p50 /
cli p50), "ratio_to_cli_pipe" (rest p50 / cli_pipe p50), "rest_requests_per_cycle",
"rest_mb_per_cycle", and the common figures.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import random
import resource
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

from _setup import ROOT, percentile

BENCH_DATABASE_URL = "postgres://postgres@127.0.0.1:5432/medbay_bench_sync"
FIXTURES = ROOT / "tests" / "fixtures" / "slurm"
NODE_SOURCES = {"22.05": ("sinfo.json", "nodes"), "24.11": ("scontrol_show_node.json", "nodes")}
JOB_SOURCES = {"22.05": ("squeue.json", "jobs"), "24.11": ("scontrol_show_job.json", "jobs")}
PARTITION_TEMPLATE = "scontrol_show_partition.txt"
# Versions whose recorded slurmrestd answers are in tests/fixtures/slurm/<version>/rest/.
REST_VERSIONS = ("24.11",)


def ensure_database(url: str) -> None:
    """Create the benchmark's PostgreSQL database when it does not exist yet."""
    import psycopg
    from psycopg import sql

    name = url.rsplit("/", 1)[1]
    admin_url = url.rsplit("/", 1)[0] + "/postgres"
    with psycopg.connect(admin_url, autocommit=True) as connection:
        exists = connection.execute(
            "SELECT 1 FROM pg_database WHERE datname = %s", [name]
        ).fetchone()
        if not exists:
            connection.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))


class SyntheticSlurm:
    """Slurm's JSON for a big cluster, cloned from one real node and one real job."""

    def __init__(self, version: str, nodes: int, jobs: int, seed: int = 1) -> None:
        from clusters.backends.slurm_parsers import JobListParser

        self.job_list_parser = JobListParser()  # one per backend, as SlurmBackend keeps
        self.parse_cpu_s = 0.0
        self.version = version
        self.rng = random.Random(seed)
        folder = FIXTURES / version
        node_file, node_key = NODE_SOURCES[version]
        job_file, job_key = JOB_SOURCES[version]
        node_document = json.loads((folder / node_file).read_text())
        node_template = node_document[node_key][0]
        job_document = json.loads((folder / job_file).read_text())
        # What Slurm prints beside the list (meta, errors, last_update): kept, so that
        # the CLI and slurmrestd documents are whole.
        self.node_extra = {key: value for key, value in node_document.items() if key != node_key}
        self.job_extra = {key: value for key, value in job_document.items() if key != job_key}
        # Slurm's clock, in seconds: each change() is ten seconds after the last, and
        # the sync reads five seconds after a change.
        self.clock = 1_800_000_000
        self.changed_at = self.clock
        job_template = next(job for job in job_document[job_key] if job["job_id"] == 3)
        self.names = [f"bench-{number:04d}" for number in range(1, nodes + 1)]
        spare = max(1, nodes // 32)
        self.layout = {
            "train": self.names[: nodes - 2 * spare],
            "spare": self.names[nodes - 2 * spare : nodes - spare],
            "infer": self.names[nodes - spare :],
        }
        self.partition_text = self._partitions_text(folder)
        self.node_records = [self._node(node_template, name) for name in self.names]
        self.job_records = [self._job(job_template, 10_000 + index) for index in range(jobs)]
        self.free = list(self.layout["train"])
        for job in self.job_records:
            if self.rng.random() < 0.3 and self.free:
                self._start(job)
        self.print_json()

    # ---------------------------------------------------------------- records

    def _partitions_text(self, folder: Path) -> str:
        template = (folder / PARTITION_TEMPLATE).read_text().strip().split("\n\n")[0]
        records = []
        for index, (name, members) in enumerate(self.layout.items()):
            record = template.replace(template.split()[0], f"PartitionName={name}", 1)
            record = _replace_field(record, "Nodes", ",".join(members))
            record = _replace_field(record, "Default", "YES" if index == 0 else "NO")
            records.append(record)
        return "\n\n".join(records) + "\n"

    def _partition_of(self, name: str) -> str:
        return next(part for part, members in self.layout.items() if name in members)

    def _node(self, template: dict, name: str) -> dict:
        record = copy.deepcopy(template)
        record["name"] = name
        record["partitions"] = [self._partition_of(name)]
        self._set_node_state(record, "IDLE", drain=False)
        return record

    def _set_node_state(self, record: dict, state: str, *, drain: bool) -> None:
        record["reason"] = "medbay-bench: XID 79 GPU 3 fallen off the bus" if drain else ""
        if self.version == "22.05":
            record["state"] = state.lower()
            record["state_flags"] = ["DRAIN"] if drain else []
        else:
            record["state"] = [state, "DRAIN"] if drain else [state]

    def _job(self, template: dict, job_id: int) -> dict:
        record = copy.deepcopy(template)
        record["job_id"] = job_id
        record["name"] = f"train-{job_id}"
        record["restart_cnt"] = 0
        self._set_job_state(record, "PENDING", nodes=[])
        return record

    def _set_job_state(self, record: dict, state: str, *, nodes: list[str]) -> None:
        record["job_state"] = state if self.version == "22.05" else [state]
        record["nodes"] = ",".join(nodes)
        record["gres_detail"] = ["gpu:h100:8(IDX:0-7)"] * len(nodes)
        count = len(nodes) or 1
        record["node_count"] = (
            count if self.version == "22.05" else {"set": True, "infinite": False, "number": count}
        )

    # ---------------------------------------------------------------- changes

    def _start(self, job: dict) -> None:
        node = self.free.pop(self.rng.randrange(len(self.free)))
        self._set_job_state(job, "RUNNING", nodes=[node])

    def _finish(self, job: dict, *, requeue: bool) -> None:
        self.free.extend(name for name in job["nodes"].split(",") if name)
        if requeue:
            job["restart_cnt"] += 1
            self._set_job_state(job, "PENDING", nodes=[])
        else:
            self._set_job_state(job, "COMPLETED", nodes=[])

    def print_json(self) -> None:
        """What `sinfo --json` and `squeue --json` (`scontrol show node/job --json` on
        24.11) would print now; parsing it is timed. The lists alone are kept as well,
        for the stand-in slurmrestd to send in its own documents."""
        self.node_list = json.dumps(self.node_records)
        self.job_list = json.dumps(self.job_records)
        self.node_text = _document("nodes", self.node_list, self.node_extra, self.read_at)
        self.job_text = _document("jobs", self.job_list, self.job_extra, self.read_at)

    @property
    def read_at(self) -> int:
        """When the sync reads: a few seconds after the last change."""
        return self.clock + 5

    def idle(self) -> None:
        """Ten seconds pass and nothing changes."""
        self.clock += 10
        self.print_json()

    def change(self, node_fraction: float = 0.02, job_fraction: float = 0.05) -> None:
        self.clock += 10
        self.changed_at = self.clock
        for record in self.rng.sample(
            self.node_records, round(len(self.node_records) * node_fraction)
        ):
            drained = bool(record["reason"])
            self._set_node_state(record, "IDLE", drain=not drained)
        for job in self.rng.sample(self.job_records, round(len(self.job_records) * job_fraction)):
            state = job["job_state"] if self.version == "22.05" else job["job_state"][0]
            if state == "RUNNING":
                self._finish(job, requeue=self.rng.random() < 0.5)
            elif self.free:
                self._start(job)
        self.print_json()

    # ---------------------------------------------------------------- the backend

    name = "slurm"

    def partitions(self):
        from clusters.backends.slurm_parsers import parse_scontrol_partitions

        with self.parsing():
            return parse_scontrol_partitions(self.partition_text)

    def nodes(self):
        from clusters.backends.slurm import decode_json
        from clusters.backends.slurm_parsers import parse_nodes_json

        with self.parsing():
            return parse_nodes_json(decode_json(self.node_text))

    def jobs(self):
        from clusters.backends.slurm_parsers import decode_jobs_json

        with self.parsing():
            return self.job_list_parser.parse(decode_jobs_json(self.job_text))

    @contextmanager
    def parsing(self):
        """Adds the CPU time of reading Slurm's output, as the sync does it, to parse_cpu_s."""
        started = time.process_time()
        try:
            yield
        finally:
            self.parse_cpu_s += time.process_time() - started

    def configured_partitions(self) -> dict[str, tuple[str, ...]]:
        return {name: tuple(members) for name, members in self.layout.items()}


def _document(key: str, records: str, extra: dict, read_at: int) -> str:
    """Slurm's whole JSON document around an already serialised list."""
    if "last_update" in extra:
        extra = {**extra, "last_update": {"set": True, "infinite": False, "number": read_at}}
    return f'{{"{key}": {records}, {json.dumps(extra)[1:]}' if extra else f'{{"{key}": {records}}}'


def _replace_field(record: str, key: str, value: str) -> str:
    words = record.replace("\n", " \n ").split(" ")
    return " ".join(
        f"{key}={value}" if word.startswith(f"{key}=") else word for word in words
    ).replace(" \n ", "\n")


def timed(backend_class):
    """A production backend class whose reads' wall and CPU time (transport,
    decoding, parsing) are added up in read_s and read_cpu_s."""

    class Timed(backend_class):
        read_s = read_cpu_s = 0.0

        def nodes(self):
            with self.timing():
                return super().nodes()

        def jobs(self):
            with self.timing():
                return super().jobs()

        def partitions(self):
            with self.timing():
                return super().partitions()

        @contextmanager
        def timing(self):
            started, started_cpu = time.perf_counter(), time.process_time()
            try:
                yield
            finally:
                self.read_s += time.perf_counter() - started
                self.read_cpu_s += time.process_time() - started_cpu

    return Timed


def slurm_conf(slurm: SyntheticSlurm, workdir: Path) -> str:
    conf = workdir / "slurm.conf"
    lines = (f"PartitionName={name} Nodes={','.join(m)}\n" for name, m in slurm.layout.items())
    conf.write_text("".join(lines))
    return str(conf)


def canned_scontrol(slurm: SyntheticSlurm, printed: dict[tuple, Path] | None = None):
    """The production backends' runner. Partitions: the same canned text the CLI side
    parses; `show config` without BOOT_TIME, so the generation is unknown, as the CLI
    side's is. Commands in `printed` run for real: `cat` of a file holding what that
    command prints, through the production runner (a child process and a pipe)."""
    from clusters.backends.slurm_cli import CommandResult, run_command

    printed = printed or {}

    def run(args, *, input_text=None, timeout=None, env=None):
        args = tuple(args)
        if args in printed:
            return run_command(["cat", str(printed[args])], timeout=timeout, env=env)
        if args == ("sinfo", "--version"):
            return CommandResult(args, 0, f"slurm {slurm.version}.5\n", "")
        if args == ("scontrol", "-o", "show", "partition"):
            return CommandResult(args, 0, slurm.partition_text, "")
        if args == ("scontrol", "show", "config"):
            return CommandResult(args, 0, "ClusterName = bench\n", "")
        return CommandResult(args, 1, "", f"{args[0]}: not in this benchmark")

    return run


def rest_backend(slurm: SyntheticSlurm, url: str, workdir: Path):
    """The production SlurmRestBackend, against the stand-in slurmrestd."""
    from clusters.backends.slurm_rest import JwtAuth, SlurmRestBackend

    token = workdir / "token"
    token.write_text("SLURM_JWT=bench.token.not-verified\n")
    auth = JwtAuth(token_file=str(token), token_user="medbay-bench")
    runner = canned_scontrol(slurm)
    return timed(SlurmRestBackend)(url, auth, slurm_conf=slurm_conf(slurm, workdir), runner=runner)


PRINTED = {
    ("scontrol", "show", "node", "--json"): "nodes.json",
    ("scontrol", "show", "job", "--json"): "jobs.json",
}


def pipe_backend(slurm: SyntheticSlurm, workdir: Path):
    """The production SlurmBackend reading Slurm's JSON through a pipe from a child
    process, as from `scontrol`: what the CLI side's figure leaves out."""
    from clusters.backends.slurm import SlurmBackend

    printed = {args: workdir / name for args, name in PRINTED.items()}
    runner = canned_scontrol(slurm, printed)
    return timed(SlurmBackend)(slurm_conf(slurm, workdir), runner=runner)


def print_files(slurm: SyntheticSlurm, workdir: Path) -> None:
    (workdir / "nodes.json").write_text(slurm.node_text)
    (workdir / "jobs.json").write_text(slurm.job_text)


class Side:
    """One transport's cluster, backend and measurements."""

    def __init__(self, name: str, backend, read_cpu) -> None:
        from clusters.models import Cluster

        self.name, self.backend, self.read_cpu = name, backend, read_cpu
        Cluster.objects.filter(name=f"bench-sync-{name}").delete()
        self.cluster = Cluster.objects.create(name=f"bench-sync-{name}", backend="slurm")
        self.timings, self.cpu, self.reads, self.idle, self.queries = [], [], [], [], []

    def cycle(self, into: list | None = None) -> None:
        from sync.cycle import sync_once

        before = self.read_cpu()
        started, started_cpu = time.perf_counter(), time.process_time()
        result = sync_once(self.cluster, self.backend)
        elapsed = (time.perf_counter() - started) * 1000
        assert result.controller_up, result.error
        if into is not None:
            into.append(elapsed)
            return
        assert result.jobs_changed
        self.timings.append(elapsed)
        self.cpu.append((time.process_time() - started_cpu) * 1000)
        self.reads.append((self.read_cpu() - before) * 1000)

    def count_queries(self) -> None:
        from django.db import connection
        from django.test.utils import CaptureQueriesContext

        from sync.cycle import sync_once

        with CaptureQueriesContext(connection) as captured:
            sync_once(self.cluster, self.backend)
        self.queries.append(len(captured))

    def figures(self) -> dict:
        return {
            f"{self.name}_cycle_ms_p50": round(percentile(self.timings, 50), 1),
            f"{self.name}_cycle_ms_p95": round(percentile(self.timings, 95), 1),
            f"{self.name}_cycle_cpu_ms_p50": round(percentile(self.cpu, 50), 1),
            f"{self.name}_read_cpu_ms_p50": round(percentile(self.reads, 50), 1),
            f"{self.name}_idle_cycle_ms_p50": round(percentile(self.idle, 50), 1),
            f"{self.name}_queries_per_cycle": max(self.queries),
        }

    def close(self) -> None:
        from clusters.models import Cluster

        Cluster.objects.filter(pk=self.cluster.pk).delete()


def run_rest(args, slurm: SyntheticSlurm, server, workdir: Path) -> dict:
    """The CLI sync and the REST sync, on the same cluster and the same changes."""

    def publish() -> None:
        changed = {"nodes": slurm.changed_at, "jobs": slurm.changed_at, "partitions": 0}
        lists = {"nodes": slurm.node_list.encode(), "jobs": slurm.job_list.encode()}
        server.publish(slurm.read_at, changed, lists)
        print_files(slurm, workdir)

    rest = rest_backend(slurm, server.url, workdir)
    pipe = pipe_backend(slurm, workdir)
    sides = [
        Side("cli", slurm, lambda: slurm.parse_cpu_s),
        Side("rest", rest, lambda: rest.read_cpu_s),
        Side("cli_pipe", pipe, lambda: pipe.read_cpu_s),
    ]
    publish()
    for side in sides:
        side.cycle(into=[])  # the first cycle creates every row; not what is measured
    # One changed cycle unmeasured: 24.11's slurmrestd fails the first changes-only
    # node poll (see bench/_slurmrestd.py), and the backend polls nodes in full after.
    slurm.change()
    publish()
    for side in sides:
        side.cycle(into=[])
    requests_before, bytes_before = server.counters()
    for index in range(args.cycles):
        slurm.change()
        publish()
        for side in sides[index % 3 :] + sides[: index % 3]:  # none always goes first
            side.cycle()
    requests_after, bytes_after = server.counters()
    for _ in range(3):
        slurm.idle()
        publish()
        for side in sides:
            side.cycle(into=side.idle)
    for _ in range(3):
        slurm.change()
        publish()
        for side in sides:
            side.count_queries()
    figures = {}
    for side in sides:
        figures.update(side.figures())
        side.close()
    rest_p50 = figures["rest_cycle_ms_p50"]
    figures["ratio"] = round(rest_p50 / figures["cli_cycle_ms_p50"], 3)
    # Against a CLI sync that also pays for its transport: the pipe from `scontrol`.
    figures["ratio_to_cli_pipe"] = round(rest_p50 / figures["cli_pipe_cycle_ms_p50"], 3)
    figures["rest_requests_per_cycle"] = round((requests_after - requests_before) / args.cycles, 1)
    figures["rest_mb_per_cycle"] = round((bytes_after - bytes_before) / args.cycles / 1e6, 1)
    figures["queries_constant"] = all(len(set(side.queries)) == 1 for side in sides)
    return figures


def run_cli(args, slurm: SyntheticSlurm) -> dict:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from clusters.models import Cluster
    from sync.cycle import sync_once

    Cluster.objects.filter(name="bench-sync").delete()
    cluster = Cluster.objects.create(name="bench-sync", backend="slurm")
    sync_once(cluster, slurm)  # the first cycle creates every row; not what is measured
    timings, cpu, parse, queries = [], [], [], []
    for _ in range(args.cycles):
        slurm.change()
        started, started_cpu = time.perf_counter(), time.process_time()
        slurm.parse_cpu_s = 0.0
        result = sync_once(cluster, slurm)
        timings.append((time.perf_counter() - started) * 1000)
        cpu.append((time.process_time() - started_cpu) * 1000)
        parse.append(slurm.parse_cpu_s * 1000)
        assert result.controller_up and result.jobs_changed
    # Queries are counted on separate cycles: capturing them keeps a copy of every
    # statement's SQL, which for multi-thousand-row updates costs time of its own.
    for _ in range(3):
        slurm.change()
        with CaptureQueriesContext(connection) as captured:
            sync_once(cluster, slurm)
        queries.append(len(captured))
    Cluster.objects.filter(pk=cluster.pk).delete()
    return {
        "cycle_ms_p50": round(percentile(timings, 50), 1),
        "cycle_ms_p95": round(percentile(timings, 95), 1),
        # CPU time of this process: what the cycle costs on a machine shared
        # with other work, where wall time also counts waiting for a core.
        "cycle_cpu_ms_p50": round(percentile(cpu, 50), 1),
        "parse_cpu_ms_p50": round(percentile(parse, 50), 1),
        "queries_per_cycle": max(queries),
        "queries_constant": len(set(queries)) == 1,
    }


class Fleet:
    """Several synthetic clusters synced one after another, as one process's loops do
    (their threads share one interpreter: the sum is what the process pays)."""

    def __init__(self, name: str, slurms: list[SyntheticSlurm]) -> None:
        from clusters.models import Cluster

        self.slurms, self.clusters = slurms, []
        for index in range(len(slurms)):
            cluster_name = f"bench-{name}-{index}"
            Cluster.objects.filter(name=cluster_name).delete()
            self.clusters.append(Cluster.objects.create(name=cluster_name, backend="slurm"))
        self.timings, self.per_cluster, self.queries = [], [], []

    def cycle(self, *, measured: bool = True) -> None:
        from sync.cycle import sync_once

        total = 0.0
        for cluster, slurm in zip(self.clusters, self.slurms, strict=True):
            started = time.perf_counter()
            result = sync_once(cluster, slurm)
            elapsed = (time.perf_counter() - started) * 1000
            assert result.controller_up, result.error
            total += elapsed
            if measured:
                self.per_cluster.append(elapsed)
        if measured:
            self.timings.append(total)

    def count_queries(self) -> None:
        from django.db import connection
        from django.test.utils import CaptureQueriesContext

        with CaptureQueriesContext(connection) as captured:
            self.cycle(measured=False)
        self.queries.append(len(captured))

    def change(self) -> None:
        for slurm in self.slurms:
            slurm.change()

    def close(self) -> None:
        from clusters.models import Cluster

        Cluster.objects.filter(pk__in=[cluster.pk for cluster in self.clusters]).delete()


def run_clusters(args, version: str) -> dict:
    """N clusters of --nodes/--jobs each against one cluster of N times that, on the
    same changes' share and in the same run, alternating which goes first."""
    count = args.clusters
    many = Fleet("many", [SyntheticSlurm(version, args.nodes, args.jobs, seed=1 + index)
                          for index in range(count)])  # fmt: skip
    one = Fleet("one", [SyntheticSlurm(version, args.nodes * count, args.jobs * count)])
    fleets = [many, one]
    for fleet in fleets:
        fleet.cycle(measured=False)  # the first cycle creates every row; not what is measured
    for index in range(args.cycles):
        for fleet in fleets[index % 2 :] + fleets[: index % 2]:
            fleet.change()
            fleet.cycle()
    for _ in range(3):
        for fleet in fleets:
            fleet.change()
            fleet.count_queries()
    for fleet in fleets:
        fleet.close()
    many_p50 = percentile(many.timings, 50)
    one_p50 = percentile(one.timings, 50)
    return {
        "clusters": count,
        "cycle_ms_p50": round(many_p50, 1),
        "cycle_ms_p95": round(percentile(many.timings, 95), 1),
        "cluster_cycle_ms_p50": round(percentile(many.per_cluster, 50), 1),
        "one_cluster_ms_p50": round(one_p50, 1),
        "one_cluster_ms_p95": round(percentile(one.timings, 95), 1),
        "ratio_to_one_cluster": round(many_p50 / one_p50, 3),
        "queries_per_cycle": max(many.queries),
        "one_cluster_queries_per_cycle": max(one.queries),
        "queries_constant": len(set(many.queries)) == 1 and len(set(one.queries)) == 1,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--api", choices=("cli", "rest"), default="cli")
    parser.add_argument("--slurm-version", choices=sorted(NODE_SOURCES))
    parser.add_argument("--nodes", type=int, default=1024)
    parser.add_argument("--jobs", type=int, default=5000)
    parser.add_argument("--cycles", type=int, default=15)
    parser.add_argument(
        "--clusters",
        type=int,
        default=0,
        help="sync N clusters of --nodes and --jobs each, and one cluster of N times that",
    )
    args = parser.parse_args()
    if args.clusters and args.api == "rest":
        parser.error("--clusters measures the CLI sync; leave out --api rest")
    if args.clusters < 0:
        parser.error("--clusters must be a positive number of clusters")
    version = args.slurm_version or ("24.11" if args.api == "rest" else "22.05")
    if args.api == "rest" and version not in REST_VERSIONS:
        parser.error(f"--api rest needs a Slurm with slurmrestd: {', '.join(REST_VERSIONS)}")
    if "DATABASE_URL" not in os.environ:
        os.environ["DATABASE_URL"] = BENCH_DATABASE_URL
    if os.environ["DATABASE_URL"].startswith("postgres"):
        ensure_database(os.environ["DATABASE_URL"])
    server = None
    if args.api == "rest":
        from _slurmrestd import RestServer

        # Its own process, as slurmrestd is; forked before Django opens a connection.
        server = RestServer(version, FIXTURES / version / "rest")

    from _setup import django_setup

    django_setup()
    from django.db import connection

    before_sync_mb = 0.0  # --clusters: records are made beside the syncs
    if args.clusters:
        figures = run_clusters(args, version)
    elif server is None:
        slurm = SyntheticSlurm(version, args.nodes, args.jobs)
        before_sync_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        figures = run_cli(args, slurm)
    else:
        slurm = SyntheticSlurm(version, args.nodes, args.jobs)
        before_sync_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        try:
            with tempfile.TemporaryDirectory(prefix="medbay-bench-sync-") as workdir:
                figures = {"api": "rest", **run_rest(args, slurm, server, Path(workdir))}
        finally:
            server.close()
    print(
        json.dumps(
            {
                "nodes": args.nodes,
                "jobs": args.jobs,
                **figures,
                "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
                # The synthetic Slurm's records alone, before any sync: not the sync's.
                "rss_before_sync_mb": round(before_sync_mb),
                "slurm_version": version,
                "db": connection.vendor,
            }
        )
    )


if __name__ == "__main__":
    main()
