"""Spark's plans end in the one finish too (issue 33; the in-process plans: tests/unit/build/test_one_finish.py):
the direct plan, whole and a range, and the shuffle plan are validated and committed by
:func:`rocketidx.build.finish.finish_build` once each, with RocketMQ's bytes."""
from __future__ import annotations

import pytest

from refdata import GOLDEN, case_config, expected_files
from rocketidx.output.manifest import Manifest
from rocketidx.spark.build import build_index_spark

pytestmark = pytest.mark.spark

CASE = GOLDEN / "g1-basic-hourly"


@pytest.mark.parametrize("plan", [dict(), dict(from_offset=0), dict(shuffle=True)], ids=["whole", "range", "shuffle"])
def test_a_spark_build_ends_in_the_finish(spark, tmp_path, finish_passes, plan):
    build_index_spark(CASE / "commitlog", tmp_path / "out", case_config(CASE), spark=spark, split_bytes=64 * 1024,
                      time_index=None, **plan)
    assert finish_passes == {"finish": 1, "commit": 1}
    files = sorted(Manifest.read(tmp_path / "out").files, key=lambda f: (f.window_start_ms, f.seq))
    assert [(tmp_path / "out" / "index" / f.name).read_bytes() for f in files] == \
        [p.read_bytes() for p in expected_files(CASE)]
