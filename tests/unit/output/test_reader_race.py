"""Issue 12, point 4: a reader never fails, and never mixes two outputs, while builds replace them.

One thread rebuilds the same output 20 times, alternating two builds whose files differ (all messages in
1 h windows, and only the second hour's in 20 min windows with other sizes, so names, sizes and answers
all change); the test thread meanwhile opens the output and
queries keys, at least 500 times. Every answer must be exactly one of the two outputs' answers, and no
call may raise."""
from __future__ import annotations

import threading

from rocketidx.build.in_process import build_index
from rocketidx.build.in_process import build_index_range
from rocketidx.sample.generate import GenConfig, generate_store
from rocketidx.config import BuildConfig
from rocketidx.query.lookup import open_index, query_offsets
from splitread import core_read

START = 1_700_000_000_000
CONFIGS = [BuildConfig(hash_slot_num=101, index_num=900, window_ms=3_600_000, timezone="UTC", check_crc=False),
           BuildConfig(hash_slot_num=53, index_num=500, window_ms=1_200_000, timezone="UTC", check_crc=False)]


def _build(store, out, i):
    if i == 0:
        build_index(store, out, CONFIGS[0], time_index=None)
    else:
        build_index_range(store, out, CONFIGS[1], from_time_ms=START + 3_600_000, time_index=None)


def _answers(out, keys):
    files = open_index(out)
    return tuple(tuple(query_offsets(files, t, k)) for t, k in keys)


def test_queries_racing_builds_see_one_output_or_the_other(tmp_path):
    store = tmp_path / "store"
    generate_store(store, GenConfig(messages=4000, segment_bytes=512 * 1024, span_ms=2 * 3_600_000, seed=9))
    table, _ = core_read(store / "commitlog")
    rows = [r for r in table.slice(0, 400).to_pylist() if r["keys"]][:4] + \
        [r for r in table.slice(3000, 400).to_pylist() if r["keys"]][:4]
    keys = [(r["topic"], r["keys"].split(" ")[0]) for r in rows]
    expected = set()
    for i in range(2):
        _build(store, tmp_path / f"ref{i}", i)
        expected.add(_answers(tmp_path / f"ref{i}", keys))
    assert len(expected) == 2, "the two outputs must answer differently, or mixing could not be seen"
    out = tmp_path / "out"
    _build(store, out, 0)
    done, errors = threading.Event(), []

    def builds():
        try:
            for i in range(20):
                _build(store, out, (i + 1) % 2)
        except BaseException as e:  # reported by the test thread
            errors.append(e)
        finally:
            done.set()

    t = threading.Thread(target=builds)
    t.start()
    queries, wrong, failed = 0, 0, []
    while not done.is_set() or queries < 500:
        try:
            got = _answers(out, keys)
            wrong += got not in expected
        except Exception as e:
            failed.append(repr(e))
        queries += 1
    t.join()
    assert not errors
    assert queries >= 500 and failed == [] and wrong == 0, (queries, failed[:3], wrong)
