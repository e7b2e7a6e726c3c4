"""A careless command loses nothing (issue 20, reproducers 1 and 2): a range that selects nothing, a
build of another kind over an output, an output inside a broker's store or over someone's files.

Every refusal is exit 2 with one line on stderr, before anything is read or created (not even the
output's lock file), and the previous output stays as it was."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from rocketidx import cli

GEN = ["--messages", "3000", "--segment-bytes", "65536", "--body-bytes", "100", "--topics", "2", "--span", "6h",
       "--start-ms", "1700000000000"]
SIZES = ["--hash-slots", "101", "--index-num", "2000", "--timezone", "UTC"]
HOUR = 3_600_000


def run(capsys, *argv) -> tuple[int, str, str]:
    rc = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    s = tmp_path_factory.mktemp("careless") / "store"
    assert cli.main(["gen", "--out", str(s), *GEN]) == 0
    return s


def build(capsys, store, out, *extra):
    return run(capsys, "build", "--commitlog", store, "--out", out, "--in-process", *SIZES, *extra)


def tree(path: Path) -> dict:
    """Every entry under ``path`` with its kind, size and inode: what a refused command must not change."""
    found = {}
    for root, dirs, files in os.walk(path):
        for n in dirs + files:
            p = Path(root) / n
            st = p.lstat()
            found[str(p.relative_to(path))] = (st.st_mode, st.st_size, st.st_ino,
                                               os.readlink(p) if p.is_symlink() else None)
    return found


@pytest.fixture
def whole(store, tmp_path, capsys) -> Path:
    out = tmp_path / "out"
    rc, _, err = build(capsys, store, out)
    assert rc == 0, err
    return out


@pytest.mark.parametrize("flags", [
    ["--from-time", "2023-11-15T03:00:00Z", "--to-time", "2023-11-15T01:00:00Z"],
    ["--from-offset", "5000000", "--to-offset", "100"],
    ["--from-time", "1700003600000", "--to-time", "1700003600000"],
], ids=["inverted-time", "inverted-offset", "empty-time"])
@pytest.mark.parametrize("overwrite", [[], ["--overwrite"]], ids=["plain", "overwrite"])
def test_an_inverted_range_is_a_usage_error_before_anything_is_read(store, whole, capsys, flags, overwrite):
    before = tree(whole)
    rc, out, err = build(capsys, store, whole, *flags, *overwrite)
    assert rc == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and "selects nothing" in err
    assert tree(whole) == before


@pytest.mark.parametrize("flags", [["--from-time", "2030-01-01T00:00:00Z"], ["--from-offset", "900000000"],
                                   ["--to-time", "2000-01-01T00:00:00Z"]], ids=["after-the-log", "past-the-end",
                                                                              "before-the-log"])
@pytest.mark.parametrize("engine", [["--in-process"], []], ids=["in-process", "picked"])
def test_a_range_that_selects_no_message_commits_nothing_even_with_overwrite(store, whole, capsys, flags, engine):
    before = tree(whole)
    rc, _, err = build(capsys, store, whole, *flags, "--overwrite")
    assert rc == 2
    assert "EmptySelectionError" in err and "selects no message" in err and "nothing was committed" in err
    assert tree(whole) == before


def test_a_range_that_selects_nothing_creates_nothing_in_a_new_output(store, tmp_path, capsys):
    out = tmp_path / "new" / "out"
    rc, _, err = build(capsys, store, out, "--from-time", "2030-01-01T00:00:00Z")
    assert rc == 2 and "selects no message" in err
    assert not (tmp_path / "new").exists()


def test_a_slice_over_a_whole_build_needs_overwrite(store, whole, capsys):
    before = tree(whole)
    slice_ = ["--from-time", str(1_700_000_000_000 + HOUR), "--to-time", str(1_700_000_000_000 + 2 * HOUR)]
    rc, _, err = build(capsys, store, whole, *slice_)
    assert rc == 2 and "--overwrite" in err and "range" in err
    assert tree(whole) == before
    rc, _, err = build(capsys, store, whole, *slice_, "--overwrite")
    assert rc == 0, err
    manifest = json.loads((whole / "_manifest.json").read_text())
    assert manifest["filters"] == {"from_time_ms": 1_700_000_000_000 + HOUR, "to_time_ms": 1_700_000_000_000 + 2 * HOUR}
    # ... and the whole build back over the slice needs it too.
    assert build(capsys, store, whole)[0] == 2
    assert build(capsys, store, whole, "--overwrite")[0] == 0


@pytest.mark.parametrize("change", [["--window", "30m"], ["--hash-slots", "103"], ["--index-num", "3000"]])
def test_another_window_or_size_over_a_build_needs_overwrite(store, whole, capsys, change):
    before = tree(whole)
    rc, _, err = build(capsys, store, whole, *change)
    assert rc == 2 and "another kind" in err
    assert tree(whole) == before
    assert build(capsys, store, whole, *change, "--overwrite")[0] == 0


def test_another_commitlog_over_a_build_needs_overwrite(store, whole, tmp_path, capsys):
    other = tmp_path / "other"
    assert cli.main(["gen", "--out", str(other), *GEN, "--seed", "2"]) == 0
    capsys.readouterr()
    rc, _, err = build(capsys, other, whole)
    assert rc == 2 and "CommitLog" in err and str(store) in err
    assert build(capsys, other, whole, "--overwrite")[0] == 0


def test_a_nightly_rebuild_of_a_grown_log_needs_no_flag(tmp_path, capsys):
    """Same store, same output, same settings: no flag, even after a segment was added and the oldest
    removed (reproducer of Must-show 2)."""
    store = tmp_path / "store"
    assert cli.main(["gen", "--out", str(store), *GEN]) == 0
    capsys.readouterr()
    segments = sorted((store / "commitlog").iterdir())
    assert len(segments) >= 4
    held = tmp_path / "held"
    held.mkdir()
    shutil.move(str(segments[-1]), held / segments[-1].name)  # tonight's log lacks the newest segment
    out = tmp_path / "out"
    first = build(capsys, store, out)
    assert first[0] == 0, first[2]
    shutil.move(str(held / segments[-1].name), segments[-1])  # the broker wrote a segment...
    segments[0].unlink()  # ... and deleted its oldest
    rc, _, err = build(capsys, store, out)
    assert rc == 0, err
    manifest = json.loads((out / "_manifest.json").read_text())
    assert [s["name"] for s in manifest["segments"]] == [p.name for p in segments[1:]]


def test_a_relative_and_an_absolute_path_name_the_same_log(store, whole, capsys, monkeypatch):
    monkeypatch.chdir(store.parent)
    assert build(capsys, "store", whole)[0] == 0
    assert build(capsys, store / "commitlog", whole)[0] == 0


@pytest.mark.parametrize("where", ["store", "store/index", "store/index/deeper", "store/commitlog"])
def test_an_output_in_a_broker_store_is_refused_and_nothing_is_created(store, tmp_path, capsys, where):
    broker = tmp_path / "broker"
    shutil.copytree(store, broker / "store")
    (broker / "store" / "index").mkdir()
    (broker / "store" / "index" / "20231114221320000").write_bytes(b"\0" * 64)
    before = tree(broker)
    rc, out, err = build(capsys, broker / "store", broker / where)
    assert rc == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and "broker's store" in err and "backfill" in err
    assert tree(broker) == before  # not even a lock file


@pytest.mark.parametrize("marker", ["consumequeue/", "checkpoint", "abort", "lock", "index/20231114221320000"])
def test_each_broker_file_marks_a_store(store, tmp_path, capsys, marker):
    broker = tmp_path / "b"
    path = broker / marker.rstrip("/")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.mkdir() if marker.endswith("/") else path.write_bytes(b"x")
    before = tree(broker)
    rc, _, err = build(capsys, store, broker / "out")
    assert rc == 2 and "broker's store" in err
    assert tree(broker) == before


def test_a_directory_with_other_files_is_not_an_output(store, tmp_path, capsys):
    junk = tmp_path / "junk"
    junk.mkdir()
    (junk / "notes.txt").write_text("mine")
    rc, _, err = build(capsys, store, junk)
    assert rc == 2 and "not a rocketidx output" in err and "notes.txt" in err
    assert sorted(p.name for p in junk.iterdir()) == ["notes.txt"]


def test_a_killed_first_build_leaves_an_output_a_build_accepts(store, tmp_path, capsys):
    out = tmp_path / "out"
    (out / ".v-0123456789ab" / "index").mkdir(parents=True)
    (out / ".lock").touch()
    (out / "_timeindex").mkdir()
    rc, _, err = build(capsys, store, out)
    assert rc == 0, err
    assert not (out / ".v-0123456789ab").exists()


def test_a_time_index_in_a_broker_store_is_refused(store, whole, tmp_path, capsys):
    broker = tmp_path / "broker"
    shutil.copytree(store, broker)
    before = tree(broker)
    rc, _, err = build(capsys, store, tmp_path / "slice", "--from-time", "1700003600000",
                       "--time-index", broker / "tix")
    assert rc == 2 and "--time-index" in err and "broker's store" in err
    assert tree(broker) == before
    rc, _, err = run(capsys, "timeindex", "--commitlog", store, "--out", broker / "tix")
    assert rc == 2 and "broker's store" in err
    assert tree(broker) == before


def test_a_slice_reads_a_whole_builds_time_index_from_its_own_output(store, whole, tmp_path, capsys):
    rc, out, err = build(capsys, store, tmp_path / "slice", "--from-time", "1700003600000", "--to-time",
                         "1700007200000", "--time-index", whole / "_timeindex", "--json")
    assert rc == 0, err
    assert json.loads(out)["time_index"].endswith("blocks")


@pytest.fixture
def own_signal_handlers():
    """A job's main() installs its SIGINT/SIGTERM handlers in this process: pytest gets its own back."""
    import rocketidx.interrupts as interrupts
    yield
    interrupts.uninstall()


def test_the_nightly_job_applies_the_same_rules_before_spark_starts(store, whole, capsys, own_signal_handlers):
    import importlib.util
    spec = importlib.util.spec_from_file_location("nightly", Path(__file__).parents[3] / "jobs" / "nightly_rebuild.py")
    job = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(job)
    before = tree(whole)
    assert job.main(["--commitlog", str(store), "--out", str(whole), "--from-offset", "5", "--to-offset", "1"]) == 2
    assert job.main(["--commitlog", str(store), "--out", str(whole), "--window", "5m", *SIZES]) == 2
    assert job.main(["--commitlog", str(store), "--out", str(store / "index")]) == 2
    err = capsys.readouterr().err
    assert "selects nothing" in err and "another kind" in err and "broker's store" in err
    assert tree(whole) == before and not (store / "index").exists()
