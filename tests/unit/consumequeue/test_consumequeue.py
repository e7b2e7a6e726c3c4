"""ConsumeQueues: the files RocketMQ's own ConsumeQueue code wrote for each golden case, byte for byte, and its
restarted broker's lookup answers; the placement rules against a literal transcription of
``putMessagePositionInfo``; tagsCode's rules; topics that cannot be directory names; the command line."""
from __future__ import annotations

import json
import struct
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from refdata import GOLDEN_CASES
from scenarios import Rec, lay_segment, props, write_segments

from rocketidx.build.in_process import build_index, build_index_range
from rocketidx.build.queues import build_queues
from rocketidx.commitlog.native import native_available
from rocketidx.commitlog.segments import list_segments
from rocketidx.commitlog.splits import SplitSpec
from rocketidx.cli import main
from rocketidx.commitlog.dispatch import DEFAULT_DELAYS_MS, delay_levels_ms, java_parse_int
from rocketidx.commitlog.segments import Segment
from rocketidx.config import BuildConfig
from rocketidx.consumequeue.placement import UNIT, QueueState, find_runs, place, place_runs
import rocketidx.consumequeue.writer as writer
import rocketidx.layout as L
from rocketidx.commitlog.dispatch import Dispatched
from rocketidx.consumequeue.writer import check_topic
from rocketidx.errors import ConfigError, TopicNameError
from rocketidx.output.open import open_consumequeues

CQ_CASES = [c for c in GOLDEN_CASES if (c / "expected" / "cq-manifest.json").exists()]
# The rules the golden cases skip, with RocketMQ's own answers (tests/reference/cq-spec/README.md); the s10
# cases stop reading at a DELAY or INNER_NUM/INNER_BASE that Java cannot parse.
SPEC = Path(__file__).resolve().parents[2] / "reference" / "cq-spec"
SPEC_CASES = sorted(p for p in SPEC.glob("s[0-9]*") if (p / "case.json").exists()) if SPEC.exists() else []


def cq_manifest(case: Path) -> dict:
    return json.loads((case / "expected" / "cq-manifest.json").read_text())


def tree(root: Path) -> dict[str, bytes]:
    root = root.resolve()
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


@pytest.mark.parametrize("case", CQ_CASES, ids=lambda c: c.name)
def test_every_queue_file_is_rocketmqs_and_every_lookup_its_answer(case, tmp_path):
    size = cq_manifest(case)["mappedFileSizeConsumeQueue"]
    manifest, summary = build_index(case / "commitlog", tmp_path / "out",
                                    BuildConfig(timezone="UTC", targets=("consumequeue",), cq_file_size=size))
    got, want = tree(tmp_path / "out" / "consumequeue"), tree(case / "expected" / "consumequeue")
    assert sorted(got) == sorted(want)
    assert [k for k in want if got[k] != want[k]] == []
    assert manifest["files"] == [] and summary.files == 0  # the index was not a target
    assert manifest["consumequeues"]["file_size"] == size and summary.consumequeue["files"] == len(want)
    queues = open_consumequeues(tmp_path / "out")
    for line in (case / "expected" / "cq-lookups.jsonl").read_text().splitlines():
        q = json.loads(line)
        got = queues.get(q["topic"], q["queueId"], q["queueOffset"])
        assert (None if got is None else dict(zip(("phyOffset", "size", "tagsCode"), got))) == q["answer"], q


@pytest.mark.parametrize("case", SPEC_CASES, ids=lambda c: c.name)
def test_every_spec_case_gives_rocketmqs_files_and_answers(case, tmp_path):
    c = json.loads((case / "case.json").read_text())
    config = BuildConfig(timezone="UTC", targets=("consumequeue",), cq_file_size=cq_manifest(case)["mappedFileSizeConsumeQueue"],
                         delay_levels=c.get("messageDelayLevel") or BuildConfig().delay_levels)
    _, summary = build_index(case / "commitlog", tmp_path / "out", config)
    stop = cq_manifest(case)["parse"]["stop"]  # "<segment> + <offset> (abs <phy>): <why>"
    assert summary.stop["phy_offset"] == int(stop.split("abs ")[1].split(")")[0])
    got, want = tree(tmp_path / "out" / "consumequeue"), tree(case / "expected" / "consumequeue")
    assert sorted(got) == sorted(want)
    assert [k for k in want if got[k] != want[k]] == []
    queues = open_consumequeues(tmp_path / "out")
    lines = (case / "expected" / "cq-lookups.jsonl").read_text().splitlines()
    assert lines, "a case without lookups pins nothing about them"
    for line in lines:
        q = json.loads(line)
        got = queues.get(q["topic"], q["queueId"], q["queueOffset"])
        assert (None if got is None else dict(zip(("phyOffset", "size", "tagsCode"), got))) == q["answer"], q


