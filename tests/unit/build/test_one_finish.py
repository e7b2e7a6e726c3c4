"""Every build ends in the one finish (issue 33): whatever the plan, in process whole or a range, a
backfill's tail, the queues alone, its files are validated, counted and committed by
:func:`rocketidx.build.finish.finish_build`, and its files are RocketMQ's byte for byte. (Spark's plans:
tests/spark/test_one_finish_spark.py.)"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from refdata import GOLDEN, case_config, expected_files
from rocketidx.build.in_process import build_index, build_index_range
from rocketidx.commitlog.segments import list_segments
from rocketidx.config import BuildConfig
from rocketidx.output.manifest import Manifest

CASE = GOLDEN / "g1-basic-hourly"  # clean end of data, files rolled inside windows


def index_bytes(out: Path) -> list[bytes]:
    """The output's IndexFiles in window and sequence order."""
    files = sorted(Manifest.read(out).files, key=lambda f: (f.window_start_ms, f.seq))
    return [(out / "index" / f.name).read_bytes() for f in files]


def test_the_one_pass_build_ends_in_the_finish(tmp_path, finish_passes):
    build_index(CASE / "commitlog", tmp_path / "out", case_config(CASE), time_index=None)
    assert finish_passes == {"finish": 1, "commit": 1}
    assert index_bytes(tmp_path / "out") == [p.read_bytes() for p in expected_files(CASE)]


def test_the_in_process_range_build_ends_in_the_finish(tmp_path, finish_passes):
    build_index_range(CASE / "commitlog", tmp_path / "out", case_config(CASE), from_offset=0, time_index=None)
    assert finish_passes == {"finish": 1, "commit": 1}
    assert index_bytes(tmp_path / "out") == [p.read_bytes() for p in expected_files(CASE)]


def test_a_backfills_tail_and_a_queue_build_end_in_the_finish(tmp_path, finish_passes):
    second = list_segments(CASE / "commitlog")[1].base_offset
    _, summary = build_index(CASE / "commitlog", tmp_path / "tail", case_config(CASE), start_offset=second,
                             time_index=None)
    assert finish_passes == {"finish": 1, "commit": 1}
    assert summary.bytes_read == summary.bytes_scanned > 0
    size = json.loads((CASE / "expected" / "cq-manifest.json").read_text())["mappedFileSizeConsumeQueue"]
    build_index(CASE / "commitlog", tmp_path / "queues", BuildConfig(targets="consumequeue", cq_file_size=size),
                time_index=None)
    assert finish_passes == {"finish": 2, "commit": 2}
    expected = CASE / "expected" / "consumequeue"
    for f in (p for p in expected.rglob("*") if p.is_file()):
        assert (tmp_path / "queues" / "consumequeue" / f.relative_to(expected)).read_bytes() == f.read_bytes()
