from agent.spool import Spool


def events(*ids):
    return [{"id": event_id, "kind": "xid", "message": f"event {event_id}"} for event_id in ids]


def ids(batch_or_events):
    items = getattr(batch_or_events, "events", batch_or_events)
    return [event["id"] for event in items]


def test_appended_events_come_back_in_order(tmp_path):
    spool = Spool(tmp_path)
    spool.append(events("a", "b"))
    spool.append(events("c"))
    assert ids(spool.next_batch(10)) == ["a", "b", "c"]
    assert ids(spool.next_batch(2)) == ["a", "b"]


def test_acknowledged_events_are_not_sent_again_after_a_restart(tmp_path):
    spool = Spool(tmp_path)
    spool.append(events("a", "b", "c"))
    spool.acknowledge(spool.next_batch(2).end)
    restarted = Spool(tmp_path)
    assert ids(restarted.pending()) == ["c"]


def test_unacknowledged_events_survive_a_restart(tmp_path):
    Spool(tmp_path).append(events("a", "b"))
    assert ids(Spool(tmp_path).pending()) == ["a", "b"]


def test_segments_roll_over_and_finished_ones_are_deleted(tmp_path):
    spool = Spool(tmp_path, segment_max_bytes=100)
    for event_id in "abcdef":
        spool.append(events(event_id))
    assert len(list((tmp_path / "segments").iterdir())) > 1
    spool.acknowledge(spool.next_batch(5).end)
    assert ids(spool.pending()) == ["f"]
    assert len(list((tmp_path / "segments").iterdir())) == 1


def test_a_torn_last_line_from_a_crash_is_dropped(tmp_path):
    spool = Spool(tmp_path)
    spool.append(events("a"))
    segment = next((tmp_path / "segments").iterdir())
    with open(segment, "a") as handle:
        handle.write('{"id": "half')
    restarted = Spool(tmp_path)
    restarted.append(events("b"))
    assert ids(restarted.pending()) == ["a", "b"]


def test_rejected_batches_are_kept_aside_and_skipped(tmp_path):
    spool = Spool(tmp_path)
    spool.append(events("a", "b"))
    path = spool.reject(spool.next_batch(1), "HTTP 400: bad event")
    assert path.parent == tmp_path / "rejected"
    assert '"a"' in path.read_text() and "HTTP 400" in path.read_text()
    assert ids(spool.pending()) == ["b"]
