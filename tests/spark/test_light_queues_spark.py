"""Light queues on Spark (issue 34): the direct plan (one read for the index and every queue), the split-wise
queue plan and a range write the same light-queue files as the in-process build, at a small split size."""
from __future__ import annotations

import os
from dataclasses import replace

import pytest

from rocketidx.build.in_process import build_index
from rocketidx.config import BuildConfig, LightQueues
from rocketidx.sample.generate import GenConfig, generate_store
from rocketidx.spark.build import build_index_spark

pytestmark = pytest.mark.spark


def tree(root) -> dict[str, bytes]:
    out = {}
    for d, _, names in os.walk(root):
        for n in names:
            p = os.path.join(d, n)
            out[os.path.relpath(p, root)] = open(p, "rb").read()
    return out


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    s = tmp_path_factory.mktemp("lmq") / "store"
    generate_store(s, GenConfig(messages=6000, segment_bytes=256 * 1024, share_lmq=0.3, lmq_queues=11, seed=4,
                                clock_steps=2, clock_back_ms=3_600_000))
    return s


@pytest.mark.parametrize("targets, plan", [(("index", "consumequeue"), {}), (("consumequeue",), {}),
                                           (("index", "consumequeue"), {"from_offset": 0})],
                         ids=["direct", "queues-alone", "range"])
def test_spark_writes_the_in_process_light_queues(spark, tmp_path, store, targets, plan):
    config = BuildConfig(window_ms=0, timezone="UTC", targets=targets, cq_file_size=20 * 128,
                         light_queues=LightQueues(True, "5.2"))
    build_index(store, tmp_path / "core", config)
    build_index_spark(store, tmp_path / "spark", config, spark=spark, split_bytes=32 * 1024, time_index=None, **plan)
    core, on_spark = tree(tmp_path / "core" / "consumequeue"), tree(tmp_path / "spark" / "consumequeue")
    assert sum(name.startswith("%LMQ%") for name in core) >= 11 * 2  # every light queue, over several files
    assert on_spark == core
    plain = tree(build_index(store, tmp_path / "plain", replace(config, light_queues=None)) and
                 tmp_path / "plain" / "consumequeue")
    assert {k: v for k, v in core.items() if not k.startswith("%LMQ%")} == plain  # the other queues unchanged
