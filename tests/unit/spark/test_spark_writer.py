"""The mapInArrow writer on its own (no JVM): fed a partition's sorted shuffle rows, it writes the core's
files into its attempt directory, locally or through pyarrow.fs, and refuses input it cannot trust."""
from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from refdata import GOLDEN, load_case

from rocketidx.build.in_process import build_index
from rocketidx.config import BuildConfig
from rocketidx.errors import RocketIdxError
from rocketidx.spark.sources.commitlog import SourceOptions, plan_partitions, read_split
from rocketidx.spark.writer import WriterParams, write_partition

G1 = GOLDEN / "g1-basic-hourly"


def shuffle_rows(case, config: BuildConfig, split: int) -> tuple[pa.Table, int]:
    """What the shuffle would hand one writer partition holding every window: all rows, sorted."""
    opts = SourceOptions(path=str(case), output="shuffle", split_bytes=split, window_ms=config.window_ms)
    parts = plan_partitions(opts)
    t = pa.Table.from_batches([b for p in parts for b in read_split(p, opts)])
    info = t.filter(pc.is_null(t["window"]))
    msgs = t.filter(pc.is_valid(t["window"])).sort_by([("window", "ascending"), ("phy_offset", "ascending")])
    return pa.concat_tables([info, msgs]), len(parts)


@pytest.mark.parametrize("remote", [False, True], ids=["local", "pyarrow.fs"])
def test_writes_the_core_files_into_its_attempt_directory(tmp_path, remote):
    c = load_case(G1)
    config = BuildConfig(c["hashSlotNum"], c["indexNum"], c["windowMillis"], "UTC")
    build_index(G1 / "commitlog", tmp_path / "core", config)
    expected = json.loads((tmp_path / "core" / "_manifest.json").read_text())["files"]
    rows, n_splits = shuffle_rows(G1, config, 100_003)
    staging = tmp_path / "staging"
    staging.mkdir()
    params = WriterParams(f"file://{staging}" if remote else str(staging), config.hash_slot_num, config.index_num,
                          config.window_ms, n_splits)
    out = pa.Table.from_batches(list(write_partition(iter(rows.to_batches(max_chunksize=1000)), params)))
    files = [r for r in out.to_pylist() if r["kind"] == "file"]
    assert [(f["window_id"], f["seq"]) for f in files] == [(f["window_id"], f["seq"]) for f in expected]
    for got, want in zip(files, expected):
        assert (staging / got["task_dir"] / got["name"]).read_bytes() == \
            (tmp_path / "core" / "index" / want["name"]).read_bytes()
    assert sum(1 for r in out.to_pylist() if r["kind"] == "range") == n_splits
    assert [r["kind"] for r in out.to_pylist()][-1] == "task"


def test_refuses_windows_out_of_order(tmp_path):
    config = BuildConfig(97, 400, 3_600_000, "UTC")
    rows, n_splits = shuffle_rows(G1, config, 1 << 20)
    info = rows.filter(pc.is_null(rows["window"]))
    entries = rows.filter(pc.is_valid(rows["window"]))
    shuffled = pa.concat_tables([info, entries.slice(entries.num_rows // 2), entries.slice(0, entries.num_rows // 2)])
    params = WriterParams(str(tmp_path), 97, 400, 3_600_000, n_splits)
    with pytest.raises(RocketIdxError, match="out of order"):
        list(write_partition(iter(shuffled.to_batches()), params))
    assert not any(tmp_path.glob("_tasks/*/*")), "a failed attempt removes its files"


def test_refuses_to_write_without_every_split_info(tmp_path):
    config = BuildConfig(97, 400, 3_600_000, "UTC")
    rows, n_splits = shuffle_rows(G1, config, 1 << 20)
    params = WriterParams(str(tmp_path), 97, 400, 3_600_000, n_splits + 1)
    with pytest.raises(RocketIdxError, match="split infos"):
        list(write_partition(iter(rows.to_batches()), params))
