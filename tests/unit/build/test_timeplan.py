"""The direct build's plan and tasks without Spark: where windows are, who reads what, and strays.

The plan only decides who reads which bytes, so the tests hold it to that: ranges tile the read at
record starts, a log in time order has no strays, a log whose clock stepped back has exactly the strays
a full read finds, and tasks run one after another (with the strays rerun) give the in-process bytes.
"""
from __future__ import annotations

import os

import numpy as np
import pytest

from refdata import GOLDEN_CASES, load_case
from splitread import same_build

from rocketidx.build.direct_task import WriterParams, run_task, strays_of
from rocketidx.build.finish import validate
from rocketidx.build.in_process import build_index
import rocketidx.build.plan as plan
from rocketidx.build.plan import group_ranges, plan_windows, rerun_tasks, task_count, window_of
from rocketidx.build.results import ranges_of
from rocketidx.sample.generate import GenConfig, generate_store
from rocketidx.commitlog.records import scan_records
from rocketidx.commitlog.segments import list_segments, open_segment
from rocketidx.commitlog.splits import SplitSpec, resolve_stops
from rocketidx.config import BuildConfig
import rocketidx.layout as L
from rocketidx.output.manifest import INDEX_DIR


def _records(segments):
    """(absolute position, store time) of every structurally valid record, by a full walk."""
    pos, ts = [], []
    for s in segments:
        for recs in scan_records(open_segment(s), s, 0, s.size, check_crc=False):
            pos.append(recs[:, L.REC_POS] + s.base_offset)
            ts.append(recs[:, L.REC_STORE_TS])
    return np.concatenate(pos), np.concatenate(ts)


def _misplaced(ranges, pos, ts, window_ms):
    starts = np.array([r.start for r in ranges])
    owner = np.array([r.window for r in ranges])[np.searchsorted(starts, pos, side="right") - 1]
    return int((owner != np.array([window_of(int(t), window_ms) for t in ts])).sum())


@pytest.fixture(scope="module")
def skewed(tmp_path_factory):
    """A store whose clock steps back by 70 minutes in three places (so records cross 1 h windows)."""
    store = tmp_path_factory.mktemp("skewed")
    generate_store(store, GenConfig(messages=4000, segment_bytes=256 * 1024, body_bytes=200, span_ms=6 * 3_600_000,
                                    clock_steps=3, clock_back_ms=70 * 60_000, seed=3))
    return store


@pytest.mark.parametrize("case", GOLDEN_CASES, ids=lambda c: c.name)
def test_ranges_tile_the_read_at_record_starts(case):
    segments = list_segments(case / "commitlog")
    window_ms = load_case(case)["windowMillis"]
    ranges = plan_windows(segments, SplitSpec(), window_ms)
    assert ranges[0].start == segments[0].base_offset
    assert ranges[-1].end == segments[-1].end_offset
    assert all(a.end == b.start for a, b in zip(ranges, ranges[1:]))
    pos, _ = _records(segments)
    assert {r.start for r in ranges[1:]} <= set(pos.tolist()), "every cut is a record start"


def test_a_log_in_time_order_has_no_strays(tmp_path):
    generate_store(tmp_path, GenConfig(messages=3000, segment_bytes=128 * 1024, span_ms=5 * 3_600_000))
    segments = list_segments(tmp_path)
    ranges = plan_windows(segments, SplitSpec(), 3_600_000)
    pos, ts = _records(segments)
    assert _misplaced(ranges, pos, ts, 3_600_000) == 0
    assert [r.window for r in ranges] == sorted({window_of(int(t), 3_600_000) for t in ts})


def test_a_zero_tail_is_searched_once_for_all_the_windows_before_it(tmp_path, monkeypatch):
    """The last segment is mostly zero tail: every window's bisection would search it (megabytes a probe). The
    plan remembers where no record starts, and its cuts stay each window's first record."""
    generate_store(tmp_path, GenConfig(messages=6000, segment_bytes=48 * 1024**2, span_ms=12 * 3_600_000))
    segments = list_segments(tmp_path)
    pos, ts = _records(segments)
    data_end = int(pos[-1]) + 4096  # past the last record, which is far shorter
    tail = []
    probe = plan._Log.probe

    def counted(self, i, pos, limit):
        if self.segments[i].base_offset + pos > data_end:
            tail.append(min(limit, pos + plan.SEARCH_BYTES) - pos)  # the bytes it searches
        return probe(self, i, pos, limit)
    monkeypatch.setattr(plan._Log, "probe", counted)
    ranges = plan_windows(segments, SplitSpec(), 3_600_000)
    windows = ts // 3_600_000
    firsts = pos[np.r_[0, np.flatnonzero(np.diff(windows)) + 1]]
    assert [r.start for r in ranges[1:]] == firsts[1:].tolist()
    assert [r.window for r in ranges] == sorted(set(windows.tolist()))
    assert len(ranges) >= 12 and 0 < sum(tail) <= 6 * plan.SEARCH_BYTES, (len(tail), sum(tail))


