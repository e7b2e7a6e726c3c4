"""The in-process engine on every core (issue 35): ``workers`` processes, each a share of the windows, give the
files and manifest one process gives: every golden case byte for byte, and a generated store's index,
ConsumeQueues, light queues and time index."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from refdata import expected_files, golden_params, load_case
import rocketidx.layout as L
from rocketidx import cli
from rocketidx.commitlog.readers import CommitLogReader
from rocketidx.commitlog.segments import list_segments
from rocketidx.build.in_process import build_index
from rocketidx.config import BuildConfig, LightQueues


def tree(root: Path) -> dict[str, bytes]:
    """Every file of an output by its path under the committed version (the version's own name differs)."""
    base = (root / "current").resolve()
    return {str(p.relative_to(base)): p.read_bytes() for p in base.rglob("*") if p.is_file()}


@pytest.mark.parametrize("case", golden_params())
def test_every_golden_case_is_rocketmqs_bytes_with_two_workers(case, tmp_path):
    c = load_case(case)
    config = BuildConfig(hash_slot_num=c["hashSlotNum"], index_num=c["indexNum"], window_ms=c["windowMillis"],
                         timezone="UTC")
    manifest, _ = build_index(case / "commitlog", tmp_path / "out", config, workers=2)
    got = [tmp_path / "out" / "index" / f["name"] for f in manifest["files"]]
    assert [g.read_bytes() for g in got] == [e.read_bytes() for e in expected_files(case)]


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    s = tmp_path_factory.mktemp("workers") / "store"
    assert cli.main(["gen", "--out", str(s), "--messages", "20000", "--segment-bytes", "1048576", "--topics", "4",
                     "--span", "6h", "--start-ms", "1700000000000", "--share-lmq", "0.2"]) == 0
    return s


@pytest.mark.parametrize("workers", [2, 3])
def test_a_store_built_by_workers_equals_one_process(store, tmp_path, workers):
    config = BuildConfig(hash_slot_num=211, index_num=4000, window_ms=1_800_000, timezone="UTC",
                         targets=("index", "consumequeue"), light_queues=LightQueues(True, "5.2"))
    one, _ = build_index(store, tmp_path / "one", config)
    many, summary = build_index(store, tmp_path / "many", config, workers=workers)
    assert summary.files == len(one["files"]) > workers
    files = tree(tmp_path / "one")
    assert any(f.startswith("consumequeue/%LMQ%") for f in files) and any(f.startswith("index/") for f in files)
    assert tree(tmp_path / "many") == files
    assert json.loads((tmp_path / "many" / "_manifest.json").read_text())["files"] == one["files"]


def test_the_command_takes_workers_and_refuses_nonsense(store, tmp_path, capsys):
    assert cli.main(["build", "--commitlog", str(store), "--out", str(tmp_path / "o"), "--in-process", "--workers", "2",
                     "--targets", "index,consumequeue", "--timezone", "UTC", "--window", "30m"]) == 0
    capsys.readouterr()
    with pytest.raises(SystemExit):
        cli.main(["build", "--commitlog", str(store), "--out", str(tmp_path / "p"), "--workers", "0"])
    assert "--workers" in capsys.readouterr().err
    assert cli.main(["build", "--commitlog", str(store), "--out", str(tmp_path / "q"), "--workers", "2",
                     "--master", "local[1]"]) == 2
    assert "--workers" in capsys.readouterr().err


def test_a_log_out_of_time_order_gives_one_processs_files(tmp_path, caplog):
    """Clock steps back across windows: tasks read entries of windows others own and are run again with them;
    the files are one pass's all the same."""
    store = tmp_path / "store"
    assert cli.main(["gen", "--out", str(store), "--messages", "20000", "--segment-bytes", "1048576", "--span", "6h",
                     "--start-ms", "1700000000000", "--clock-steps", "30", "--clock-back", "5h"]) == 0
    config = BuildConfig(hash_slot_num=211, index_num=4000, window_ms=1_800_000, timezone="UTC",
                         targets=("index", "consumequeue"))
    build_index(store, tmp_path / "one", config)
    with caplog.at_level("INFO", logger="rocketidx"):
        build_index(store, tmp_path / "many", config, workers=2)
    assert "out of time order: rerunning" in caplog.text
    assert tree(tmp_path / "many") == tree(tmp_path / "one")


def test_a_read_that_stops_early_gives_one_processs_files(tmp_path, caplog):
    """A corrupt record mid-log ends reading there, and a later task already wrote what comes after it: the plan
    gives way, one task reads the log, and the files are one pass's."""
    store = tmp_path / "store"
    assert cli.main(["gen", "--out", str(store), "--messages", "20000", "--segment-bytes", "1048576", "--span", "6h",
                     "--start-ms", "1700000000000"]) == 0
    seg = sorted((store / "commitlog").iterdir())[3]
    recs = np.concatenate([r for s, _, r in CommitLogReader(list_segments(store / "commitlog")).record_chunks()
                           if s.path == str(seg)])
    data = bytearray(seg.read_bytes())
    data[int(recs[len(recs) // 2, L.REC_POS]) + 4] ^= 0xFF  # the magic code of a record mid-segment
    seg.write_bytes(bytes(data))
    config = BuildConfig(hash_slot_num=211, index_num=4000, window_ms=1_800_000, timezone="UTC",
                         targets=("index", "consumequeue"))
    _, one = build_index(store, tmp_path / "one", config)
    with caplog.at_level("INFO", logger="rocketidx"):
        _, many = build_index(store, tmp_path / "many", config, workers=2)
    assert "gave way on 2 tasks; one task reads the log" in caplog.text
    assert one.stop == many.stop and one.stop["segment"] == seg.name
    assert tree(tmp_path / "many") == tree(tmp_path / "one")


def test_a_build_on_workers_reports_progress_as_tasks_finish(store, tmp_path):
    seen: list[int] = []
    config = BuildConfig(hash_slot_num=211, index_num=4000, window_ms=1_800_000, timezone="UTC")
    build_index(store, tmp_path / "out", config, workers=2, progress=lambda r: seen.append(r.bytes_read))
    segments = list_segments(store / "commitlog")
    assert len(seen) >= 2 and seen == sorted(seen) and seen[-1] == sum(s.size for s in segments)


def test_the_pool_returns_results_in_call_order_whatever_order_it_starts_them_in():
    from rocketidx.build.pool import _run
    finished = []
    calls = [(2, i) for i in range(7)]
    out = _run(2, pow, calls, finished.append, sizes=[1, 50, 3, 70, 2, 9, 4])
    assert out == [2 ** i for i in range(7)]
    assert sorted(finished) == list(range(7))
    assert _run(2, pow, calls) == out


def test_a_build_never_imports_pandas(store, tmp_path):
    """pyarrow imports pandas the first time ``pa.array`` or ``to_numpy`` is called (0.2-0.4 s a process, each pool
    worker included): the build converts through rocketidx.arrays instead. Both paths, in a fresh interpreter:
    the one pass, and the plan's tasks run here (what each pool worker runs), with queues and light queues."""
    import subprocess
    import sys
    pytest.importorskip("pandas")
    code = f"""
import sys
from rocketidx.build.in_process import build_index, build_index_range
from rocketidx.config import BuildConfig, LightQueues
config = BuildConfig(hash_slot_num=211, index_num=4000, window_ms=1_800_000, timezone="UTC",
                     targets=("index", "consumequeue"), light_queues=LightQueues(True, "5.2"))
build_index({str(store)!r}, {str(tmp_path / "one")!r}, config)
build_index_range({str(store)!r}, {str(tmp_path / "tasks")!r}, config)
print(sorted(m for m in ("pandas", "pyarrow.compute") if m in sys.modules))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "pandas" not in out.splitlines()[-1], out


@pytest.mark.parametrize("refusal", ["missing", "ENOSYS"])
def test_queue_files_are_the_same_where_the_kernel_cannot_copy_pieces(store, tmp_path, monkeypatch, refusal):
    """Queue files are assembled from the tasks' pieces by copy_file_range; where the system has no such call, or
    refuses it for these files, the pieces are read and written instead: the same bytes."""
    import errno
    import os
    from rocketidx.build.in_process import build_index_range
    config = BuildConfig(hash_slot_num=211, index_num=4000, window_ms=1_800_000, timezone="UTC",
                         targets=("index", "consumequeue"))
    build_index_range(store, tmp_path / "kernel", config)
    if refusal == "missing":
        monkeypatch.delattr(os, "copy_file_range")
    else:
        def refuse(*a):
            raise OSError(errno.ENOSYS, "no copy_file_range here")
        monkeypatch.setattr(os, "copy_file_range", refuse)
    build_index_range(store, tmp_path / "through", config)
    files = tree(tmp_path / "kernel")
    assert any(f.startswith("consumequeue/") for f in files)
    assert tree(tmp_path / "through") == files