def test_the_spec_cases_are_here():
    assert len(SPEC_CASES) == 15


@pytest.mark.parametrize("case", CQ_CASES[:2], ids=lambda c: c.name)
def test_one_read_builds_both_and_the_index_is_unchanged(case, tmp_path):
    c = json.loads((case / "case.json").read_text())
    config = BuildConfig(c["hashSlotNum"], c["indexNum"], c["windowMillis"], "UTC")
    size = cq_manifest(case)["mappedFileSizeConsumeQueue"]
    alone, _ = build_index(case / "commitlog", tmp_path / "index", config)
    both, _ = build_index(case / "commitlog", tmp_path / "both",
                          BuildConfig(c["hashSlotNum"], c["indexNum"], c["windowMillis"], "UTC",
                                      targets=("index", "consumequeue"), cq_file_size=size))
    assert both["files"] == alone["files"]
    assert tree(tmp_path / "both" / "index") == tree(tmp_path / "index" / "index")
    assert tree(tmp_path / "both" / "consumequeue") == tree(case / "expected" / "consumequeue")


# --- placement: the vectorised rules against putMessagePositionInfo written out record by record ---------

def reference(records, file_size):
    """``putMessagePositionInfo`` for one queue, literally: (slots written incl. blanks as None, files)."""
    max_phy, slots, first_file, files_end, min_off = -1, {}, None, 0, 0
    write = 0
    for q, phy, size in records:
        if phy + size <= max_phy:
            continue
        expect = q * UNIT
        if first_file is None:
            first_file = write = expect - expect % file_size
            files_end = first_file + file_size
            if q != 0:
                for pos in range(first_file, expect, UNIT):
                    slots[pos] = None
                write = min_off = expect
        elif write == files_end:
            files_end += file_size
        if q != 0 and expect < write:
            continue
        slots[write] = (phy, size)
        write += UNIT
        max_phy = phy + size
    return slots, first_file, files_end, write, min_off


@st.composite
def queue_records(draw, sizes=st.integers(1, 200)):
    n = draw(st.integers(1, 60))
    q = draw(st.integers(0, 70))
    phy, out = draw(st.integers(0, 1000)), []
    for _ in range(n):
        step = draw(st.sampled_from([1, 1, 1, 1, 0, 2, 5, -1, -3, "zero"]))
        q = 0 if step == "zero" else max(0, q + step)
        phy += draw(st.sampled_from([100, 100, 100, -50, -300, 0]))
        out.append((q, max(0, phy), draw(sizes)))
    return out


@settings(max_examples=300, deadline=None)
@given(records=queue_records(), file_size=st.sampled_from([20, 60, 200, 1280]), cuts=st.lists(st.integers(1, 59)))
def test_placement_equals_the_rules_record_by_record(records, file_size, cuts):
    slots, first_file, files_end, write, min_off = reference(records, file_size)
    state = QueueState(file_size)
    got: dict[int, tuple | None] = {}
    arr = np.asarray(records, np.int64)
    bounds = [0] + sorted(c for c in set(cuts) if c < len(records)) + [len(records)]
    for a, b in zip(bounds, bounds[1:]):  # batches cut anywhere give the same queue
        placed = place(state, arr[a:b, 0], arr[a:b, 1], arr[a:b, 2])
        for k in range(placed.blanks):
            got[placed.blank_from + k * UNIT] = None
        start = state.write_pos - len(placed.appended) * UNIT
        for k, i in enumerate(placed.appended):
            got[start + k * UNIT] = (int(arr[a + i, 1]), int(arr[a + i, 2]))
    assert got == slots
    assert (state.first_file, state.files_end, state.write_pos, state.min_offset) == \
        (first_file, files_end, write, min_off)


