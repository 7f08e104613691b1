import os

from agent.follow import FileFollower


def append(path, text):
    with open(path, "a") as handle:
        handle.write(text)


def test_it_starts_at_the_end_of_the_file_by_default(tmp_path):
    log = tmp_path / "kern.log"
    log.write_text("old line\n")
    follower = FileFollower(log)
    append(log, "new line\n")
    assert follower.read_lines() == ["new line"]


def test_it_can_start_from_the_beginning(tmp_path):
    log = tmp_path / "kern.log"
    log.write_text("old line\n")
    assert FileFollower(log, from_start=True).read_lines() == ["old line"]


def test_a_torn_line_waits_for_its_end(tmp_path):
    log = tmp_path / "kern.log"
    log.write_text("")
    follower = FileFollower(log)
    append(log, "half ")
    assert follower.read_lines() == []
    append(log, "line\n")
    assert follower.read_lines() == ["half line"]


def test_it_follows_the_new_file_after_rotation(tmp_path):
    log = tmp_path / "kern.log"
    log.write_text("")
    follower = FileFollower(log)
    append(log, "before rotation\n")
    os.rename(log, tmp_path / "kern.log.1")
    append(tmp_path / "kern.log.1", "late write to old file\n")
    log.write_text("after rotation\n")
    assert follower.read_lines() == ["before rotation", "late write to old file", "after rotation"]
    append(log, "next\n")
    assert follower.read_lines() == ["next"]


def test_it_starts_over_after_truncation(tmp_path):
    log = tmp_path / "kern.log"
    log.write_text("")
    follower = FileFollower(log)
    append(log, "a fairly long first line\n")
    assert follower.read_lines() == ["a fairly long first line"]
    log.write_text("short\n")
    assert follower.read_lines() == ["short"]


def test_a_missing_file_is_picked_up_when_it_appears(tmp_path):
    log = tmp_path / "kern.log"
    follower = FileFollower(log)
    assert follower.read_lines() == []
    log.write_text("first\n")
    assert follower.read_lines() == ["first"]