def test_segments_a_window_passes_over_are_not_bisected_and_the_cuts_stay_first_records(tmp_path, monkeypatch):
    """A window spans several segments: only the segment its next boundary lies in is bisected, the others are
    passed over on their tails (the next segment's head and the last records still before the boundary)."""
    generate_store(tmp_path, GenConfig(messages=6000, segment_bytes=64 * 1024, span_ms=3 * 3_600_000))
    segments = list_segments(tmp_path)
    assert len(segments) >= 12
    pos, ts = _records(segments)
    bisected = []
    first_at_or_after = plan._Log.first_at_or_after

    def counted(self, i, lo, target):
        bisected.append(i)
        return first_at_or_after(self, i, lo, target)
    monkeypatch.setattr(plan._Log, "first_at_or_after", counted)
    ranges = plan_windows(segments, SplitSpec(), 3_600_000)
    windows = ts // 3_600_000
    firsts = pos[np.r_[0, np.flatnonzero(np.diff(windows)) + 1]]
    assert [r.start for r in ranges[1:]] == firsts[1:].tolist()
    assert len(bisected) <= 2 * (len(ranges) - 1), (bisected, len(segments))


def test_the_plan_respects_an_offset_range(tmp_path):
    generate_store(tmp_path, GenConfig(messages=3000, segment_bytes=128 * 1024, span_ms=5 * 3_600_000))
    segments = list_segments(tmp_path)
    lo, hi = segments[1].base_offset + 1000, segments[-2].base_offset + 5000
    ranges = plan_windows(segments, SplitSpec(from_offset=lo, to_offset=hi), 3_600_000)
    assert (ranges[0].start, ranges[-1].end) == (lo, hi)


@pytest.mark.parametrize("tasks", [1, 2, 3, 5, 100])
def test_groups_are_consecutive_nonempty_and_cover_every_piece(skewed, tasks):
    segments = list_segments(skewed)
    ranges = plan_windows(segments, SplitSpec(), 3_600_000)
    groups = group_ranges(segments, ranges, tasks)
    assert len(groups) == min(tasks, len(ranges))
    pieces = [p for g in groups for p in g.pieces]
    assert [p.index for p in pieces] == list(range(len(pieces)))
    covered = sum(p.end - p.start for p in pieces)
    assert covered == ranges[-1].end - ranges[0].start
    assert task_count(ranges, 1, None, 2) == len(ranges)
    assert task_count(ranges, 2**40, None, 2) == 2


def _run_all(store, out, config, tasks_wanted):
    """The direct build's tasks run one after another in this process, strays rerun, then validated."""
    segments = list_segments(store)
    spec = SplitSpec()
    tasks = group_ranges(segments, plan_windows(segments, spec, config.window_ms), tasks_wanted)
    params = WriterParams(str(out), config.hash_slot_num, config.index_num, config.window_ms, 0)
    results = [run_task(t, spec, params, f"_tasks/a{t.index}", 0) for t in tasks]
    positions, windows, count, complete = strays_of(results)
    assert complete
    again = rerun_tasks(tasks, positions, windows, segments) if count else []
    redone = {t.index for t in again}
    results = [r.without_files() if r.task in redone else r for r in results]
    results += [run_task(t, spec, params, f"_tasks/b{t.index}", 0, report_ranges=False) for t in again]
    resolved = resolve_stops(ranges_of(results))
    files, _, _ = validate(results, resolved, config)
    return files, count, results


def test_strays_are_the_records_a_full_read_finds_outside_their_range(skewed):
    segments = list_segments(skewed)
    ranges = plan_windows(segments, SplitSpec(), 3_600_000)
    pos, ts = _records(segments)
    assert _misplaced(ranges, pos, ts, 3_600_000) > 0, "the clock steps must cross window starts"


@pytest.mark.parametrize("tasks", [1, 3, 7])
def test_tasks_with_strays_rerun_give_the_in_process_files(skewed, tmp_path, tasks):
    # 150 items per file: windows roll over into several files, seeded from their predecessors.
    config = BuildConfig(hash_slot_num=31, index_num=150, window_ms=3_600_000, timezone="UTC")
    build_index(skewed, tmp_path / "core", config)
    core_dir = tmp_path / "core" / INDEX_DIR
    files, strays, results = _run_all(skewed, tmp_path / "direct", config, tasks)
    if tasks == 7:
        assert strays > 0, "with a task per window, records from a stepped-back clock are strays"
    else:
        assert strays == 0 or tasks > 1
    assert sum(1 for f in files if f.seq > 0) > 0, "some windows hold more entries than one file"
    task_of = {f.name: r.task_dir for r in results for w in r.windows for f in w.files}
    core = sorted(os.listdir(core_dir))
    assert len(files) == len(core)
    for f, name in zip(sorted(files, key=lambda f: (f.window_id, f.seq)), core):
        # Committed names sort in (window, seq) order, as the staged names do.
        mine = (tmp_path / "direct" / task_of[f.name] / f.name).read_bytes()
        theirs = (core_dir / name).read_bytes()
        assert mine == theirs, f.name