@settings(max_examples=300, deadline=None)
@given(records=queue_records(), file_size=st.sampled_from([20, 60, 200, 1280]), cuts=st.lists(st.integers(1, 59)))
def test_placing_runs_equals_the_rules_record_by_record(records, file_size, cuts):
    """What the Spark build does: each split cuts its records of a queue into runs, and the driver places the
    runs in order from a few numbers each; the slots must be the record-by-record rules' slots."""
    slots, first_file, files_end, write, min_off = reference(records, file_size)
    arr = np.asarray(records, np.int64)
    q, end = arr[:, 0], arr[:, 1] + arr[:, 2]
    bounds = [0] + sorted(c for c in set(cuts) if c < len(records)) + [len(records)]
    starts = np.concatenate([a + find_runs(q[a:b], end[a:b]) for a, b in zip(bounds, bounds[1:])])
    stops = np.append(starts[1:], len(records))
    assert all((np.diff(end[a:b]) > 0).all() for a, b in zip(starts, stops))  # what a run promises
    kind = (q[starts] == 0).astype(np.int64)
    asked = []

    def ends_of(r):
        asked.append(r)
        return end[starts[r]:stops[r]]

    state = QueueState(file_size)
    placed = place_runs(state, kind, q[starts], stops - starts, end[starts], end[stops - 1], ends_of)
    got: dict[int, tuple | None] = {placed.blank_from + k * UNIT: None for k in range(placed.blanks)}
    for r, a in enumerate(starts):
        assert placed.skip[r] + placed.count[r] in (0, stops[r] - a) or placed.count[r] == 0
        for k in range(placed.count[r]):
            i = a + placed.skip[r] + k
            got[(placed.slot[r] + k) * UNIT] = (int(arr[i, 1]), int(arr[i, 2]))
    assert got == slots
    assert (state.first_file, state.files_end, state.write_pos, state.min_offset) == \
        (first_file, files_end, write, min_off)
    record_state = QueueState(file_size)
    one = place(record_state, q, arr[:, 1], arr[:, 2])
    assert (placed.dropped_repeated, placed.dropped_below_max, placed.gaps, state.entries) == \
        (one.dropped_repeated, one.dropped_below_max, one.gaps, record_state.entries)
    assert all(end[starts[r]] <= end[:starts[r]].max(initial=-1) for r in asked)  # only where step 1 may drop


@settings(max_examples=150, deadline=None)
@given(queues=st.lists(queue_records(st.sampled_from([50, 100, 100])), min_size=1, max_size=3), file_size=st.sampled_from([20, 60, 200, 1280]),
       picks=st.lists(st.integers(0, 2), max_size=200), cuts=st.lists(st.integers(1, 150)),
       flush=st.sampled_from([20, 60, 1 << 20]))
def test_the_writer_gives_every_queue_the_rules_slots(tmp_path_factory, monkeypatch, queues, file_size, picks, cuts,
                                                      flush):
    """The writer decides a run for all queues of a batch at once and keeps units waiting in memory: several
    queues interleaved, cut into batches anywhere, written in small or large pieces, must give each queue's
    files the record-by-record rules' slots (blanks as CQ_BLANK, the rest zeros)."""
    monkeypatch.setattr(writer, "FLUSH_QUEUE_BYTES", flush)
    monkeypatch.setattr(writer, "FLUSH_ALL_BYTES", 2 * flush)
    order, nxt = [], [0] * len(queues)
    for p in picks + [i for i, q in enumerate(queues) for _ in q]:  # every record once, each queue in order
        p %= len(queues)
        if nxt[p] < len(queues[p]):
            order.append((p, *queues[p][nxt[p]]))
            nxt[p] += 1
    arr = np.asarray(order, np.int64)
    root = tmp_path_factory.mktemp("cq")
    w = writer.ConsumeQueueWriter(str(root), file_size)
    bounds = [0] + sorted(c for c in set(cuts) if c < len(arr)) + [len(arr)]
    for a, b in zip(bounds, bounds[1:]):
        part = arr[a:b]
        w.add(Segment("s", 0, 1 << 20), Dispatched(
            ["A", "B", "C"], part[:, 0].astype(np.int32), np.zeros(len(part), np.int32), part[:, 1], part[:, 2],
            part[:, 3].astype(np.int32), np.full(len(part), 7, np.int64), np.arange(a, b, dtype=np.int64)))
    w.close(sync=False)
    for k, records in enumerate(queues):
        slots, first_file, files_end, _, _ = reference(records, file_size)
        want = bytearray(files_end - first_file)
        for pos, v in slots.items():
            phy, size, tags = L.CQ_BLANK if v is None else (*v, 7)
            want[pos - first_file:pos - first_file + UNIT] = struct.pack(">qiq", phy, size, tags)
        d = root / "ABC"[k] / "0"
        got = b"".join((d / writer.file_name(o)).read_bytes() for o in range(first_file, files_end, file_size))
        assert got == bytes(want)
        assert sorted(p.name for p in d.iterdir()) == [writer.file_name(o) for o in range(first_file, files_end, file_size)]


def test_a_full_last_file_gets_a_successor_even_when_the_record_is_dropped():
    state = QueueState(60)  # 3 slots a file
    place(state, np.array([0, 1, 2]), np.array([0, 10, 20]), np.array([10, 10, 10]))
    assert (state.files_end, state.write_pos) == (60, 60)
    placed = place(state, np.array([1]), np.array([100]), np.array([10]))  # a repeated offset: dropped
    assert len(placed.appended) == 0 and placed.dropped_repeated == 1
    assert state.files_end == 120  # the new file exists, all zeros, as the broker leaves it


