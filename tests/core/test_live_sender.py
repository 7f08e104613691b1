"""A send started inside a running event loop is kept until done and its error logged."""

from __future__ import annotations

import asyncio
import gc
import logging
import threading

from core import live


class FailingLayer:
    async def group_send(self, group, message):
        await asyncio.sleep(0)
        raise ConnectionError("redis went away")


def test_a_send_from_inside_the_event_loop_is_kept_and_its_failure_logged(monkeypatch, caplog):
    monkeypatch.setattr(live, "get_channel_layer", lambda: FailingLayer())

    async def publish_then_let_it_run():
        live.send_html("board", "<div id='x'></div>")
        assert len(live._sending) == 1  # kept: the loop holds tasks only weakly
        gc.collect()
        for _ in range(3):
            await asyncio.sleep(0)

    # On a thread of its own: Playwright's sync API, used by the browser tests of
    # the same process, leaves a running loop on the main thread.
    failures = []

    def run_in_its_own_loop():
        try:
            asyncio.run(publish_then_let_it_run())
        except BaseException as error:  # reported below, in the test's own thread
            failures.append(error)

    with caplog.at_level(logging.WARNING, logger="core.live"):
        thread = threading.Thread(target=run_in_its_own_loop)
        thread.start()
        thread.join(timeout=10)
    assert failures == []
    assert live._sending == set()
    assert "Live update not delivered" in caplog.text
    assert "redis went away" in caplog.text


def test_the_live_sender_imports_no_domain_app():
    import ast
    from pathlib import Path

    tree = ast.parse(Path(live.__file__).read_text())
    imported = {
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    }
    imported |= {node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    domain = {name for name in imported if name.split(".")[0] in {"clusters", "jobs", "health"}}
    assert domain == set()


class RecordingLayer:
    def __init__(self, failing: str = "") -> None:
        self.sent: list[tuple[str, dict]] = []
        self.failing = failing

    async def group_send(self, group, message):
        if group == self.failing:
            raise ConnectionError("redis went away")
        self.sent.append((group, message))


def test_many_pokes_reach_their_groups_in_order_and_one_failing_stops_none_else(
    monkeypatch, caplog
):
    layer = RecordingLayer(failing="job.1.2")
    monkeypatch.setattr(live, "get_channel_layer", lambda: layer)
    pokes = [("job.1.1", ["job-1"]), ("job.1.2", ["job-2"]), ("job.1.3", ["job-3"])]
    with caplog.at_level(logging.WARNING, logger="core.live"):
        # On a thread of its own, as a sync cycle's: Playwright's sync API, used by
        # the browser tests of the same process, leaves a running loop on this one.
        thread = threading.Thread(target=live.poke_many, args=(pokes,))
        thread.start()
        thread.join(timeout=10)
    assert layer.sent == [
        ("job.1.1", {"type": "live.poke", "regions": ["job-1"]}),
        ("job.1.3", {"type": "live.poke", "regions": ["job-3"]}),
    ]
    assert "Live update not delivered to job.1.2" in caplog.text


def test_what_one_trip_holds_goes_out_in_order_with_each_groups_pokes_as_one_where_last_sent(
    monkeypatch,
):
    layer = RecordingLayer()
    trips = []
    real = live._group_send_many
    monkeypatch.setattr(live, "get_channel_layer", lambda: layer)
    monkeypatch.setattr(live, "_group_send_many", lambda events: trips.append(1) or real(events))
    bumped = []
    monkeypatch.setattr(live, "_bump_regions", bumped.extend)

    held = []

    def publish() -> None:
        with live.one_trip():
            live.send_html("board", "<div id='tile-1'></div>")
            live.poke("board", ["board-counts"])
            with live.one_trip():  # nested: sent with the outer trip
                live.send_html("board", "<div id='tile-2'></div>")
                live.poke("board", ["board-counts"])
            live.poke("remediation", ["run-1", "runs"])
            live.poke_node_pages(["gpu-01"])
            live.poke("remediation", ["run-2", "runs"])  # a pass's second run
            held.append((list(layer.sent), list(bumped)))

    # On a thread of its own, as a request's (see the test above).
    thread = threading.Thread(target=publish)
    thread.start()
    thread.join(timeout=10)
    assert held == [([], [])]
    assert trips == [1]
    assert [
        (group, message.get("html") or message["regions"]) for group, message in layer.sent
    ] == [
        ("board", "<div id='tile-1'></div>"),
        ("board", "<div id='tile-2'></div>"),
        ("board", ["board-counts"]),
        ("node.gpu-01", ["node-gpu-01"]),
        ("remediation", ["run-1", "run-2", "runs"]),
    ]
    assert sorted(bumped) == ["board-counts", "node-gpu-01", "run-1", "run-2", "runs"]
    thread = threading.Thread(target=live.poke, args=("board", ["board-counts"]))
    thread.start()  # after the trip: sent at once again
    thread.join(timeout=10)
    assert len(trips) == 2 and bumped[-1] == "board-counts"


def test_a_process_without_a_loop_sends_every_trip_through_one_kept_loop(monkeypatch):
    # An engine worker or the sync: async_to_sync made a loop and a thread per trip, and
    # the Redis layer a connection per loop.
    loops = []

    class LoopRecordingLayer(RecordingLayer):
        async def group_send(self, group, message):
            loops.append(asyncio.get_running_loop())
            await super().group_send(group, message)

    layer = LoopRecordingLayer()
    monkeypatch.setattr(live, "get_channel_layer", lambda: layer)

    def worker():
        for n in range(3):
            live.poke("board", [f"region-{n}"])

    for _ in range(2):
        thread = threading.Thread(target=worker)
        thread.start()
        thread.join(timeout=10)

    assert [message["regions"] for _, message in layer.sent] == [
        [f"region-{n}"] for n in range(3)
    ] * 2
    assert len(set(map(id, loops))) == 1 and loops[0].is_running()
