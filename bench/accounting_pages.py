"""`sacct --json` pages for bench/reports.py --accounting, built from a recorded sample.

Each page is the text sacct would print for one day: the recorded 22.05 record
of a finished job (tests/fixtures/slurm/22.05/accounting/), its id, times,
account, user, partition, QOS and state changed per job, every 20th job
requeued once (two attempts). The time spent building the text is kept apart
(`building_s`) so that the benchmark counts only decoding and storing it.
"""

from __future__ import annotations

import json
import time
from datetime import datetime, timedelta
from pathlib import Path

from clusters.backends.slurm_accounting import finished_in
from clusters.backends.slurm_parsers import decode_accounting_json

SAMPLE = (
    Path(__file__).resolve().parent.parent
    / "tests/fixtures/slurm/22.05/accounting/sacct_D_X_alice_bob.json"
)
ACCOUNTS = ("vision", "nlp", "speech", "robotics", "infra", "research", "safety", "evals")
FIELDS = ("id", "submit", "start", "end", "elapsed", "account", "user", "partition", "qos", "state")


def record_template(sample: dict) -> str:
    """The recorded job as text with %(field)s holes where each job differs."""
    record = next(job for job in sample["jobs"] if job["state"]["current"] == "COMPLETED")
    record = json.loads(json.dumps(record))
    record["job_id"] = "@@id@@"
    record["time"].update(
        submission="@@submit@@", eligible="@@submit@@", start="@@start@@", end="@@end@@"
    )
    record["time"]["elapsed"] = "@@elapsed@@"
    record["account"] = record["association"]["account"] = "@@account@@"
    record["user"] = record["association"]["user"] = "@@user@@"
    record["partition"], record["qos"] = "@@partition@@", "@@qos@@"
    record["state"]["current"] = "@@state@@"
    text = json.dumps(record).replace("%", "%%")
    for name in FIELDS:
        numeric = name in ("id", "submit", "start", "end", "elapsed")
        text = text.replace(f'"@@{name}@@"', f"%({name})d" if numeric else f'"%({name})s"')
    return text


class RecordedPages:
    """A backend whose finished_jobs() answers with a built page for the window."""

    name = "slurm"

    def __init__(self, jobs: int, since: datetime, days: int):
        sample = json.loads(SAMPLE.read_text())
        self.template = record_template(sample)
        self.meta = json.dumps(sample["meta"])
        self.jobs, self.since, self.days = jobs, since, days
        self.next_id = 1
        self.building_s = 0.0

    def page(self, start: datetime, end: datetime) -> str:
        day = int((start - self.since) / timedelta(days=1))
        count = self.jobs // self.days + (1 if day < self.jobs % self.days else 0)
        span = (end - start).total_seconds()
        base = int(start.timestamp())
        records, requeued = [], False
        for index in range(count):
            ended = base + int((index + 0.5) * span / max(count, 1))
            # The attempt after a requeued one is that job's final attempt.
            requeued = not requeued and self.next_id % 20 == 0 and index + 1 < count
            elapsed = 60 + (self.next_id * 37) % 7200
            team = self.next_id % len(ACCOUNTS)
            values = {
                "id": self.next_id,
                "submit": ended - elapsed - 120,
                "start": ended - elapsed,
                "end": ended,
                "elapsed": elapsed,
                "account": ACCOUNTS[team],
                "user": f"user{team}{self.next_id % 5}",
                "partition": "infer" if team == 1 else "train",
                "qos": "high" if self.next_id % 7 == 0 else "normal",
                "state": "REQUEUED" if requeued else "COMPLETED",
            }
            records.append(self.template % values)
            if not requeued:
                self.next_id += 1
        jobs = ",".join(records)
        return f'{{"meta": {self.meta}, "errors": [], "jobs": [{jobs}]}}'

    def finished_jobs(self, start: datetime, end: datetime):
        began = time.perf_counter()
        text = self.page(start, end)
        self.building_s += time.perf_counter() - began
        return finished_in(decode_accounting_json(text), start, end)