# --- the fields ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("text, value", [("3", 3), ("+3", 3), ("-1", -1), ("06", 6), ("３", 3), ("2147483647", 2**31 - 1),
                                         (" 3", None), ("1_0", None), ("", None), ("+", None), ("2147483648", None),
                                         ("3 ", None), ("0x10", None), ("\U0001d7d1", None), ("\u0663", 3)])
def test_delay_levels_parse_as_javas_integer_parse_int(text, value):
    assert java_parse_int(text) == value


def test_the_default_delay_table_and_a_custom_one():
    assert DEFAULT_DELAYS_MS[0] == 1000 and DEFAULT_DELAYS_MS[-1] == 7_200_000 and len(DEFAULT_DELAYS_MS) == 18
    assert delay_levels_ms("1s 3s 7s 1m 1h") == (1000, 3000, 7000, 60_000, 3_600_000)
    with pytest.raises(ConfigError, match="messageDelayLevel"):
        delay_levels_ms("1s 3x")


@pytest.mark.parametrize("topic", ["", ".", "..", "a/b", "../../etc", "nul\x00", "t" * 256])
def test_a_topic_that_is_not_one_safe_directory_name_is_refused(topic):
    with pytest.raises(TopicNameError, match="cannot be a ConsumeQueue directory name") as e:
        check_topic(topic, Segment("/s/00000000000000000000", 0, 100), 40)
    assert "@ byte 40" in str(e.value)


@pytest.mark.parametrize("topic", ["TopicA", "%RETRY%GroupA", "%DLQ%GroupC", "t" * 255, "订单", "a.b"])
def test_topics_a_broker_uses_are_accepted(topic):
    check_topic(topic, Segment("/s/00000000000000000000", 0, 100), 0)


def test_a_queue_file_size_of_zero_is_an_error_and_19_becomes_20():
    with pytest.raises(ConfigError, match="cq_file_size"):
        BuildConfig(cq_file_size=0)
    assert BuildConfig(cq_file_size=19).queue_file_size == 20


# --- the command line ---------------------------------------------------------------------------------------

