"""The progress line (rocketidx.cli.progress): on a terminal only, never with --json, erased at the end; the
in-process build drives it through build_index's ``progress`` hook, Spark through the status tracker."""
from __future__ import annotations

import io
import time
from types import SimpleNamespace

import pytest

from rocketidx import cli
from rocketidx.cli import progress
from rocketidx.cli.progress import ERASE, ProgressLine, spark_progress, spark_tasks


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_line_waits_for_long_work_rate_limits_and_is_erased():
    tty, clock = Terminal(), Clock()
    line = ProgressLine("build", stream=tty, delay=1.0, interval=0.25, clock=clock)
    line.bytes_done(10 * 2**20, 100 * 2**20)
    assert tty.getvalue() == ""  # the first second: short work prints nothing
    clock.now += 2
    line.bytes_done(50 * 2**20, 100 * 2**20)
    assert tty.getvalue() == f"{ERASE}build: 50.0 MiB of 100.0 MiB read (50%), 26 MB/s"
    clock.now += 0.1
    line.bytes_done(60 * 2**20, 100 * 2**20)  # too soon after the last draw
    assert tty.getvalue().count(ERASE) == 1
    line.close()
    assert tty.getvalue().endswith(f"read (50%), 26 MB/s{ERASE}") and "\n" not in tty.getvalue()
    clock.now += 5
    line.bytes_done(70 * 2**20, 100 * 2**20)  # after close: nothing more
    assert tty.getvalue().count(ERASE) == 2


@pytest.mark.parametrize("stream, enabled", [(io.StringIO(), True), (Terminal(), False)])
def test_no_line_off_a_terminal_or_when_disabled(stream, enabled):
    clock = Clock()
    with ProgressLine("build", stream=stream, enabled=enabled, delay=0, interval=0, clock=clock) as line:
        clock.now += 1
        line.bytes_done(1, 2)
    assert stream.getvalue() == ""


def _store(tmp_path):
    assert cli.main(["gen", "--out", str(tmp_path / "s"), "--messages", "3000", "--segment-bytes", "256k"]) == 0
    return tmp_path / "s"


def test_an_in_process_build_shows_bytes_read_on_a_terminal_and_nothing_with_json(tmp_path, monkeypatch, capsys):
    store = _store(tmp_path)
    monkeypatch.setattr(progress, "DELAY", 0.0)
    tty = Terminal()
    monkeypatch.setattr("sys.stderr", tty)
    hook_calls = []
    from rocketidx.build import in_process as build_mod
    real = build_mod.build_index

    def spy(*args, progress=None, **kw):
        def counted(reader):
            hook_calls.append(reader.bytes_read + reader.in_segment)
            progress(reader)
        return real(*args, progress=counted, **kw)
    monkeypatch.setattr(build_mod, "build_index", spy)
    args = ["build", "--commitlog", str(store), "--out", str(tmp_path / "o"), "--in-process", "--hash-slots", "1000",
            "--index-num", "20000", "--timezone", "UTC"]
    assert cli.main(args) == 0
    assert hook_calls == sorted(hook_calls) and hook_calls[-1] > 0
    text = tty.getvalue()
    assert text.startswith(f"{ERASE}build: ") and " read (" in text and "MB/s" in text
    assert text.endswith(ERASE)  # erased before the summary is printed
    tty.truncate(0)
    tty.seek(0)
    assert cli.main(args + ["--json", "--out", str(tmp_path / "o2")]) == 0
    assert tty.getvalue() == ""


def test_reader_progress_counts_bytes_within_a_segment(tmp_path):
    """The hook sees where the last batch ended, not only whole segments: a one-segment log moves too."""
    from rocketidx.build.in_process import build_index
    from rocketidx.config import BuildConfig
    assert cli.main(["gen", "--out", str(tmp_path / "s"), "--messages", "3000"]) == 0
    seen = []
    build_index(tmp_path / "s", tmp_path / "o", BuildConfig(hash_slot_num=1000, index_num=20000, timezone="UTC",
                                                            batch_records=500),
                progress=lambda r: seen.append(r.bytes_read + r.in_segment))
    assert len(set(seen)) >= 5 and seen == sorted(seen) and seen[0] > 0


class FakeTracker:
    def __init__(self, stages):
        self.stages = stages

    def getActiveStageIds(self):
        return list(self.stages)

    def getStageInfo(self, sid):
        done, running, total = self.stages[sid]
        return SimpleNamespace(numCompletedTasks=done, numActiveTasks=running, numTasks=total)


def test_spark_tasks_sums_the_running_stages():
    assert spark_tasks(FakeTracker({})) is None
    assert spark_tasks(FakeTracker({3: (2, 1, 5), 4: (0, 2, 10)})) == (2, 3, 15)


def test_spark_progress_polls_the_status_tracker_and_erases_its_line():
    tracker = FakeTracker({0: (3, 2, 8)})
    spark = SimpleNamespace(sparkContext=SimpleNamespace(statusTracker=lambda: tracker))
    tty = Terminal()
    with spark_progress(spark, "build on Spark", stream=tty, poll=0.02, delay=0):
        time.sleep(0.3)
    text = tty.getvalue()
    assert f"{ERASE}build on Spark: 3 of 8 tasks done, 2 running" in text and text.endswith(ERASE)
    quiet = Terminal()
    with spark_progress(spark, "build on Spark", stream=quiet, poll=0.02, delay=0, enabled=False):
        time.sleep(0.1)
    assert quiet.getvalue() == ""