def test_build_and_query_from_the_command_line(tmp_path, capsys):
    case = CQ_CASES[0]
    size = cq_manifest(case)["mappedFileSizeConsumeQueue"]
    assert main(["build", "--commitlog", str(case / "commitlog"), "--out", str(tmp_path / "o"), "--targets",
                 "consumequeue", "--cq-file-size", str(size), "--timezone", "UTC", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["consumequeue"]["entries"] == cq_manifest(case)["dispatch"]["dispatched"]
    lookups = (case / "expected" / "cq-lookups.jsonl").read_text().splitlines()[:20]
    (tmp_path / "q.jsonl").write_text("\n".join(lookups) + "\n")
    assert main(["query", "--consumequeue", str(tmp_path / "o"), "--queries", str(tmp_path / "q.jsonl")]) == 0
    answers = [json.loads(l) for l in capsys.readouterr().out.splitlines()]
    assert [a["answer"] for a in answers] == [json.loads(l)["answer"] for l in lookups]
    assert [(a["topic"], a["queueId"], a["queueOffset"]) for a in answers] == \
        [(json.loads(l)["topic"], json.loads(l)["queueId"], json.loads(l)["queueOffset"]) for l in lookups]
    first = json.loads(lookups[1])
    assert main(["query", "--consumequeue", str(tmp_path / "o"), "--topic", first["topic"], "--queue-id",
                 str(first["queueId"]), "--queue-offset", str(first["queueOffset"])]) == 0
    assert json.loads(capsys.readouterr().out)["answer"] == first["answer"]
    assert main(["query", "--consumequeue", str(tmp_path / "o"), "--topic", "NoSuchTopic", "--queue-id", "0",
                 "--queue-offset", "0"]) == 0
    assert json.loads(capsys.readouterr().out)["answer"] is None


def test_a_bare_consumequeue_directory_needs_the_commitlog(tmp_path, capsys):
    case = CQ_CASES[0]
    assert main(["query", "--consumequeue", str(case / "expected" / "consumequeue"), "--topic", "T", "--queue-id", "0",
                 "--queue-offset", "0"]) == 2
    assert "give --commitlog" in capsys.readouterr().err
    assert main(["query", "--consumequeue", str(case / "expected" / "consumequeue"), "--commitlog",
                 str(case / "commitlog"), "--topic", "T", "--queue-id", "0", "--queue-offset", "0"]) == 0


def test_a_range_builds_what_a_broker_fed_only_that_range_writes(tmp_path):
    """From an offset on, the queues start late: each first file blank-filled up to its first entry (spec §5
    step 3); the split-wise range build equals the record-by-record build of the same records."""
    case = CQ_CASES[0]
    cfg = BuildConfig(timezone="UTC", targets=("consumequeue",), cq_file_size=cq_manifest(case)["mappedFileSizeConsumeQueue"])
    whole, _ = build_index(case / "commitlog", tmp_path / "whole", cfg)
    middle = whole["segments"][1]["base_offset"] + 1000
    ranged, summary = build_index_range(case / "commitlog", tmp_path / "range", cfg, from_offset=middle)
    same, _ = build_index(case / "commitlog", tmp_path / "same", cfg, start_offset=middle)
    assert tree(tmp_path / "range" / "consumequeue") == tree(tmp_path / "same" / "consumequeue")
    assert ranged["consumequeues"] == same["consumequeues"] and ranged["filters"] == {"from_offset": middle}
    late = [q for q in ranged["consumequeues"]["queues"] if q["min_offset"] > 0]
    assert late and all(q["max_offset"] - q["min_offset"] == q["entries"] for q in late)
    queues = open_consumequeues(tmp_path / "range")
    q = late[0]
    assert queues.get(q["topic"], q["queue_id"], q["min_offset"] - 1) is None  # a blank slot answers nothing
    assert queues.get(q["topic"], q["queue_id"], q["min_offset"]) is not None


def test_consumequeues_into_a_uri_are_rocketmqs_files(s3_bucket, tmp_path):
    """An in-process build into ``s3://`` publishes the queues beside the index, under the same commit."""
    from s3server import committed_queues
    case = CQ_CASES[0]
    c = json.loads((case / "case.json").read_text())
    cfg = BuildConfig(c["hashSlotNum"], c["indexNum"], c["windowMillis"], "UTC", targets=("index", "consumequeue"),
                      cq_file_size=cq_manifest(case)["mappedFileSizeConsumeQueue"])
    for build in (build_index, build_index_range):
        out = f"{s3_bucket}/{build.__name__}"
        manifest, _ = build(case / "commitlog", out, cfg)
        assert committed_queues(out) == tree(case / "expected" / "consumequeue")
        assert manifest["consumequeues"]["files"] == len(tree(case / "expected" / "consumequeue"))


# --- the split-wise build (what Spark runs): splits cut anywhere, files the broker's ---------------------------

@pytest.mark.parametrize("in_place", [False, True], ids=["pieces", "in-place"])
@pytest.mark.parametrize("split_bytes", [1000, 65536])
@pytest.mark.parametrize("case", CQ_CASES + SPEC_CASES, ids=lambda c: c.name)
def test_split_wise_queues_are_rocketmqs_at_any_split_size(case, split_bytes, in_place, tmp_path):
    """Each split's runs placed on the driver and the files written from pieces give RocketMQ's files, its
    counters and stops, whatever the split size (1000 bytes cuts most records' runs into pieces); so do reads
    that write their consecutive runs in place, the driver keeping only what it proves."""
    c = json.loads((case / "case.json").read_text())
    config = BuildConfig(timezone="UTC", targets=("consumequeue",),
                         cq_file_size=cq_manifest(case)["mappedFileSizeConsumeQueue"],
                         delay_levels=c.get("messageDelayLevel") or BuildConfig().delay_levels)
    one, _ = build_index(case / "commitlog", tmp_path / "one", config)
    built = build_queues(list_segments(str(case / "commitlog")), SplitSpec(split_bytes=split_bytes),
                         config.queue_file_size, delay_levels_ms(config.delay_levels), str(tmp_path / "staging"),
                         write_tasks=3, in_place=in_place)
    assert built.splits > (1 if split_bytes == 1000 else 0)
    got, want = tree(tmp_path / "staging" / "consumequeue"), tree(case / "expected" / "consumequeue")
    assert sorted(got) == sorted(want)
    assert [k for k in want if got[k] != want[k]] == []
    assert built.manifest == one["consumequeues"]


def _offsets(draw) -> list[int]:
    """One queue's QUEUEOFFSETs as a replayed, gapped or late-started log gives them."""
    out: list[int] = []
    nxt = draw(st.sampled_from([0, 0, 1, 5, 13]))
    for step, n in draw(st.lists(st.tuples(st.sampled_from(["up", "back", "jump", "zero"]), st.integers(1, 9)),
                                 min_size=1, max_size=6)):
        if step == "back":
            nxt = max(0, nxt - n)
        elif step == "jump":
            nxt += n
        elif step == "zero":
            out += [0] * min(n, 2)
            continue
        out += list(range(nxt, nxt + n))
        nxt += n
    return out


@st.composite
def unclean_logs(draw):
    queues = [_offsets(draw) for _ in range(draw(st.integers(1, 3)))]
    picks = draw(st.lists(st.integers(0, 2), max_size=60))
    order, nxt = [], [0] * len(queues)
    for p in picks + [i for i, q in enumerate(queues) for _ in q]:  # every record once, each queue in order
        p %= len(queues)
        if nxt[p] < len(queues[p]):
            order.append((p, queues[p][nxt[p]]))
            nxt[p] += 1
    # Never the first record: a log whose first record is invalid is refused, not built.
    corrupt_at = draw(st.one_of(st.none(), st.integers(1, len(order) - 1))) if len(order) > 1 else None
    return order, corrupt_at


@settings(max_examples=60, deadline=None)
@given(log=unclean_logs(), split_bytes=st.sampled_from([300, 700, 5000]), file_size=st.sampled_from([60, 200]))
def test_reads_that_write_runs_in_place_give_the_one_pass_files_on_any_log(tmp_path_factory, log, split_bytes,
                                                                          file_size):
    """Replays, gaps, zeros, late starts and records after the log's end (a corrupt record: later splits count
    for nothing, though their reads wrote in place): the split-wise build that writes runs in place gives the
    one pass's files, file for file, and no file or directory more."""
    order, corrupt_at = log
    recs = [Rec(topic=b"T%d" % (k % 2), queue_id=k, queue_offset=q, body=b"x" * 40) for k, q in order]
    if corrupt_at is not None:
        recs[corrupt_at] = replace(recs[corrupt_at], body_crc=1)
    root = tmp_path_factory.mktemp("inplace")
    store = write_segments(root / "store", [lay_segment(recs, size=max(4096, 200 * len(recs)))])
    config = BuildConfig(timezone="UTC", targets=("consumequeue",), cq_file_size=file_size)
    one, _ = build_index(store / "commitlog", root / "one", config)
    built = build_queues(list_segments(str(store / "commitlog")), SplitSpec(split_bytes=split_bytes), file_size,
                         DEFAULT_DELAYS_MS, str(root / "staging"), write_tasks=2, in_place=True)
    got = root / "staging" / "consumequeue"
    want = root / "one" / "consumequeue"
    assert tree(got) == (tree(want) if want.exists() else {})
    dirs = sorted(str(p.relative_to(got)) for p in got.rglob("*") if p.is_dir()) if got.exists() else []
    assert dirs == (sorted(str(p.relative_to(want)) for p in want.rglob("*") if p.is_dir()) if want.exists() else [])
    assert built.manifest == one["consumequeues"]


def test_a_bad_topic_after_the_logs_end_is_not_an_error_but_one_before_it_is(tmp_path):
    """Only records the broker reads count: the split-wise build raises for the first bad topic of a
    counted split, as the record-by-record build does, naming the same record."""
    good = [Rec(queue_offset=i, body=b"x" * 150) for i in range(6)]
    evil = Rec(topic=b"../escape", queue_offset=0, body=b"x" * 150)
    cfg = BuildConfig(timezone="UTC", targets=("consumequeue",), cq_file_size=1280)
    for name, records, fails in (("before", good[:3] + [evil] + good[3:], True),
                                 ("after", good + [replace(good[0], body_crc=1), evil, evil], False)):
        store = write_segments(tmp_path / name, [lay_segment(records)])
        segments = list_segments(str(store / "commitlog"))
        for split_bytes in (200, 1 << 20):
            staging = str(tmp_path / f"{name}-{split_bytes}")
            if fails:
                with pytest.raises(TopicNameError, match="'../escape'") as e:
                    build_queues(segments, SplitSpec(split_bytes=split_bytes), 1280, DEFAULT_DELAYS_MS, staging)
                with pytest.raises(TopicNameError) as e2:
                    build_index(store / "commitlog", tmp_path / f"o-{name}-{split_bytes}", cfg)
                assert str(e.value) == str(e2.value) and "@ byte" in str(e.value)
            else:
                built = build_queues(segments, SplitSpec(split_bytes=split_bytes), 1280, DEFAULT_DELAYS_MS, staging)
                assert built.manifest["entries"] == 6 and built.resolved.stop["kind"] == "corrupt"
    assert not (tmp_path / "escape").exists() and not (tmp_path.parent / "escape").exists()
def test_a_build_that_drops_a_target_or_changes_the_queue_file_size_needs_overwrite(tmp_path, capsys):
    case = CQ_CASES[0]
    out = str(tmp_path / "o")
    base = ["build", "--commitlog", str(case / "commitlog"), "--out", out, "--timezone", "UTC"]
    assert main(base + ["--targets", "index,consumequeue", "--cq-file-size", "1280"]) == 0
    capsys.readouterr()
    assert main(base + ["--targets", "index"]) == 2
    assert "dropping consumequeue" in capsys.readouterr().err
    assert main(base + ["--targets", "index,consumequeue", "--cq-file-size", "2560"]) == 2
    assert "ConsumeQueue files of 1280 bytes (this build: 2560)" in capsys.readouterr().err
    assert main(base + ["--targets", "index", "--overwrite"]) == 0
    assert not (tmp_path / "o" / "consumequeue").exists()  # no link into a version without queues
    assert main(base + ["--targets", "index,consumequeue", "--cq-file-size", "1280"]) == 0  # adding one needs none
    assert (tmp_path / "o" / "consumequeue").is_dir()


def test_the_brokers_properties_file_gives_its_settings_and_flags_win(tmp_path, capsys):
    from rocketidx.config import broker_settings, read_properties
    conf = tmp_path / "broker.conf"
    conf.write_text("# a broker\nbrokerClusterName = DefaultCluster\nmessageDelayLevel=1s 3s 7s 1m 1h\n"
                    "mappedFileSizeConsumeQueue : 1280\n! another comment\nmaxIndexNum 400\n")
    assert read_properties(conf)["brokerClusterName"] == "DefaultCluster"
    assert broker_settings(conf) == {"messageDelayLevel": "1s 3s 7s 1m 1h", "mappedFileSizeConsumeQueue": 1280,
                                     "maxIndexNum": 400}
    case = CQ_CASES[0]
    assert main(["build", "--commitlog", str(case / "commitlog"), "--out", str(tmp_path / "o"), "--targets",
                 "index,consumequeue", "--broker-conf", str(conf), "--index-num", "500", "--json"]) == 0
    said = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["settings_from"]
    assert said == {"hash_slot_num": "default", "index_num": "flag", "cq_file_size": "broker-conf",
                    "delay_levels": "broker-conf"}
    assert tree(tmp_path / "o" / "consumequeue") == tree(case / "expected" / "consumequeue")  # no delayed messages


@pytest.mark.parametrize("line, key", [("maxIndexNum=abc", "maxIndexNum"), ("mappedFileSizeConsumeQueue=0",
                                       "mappedFileSizeConsumeQueue"), ("messageDelayLevel=1s  3s", "messageDelayLevel"),
                                      ("messageDelayLevel=1x", "messageDelayLevel")])
def test_a_setting_the_broker_would_reject_is_an_error_naming_the_key(tmp_path, line, key, capsys):
    conf = tmp_path / "broker.conf"
    conf.write_text(line + "\n")
    case = CQ_CASES[0]
    assert main(["build", "--commitlog", str(case / "commitlog"), "--out", str(tmp_path / "o"),
                 "--broker-conf", str(conf)]) == 2
    err = capsys.readouterr().err
    assert f"broker.conf: {key}" in err and len(err.splitlines()) == 1


def test_queue_statistics_from_the_command_line(tmp_path, capsys):
    case = CQ_CASES[0]
    assert main(["stats", "--consumequeue", str(case / "expected" / "consumequeue"), "--commitlog",
                 str(case / "commitlog"), "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    want = cq_manifest(case)
    assert got["summary"]["entries"] == want["dispatch"]["dispatched"]
    assert len(got["queues"]) == len({(q["topic"], q["queueId"]) for q in want["queues"]})
    assert all(r["first_store_time_ms"] <= r["last_store_time_ms"] for r in got["queues"] if r["entries"])
    assert main(["stats", "--consumequeue", str(case / "expected" / "consumequeue")]) == 0
    assert "queues" in capsys.readouterr().out


@pytest.mark.parametrize("case", [c for c in SPEC_CASES if c.name.startswith("s10")], ids=lambda c: c.name)
def test_reading_stops_at_a_value_java_cannot_parse_for_the_index_too_on_both_readers(case, tmp_path):
    from rocketidx.commitlog.readers import CommitLogReader
    from rocketidx.commitlog.native import native_available
    stops = []
    for native in (True, False):
        reader = CommitLogReader(list_segments(case / "commitlog"), native=native)
        records = sum(len(recs) for _, _, recs, _ in reader.entry_chunks())
        stops.append((records, reader.stop.as_dict()))
    assert stops[0] == stops[1]
    assert stops[0][1]["kind"] == "corrupt" and "throws" in stops[0][1]["reason"]
    _, summary = build_index(case / "commitlog", tmp_path / "o", BuildConfig(97, 400, 0, "UTC"))
    assert summary.stop == stops[0][1] and summary.messages == stops[0][0]


def test_a_custom_delay_table_from_the_brokers_conf_gives_rocketmqs_tags_codes(tmp_path):
    case = SPEC / "s02-delay-levels-custom-table"
    size = str(cq_manifest(case)["mappedFileSizeConsumeQueue"])
    base = ["build", "--commitlog", str(case / "commitlog"), "--targets", "consumequeue", "--cq-file-size", size]
    assert main(base + ["--out", str(tmp_path / "conf"), "--broker-conf", str(case / "broker.conf")]) == 0
    assert tree(tmp_path / "conf" / "consumequeue") == tree(case / "expected" / "consumequeue")
    assert main(base + ["--out", str(tmp_path / "default")]) == 0  # without it: the broker's default table
    assert tree(tmp_path / "default" / "consumequeue") == tree(SPEC / "s01-delay-levels-default" / "expected" /
                                                                 "consumequeue")


def test_a_negative_queue_offset_is_skipped_and_counted(tmp_path):
    import shutil
    case = CQ_CASES[0]
    shutil.copytree(case / "commitlog", tmp_path / "commitlog")
    first = sorted((tmp_path / "commitlog").iterdir())[0]
    with open(first, "r+b") as f:  # the first record's QUEUEOFFSET (prefix byte 20); the body CRC does not cover it
        f.seek(20)
        f.write((-5).to_bytes(8, "big", signed=True))
    _, summary = build_index(tmp_path / "commitlog", tmp_path / "o",
                             BuildConfig(timezone="UTC", targets=("consumequeue",), cq_file_size=1280))
    assert summary.consumequeue["dropped"]["negative_queue_offset"] == 1
    assert summary.consumequeue["entries"] == cq_manifest(case)["dispatch"]["dispatched"] - 1
    assert all(not p.name.startswith("-") for p in (tmp_path / "o" / "consumequeue").resolve().rglob("*"))


# --- the reader's dispatch hints: both read paths dispatch alike --------------------------------------------

_TOPIC_BYTES = st.one_of(st.sampled_from([b"TopicA", b"TopicB", b"\xe8\xae\xa2\xe5\x8d\x95", b"bad\xff", b"bad\xfe",
                                          b"SCHEDULE_TOPIC_XXXX", b"\xed\xa0\x80x"]),
                         st.binary(min_size=1, max_size=6).filter(lambda b: b"/" not in b and b"\x00" not in b
                                                                  and b not in (b".", b"..")))
_TAGS_BYTES = st.one_of(st.none(), st.sampled_from([b"", b"TagA", b"\xe4\xb8\xad", b"x\xc3", b"\xf0\x9f\x98\x80",
                                                    b"\xed\xb0\x80"]), st.binary(max_size=5).filter(
                                                        lambda b: b"\x01" not in b and b"\x02" not in b))


@pytest.mark.parametrize("native", [False, True] if native_available() else [False],
                         ids=lambda n: "native" if n else "numpy")
@settings(max_examples=60, deadline=None)
@given(rows=st.lists(st.tuples(_TOPIC_BYTES, _TAGS_BYTES, st.integers(-2, 3)), min_size=1, max_size=40))
def test_both_read_paths_dispatch_the_same_entries(native, rows):
    """Topics grouped and TAGS hashed while the kernel reads a record equal what numpy computes from the bytes,
    malformed UTF-8 (Java's U+FFFD) and lone surrogates included."""
    recs = [Rec(topic=t, properties=b"" if g is None else props(("TAGS", g)), queue_id=q, queue_offset=i)
            for i, (t, g, q) in enumerate(rows)]
    seg_bytes = lay_segment(recs, size=65536)
    seg = Segment("/s/00000000000000000000", 0, 65536)
    got = [_dispatched(seg_bytes.data, seg, n) for n in (False, native)]
    assert got[0] == got[1]
    assert len(got[0]) == len(rows)


def test_a_batch_with_more_topics_than_the_kernels_table_dispatches_the_same(tmp_path):
    recs = [Rec(topic=f"T{i}".encode(), properties=props(("TAGS", f"g{i % 7}")), queue_offset=i) for i in range(2500)]
    size = 2500 * 160
    laid = lay_segment(recs, size=size)
    seg = Segment("/s/00000000000000000000", 0, size)
    numpy_path = _dispatched(laid.data, seg, False)
    assert len({t for t, *_ in numpy_path}) == 2500
    if native_available():
        assert _dispatched(laid.data, seg, True) == numpy_path


def _dispatched(data: bytes, seg: Segment, native: bool) -> list[tuple]:
    from rocketidx.commitlog.dispatch import dispatch
    from rocketidx.commitlog.readers import RangeReader
    from rocketidx.commitlog.segments import SegmentRange
    out = []
    for recs in RangeReader(data, SegmentRange(seg, 0, seg.size), native=native).record_chunks():
        d = dispatch(data, seg, recs)
        out += [(d.topics[t], int(q), int(o), int(c)) for t, q, o, c in
                zip(d.topic_index, d.queue_id, d.queue_offset, d.tags_code)]
    return out
