"""rocketidx.stats.core without Spark: a hand-made file with hand-computed answers, the golden cases against
a link-by-link walk, key-count merges against a Counter, and the sizing arithmetic by hand."""
from __future__ import annotations

import math
import struct
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from rocketidx.stats import core
from rocketidx.stats.sizing import (MS_PER_DAY, SizingTargets, expected_used_slots, files_per_day, predicted_mean_chain, round_up_nice, sizing_advice, slots_for_mean_chain)
from rocketidx.stats.keys import (commitlog_partials, hash_filter, in_hash_filter, merge_key_counts, merge_key_groups, split_key_counts)
from rocketidx.errors import ConfigError, CorruptIndexError
from rocketidx.index.reader import FileRef
from stats_reference import GOLDEN_NAMES, chain_lengths, golden_case, java_key_hash, nearest_rank

# --- a file made by hand ------------------------------------------------------------------------
#
# 5 slots, room for 10 items; 6 entries. Written with struct from the spec's layout.
#
#  item  keyHash  slot(%5)  phyOffset  timeDiff  prev   message
#   1       7        2        1000        0       0      A
#   2      12        2        1000        0       1      A  (second key of A)
#   3       3        3        1200       30       0      B
#   4       7        2        1500       70       2      C
#   5      22        2        1500       70       4      C
#   6       5        0        1900      130       0      D
#  slots: 0 -> 6, 2 -> 5, 3 -> 3 (1 and 4 empty)
#
# Hand-computed: chains slot 2: 5,4,2,1 (4 items), slot 3: 1, slot 0: 1 -> histogram {1: 2, 4: 1};
# used slots 3; mean chain 6/3 = 2; mean walk (4^2 + 1 + 1) / 6 = 3; nearest-rank p50 of [1,1,4] = 1,
# p90 = p99 = 4; fill 6/9; load factor 6/5; distinct hashes {7,12,3,22,5} = 5 -> 1.2 entries per hash;
# longest chain slot 2, 4 items, 3 distinct hashes (7, 12, 22), head item 5.
# Begin 1_699_999_980_000 is a whole minute: item times +0, +0, +30 s, +70 s, +70 s, +130 s -> one-minute
# buckets 0,0,0,1,1,2: entries 3,2,1; messages A,B | C | D = 2,1,1.

BEGIN = 1_699_999_980_000
HAND_ITEMS = [(7, 1000, 0, 0), (12, 1000, 0, 1), (3, 1200, 30, 0), (7, 1500, 70, 2), (22, 1500, 70, 4),
              (5, 1900, 130, 0)]
HAND_SLOTS = {0: 6, 2: 5, 3: 3}


def write_hand_file(path: Path, items=HAND_ITEMS, slots=HAND_SLOTS, hash_slot_num=5, index_num=10,
                    begin=BEGIN) -> Path:
    header = struct.pack(">qqqqii", begin, begin + 130_400, items[0][1], items[-1][1], len(slots), len(items) + 1)
    table = b"".join(struct.pack(">i", slots.get(s, 0)) for s in range(hash_slot_num))
    body = bytes(20) + b"".join(struct.pack(">iqii", *it) for it in items)
    body += bytes(20 * index_num - len(body))
    path.write_bytes(header + table + body)
    return path


def hand_ref(path: Path, **kw) -> FileRef:
    return FileRef(str(path), kw.get("hash_slot_num", 5), kw.get("index_num", 10))


def test_scan_of_a_hand_made_file(tmp_path):
    s = core.scan_file(hand_ref(write_hand_file(tmp_path / "f")), bucket_ms=60_000, top=2, bins=5)
    r = s.row
    assert (r["entries"], r["used_slots"], r["hash_slot_count"], r["index_count"]) == (6, 3, 3, 7)
    assert r["fill_ratio"] == pytest.approx(6 / 9)
    assert r["load_factor"] == pytest.approx(1.2)
    assert r["mean_chain"] == pytest.approx(2.0)
    assert r["mean_walk"] == pytest.approx(3.0)
    assert (r["p50_chain"], r["p90_chain"], r["p99_chain"], r["max_chain"]) == (1, 4, 4, 4)
    assert (r["distinct_hashes"], r["entries_per_hash"]) == (5, pytest.approx(1.2))
    assert r["messages"] == 4
    assert r["apparent_bytes"] == 40 + 4 * 5 + 20 * 10
    assert s.chain_lengths.tolist() == [1, 4] and s.chain_slots.tolist() == [2, 1]
    assert s.longest[0] == {"slot": 2, "length": 4, "distinct_hashes": 3, "head_item": 5}
    assert [c["slot"] for c in s.longest] == [2, 0]  # ties (slots 0 and 3, length 1) go to the lower slot
    assert s.bins["used_slots"].tolist() == [1, 0, 1, 1, 0]
    assert s.bins["entries"].tolist() == [1, 0, 4, 1, 0]
    assert (s.buckets["bucket_start_ms"] - BEGIN).tolist() == [0, 60_000, 120_000]
    assert s.buckets["entries"].tolist() == [3, 2, 1]
    assert s.buckets["messages"].tolist() == [2, 1, 1]
    assert dict(zip(s.key_hashes.tolist(), s.key_counts.tolist())) == {3: 1, 5: 1, 7: 2, 12: 1, 22: 1}


def test_chunked_reads_give_the_same_scan(tmp_path):
    ref = hand_ref(write_hand_file(tmp_path / "f"))
    whole = core.scan_file(ref, bucket_ms=60_000)
    chunked = core.scan_file(ref, bucket_ms=60_000, chunk=2)
    assert whole.row == chunked.row
    for name in ("entries", "messages"):
        assert whole.buckets[name].tolist() == chunked.buckets[name].tolist()


def test_a_message_continued_from_the_previous_file_counts_once(tmp_path):
    path = write_hand_file(tmp_path / "f")
    first_phy = HAND_ITEMS[0][1]
    cont = FileRef(str(path), 5, 10, 1, continues_phy=first_phy)
    assert core.scan_file(cont, bucket_ms=60_000).row["messages"] == 3  # A started in the previous file


def test_negative_key_hash_names_the_file_and_byte(tmp_path):
    items = list(HAND_ITEMS)
    items[2] = (-3, 1200, 30, 0)
    path = write_hand_file(tmp_path / "bad", items=items)
    with pytest.raises(CorruptIndexError) as e:
        core.scan_file(hand_ref(path), bucket_ms=60_000)
    assert e.value.path == str(path)
    assert e.value.offset == 40 + 4 * 5 + 20 * 3  # item 3's keyHash


def test_wrong_sizes_are_a_typed_error(tmp_path):
    path = write_hand_file(tmp_path / "f")
    with pytest.raises(CorruptIndexError, match="file size"):
        core.scan_file(FileRef(str(path), 6, 10), bucket_ms=60_000)
    with pytest.raises(ConfigError):
        core.scan_file(hand_ref(path), bucket_ms=0)


# --- golden cases -------------------------------------------------------------------------------

golden = pytest.mark.parametrize("name", GOLDEN_NAMES)


@golden
def test_golden_files_against_a_walk_of_the_links(name):
    case = golden_case(name)
    refs, manifest = core.file_refs(case.index_dir, case.hash_slot_num, case.index_num)
    assert manifest is None  # a bare directory: no rocketidx manifest, files in name order
    expected = sorted(case.manifest["files"], key=lambda f: (f["window"], f["seq"]))
    assert [r.name for r in refs] == [f["name"] for f in expected]
    total_messages = 0
    for ref, ref_file, exp in zip(refs, case.files(), expected):
        s = core.scan_file(ref, bucket_ms=600_000)
        lengths = chain_lengths(ref_file)
        hist = Counter(lengths.values())
        assert dict(zip(s.chain_lengths.tolist(), s.chain_slots.tolist())) == dict(hist), ref.name
        r = s.row
        assert r["entries"] == exp["entries"] == exp["header"]["indexCount"] - 1
        assert r["used_slots"] == exp["header"]["hashSlotCount"] == sum(1 for v in ref_file.slots if v > 0)
        assert r["fill_ratio"] == pytest.approx(exp["entries"] / (case.index_num - 1))
        assert r["load_factor"] == pytest.approx(exp["entries"] / case.hash_slot_num)
        assert r["mean_chain"] == pytest.approx(exp["entries"] / len(lengths))
        assert r["mean_walk"] == pytest.approx(sum(v * v for v in lengths.values()) / exp["entries"])
        vals = list(lengths.values())
        assert (r["p50_chain"], r["p90_chain"], r["p99_chain"], r["max_chain"]) == \
            (nearest_rank(vals, 50), nearest_rank(vals, 90), nearest_rank(vals, 99), max(vals))
        hashes = Counter(it[0] for it in ref_file.items[1:])
        assert r["distinct_hashes"] == len(hashes)
        top = sorted(lengths.items(), key=lambda kv: (-kv[1], kv[0]))[:len(s.longest)]
        assert [(c["slot"], c["length"]) for c in s.longest] == top
        assert all(c["head_item"] == ref_file.slots[c["slot"]] for c in s.longest)
        # Entries per bucket: each item's time as the broker rebuilds it, bucketed one by one.
        per_bucket = Counter((ref_file.begin_timestamp + it[2] * 1000) // 600_000 * 600_000 for it in ref_file.items[1:])
        assert dict(zip(s.buckets["bucket_start_ms"].tolist(), s.buckets["entries"].tolist())) == dict(per_bucket)
        total_messages += r["messages"]
    # Messages straddling a roll-over are counted once: the sum is the manifest's count of indexed messages.
    assert total_messages == case.manifest["index"]["messagesIndexed"]


@golden
@pytest.mark.parametrize("parts", [1, 3])
def test_golden_key_counts_merge_to_a_counter(name, parts):
    case = golden_case(name)
    refs, _ = core.file_refs(case.index_dir, case.hash_slot_num, case.index_num)
    by_part = defaultdict(lambda: ([], []))
    for ref in refs:
        s = core.scan_file(ref, bucket_ms=600_000)
        for p, h, c in split_key_counts(s.key_hashes, s.key_counts, parts, max_rows=7):
            by_part[p][0].append(h)
            by_part[p][1].append(c)
    merged = [merge_key_counts(*by_part[p], top=5) for p in range(parts)]
    counts = Counter(it[0] for f in case.files() for it in f.items[1:])
    files_of = defaultdict(set)
    for i, f in enumerate(case.files()):
        for it in f.items[1:]:
            files_of[it[0]].add(i)
    mult = Counter()
    for m in merged:
        mult.update(dict(zip(m.multiplicity["entries_per_hash"].tolist(), m.multiplicity["key_hashes"].tolist())))
    assert dict(mult) == dict(Counter(counts.values()))
    assert sum(m.distinct_hashes for m in merged) == len(counts)
    assert sum(m.entries for m in merged) == case.manifest["index"]["entries"]
    top = sorted((t for m in merged for t in m.top), key=lambda t: (-t["entries"], t["key_hash"]))[:5]
    expect = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:5]
    assert [(t["key_hash"], t["entries"]) for t in top] == expect
    assert all(t["files"] == len(files_of[t["key_hash"]]) for t in top)
    repeated = np.sort(np.concatenate([m.repeated for m in merged]))
    assert repeated.tolist() == sorted(h for h, n in counts.items() if n >= 2)


@golden
def test_golden_true_collisions_and_topics_from_the_commitlog(name):
    from rocketidx.commitlog.readers import CommitLogReader
    from rocketidx.commitlog.segments import list_segments
    case = golden_case(name)
    tbs, kts = [], []
    for batch in CommitLogReader(list_segments(case.commitlog)):
        tb, kt = commitlog_partials(batch, bucket_ms=3_600_000, key_filter=None)
        tbs.append(tb)
        kts.append(kt)
    keys_by_hash = defaultdict(Counter)
    topics = defaultdict(lambda: [0, 0, 0])
    for m in case.messages():
        topics[m["topic"]][0] += 1
        topics[m["topic"]][1] += bool(m["indexKeys"])
        topics[m["topic"]][2] += len(m["indexKeys"])
        for k in m["indexKeys"]:
            keys_by_hash[java_key_hash(k)][k] += 1
    wanted = {next(iter(keys_by_hash))}
    totals, groups = merge_key_groups(kts, wanted=wanted, examples=50)
    colliding = {h: c for h, c in keys_by_hash.items() if len(c) >= 2}
    assert totals["hashes"] == len(keys_by_hash)
    assert totals["keys"] == sum(len(c) for c in keys_by_hash.values())
    assert totals["colliding_hashes"] == len(colliding)
    assert totals["colliding_keys"] == sum(len(c) for c in colliding.values())
    assert totals["colliding_entries"] == sum(sum(c.values()) for c in colliding.values())
    got = {g["key_hash"]: dict(zip(g["keys"], g["key_entries"])) for g in groups}
    assert {h: got[h] for h in colliding} == {h: dict(c) for h, c in colliding.items()}
    assert set(got) == set(colliding) | wanted
    t = pa.concat_tables(tbs).group_by("topic").aggregate(
        [("messages", "sum"), ("indexed_messages", "sum"), ("entries", "sum")]).to_pylist()
    assert {r["topic"]: [r["messages_sum"], r["indexed_messages_sum"], r["entries_sum"]] for r in t} == dict(topics)


def test_g2_has_true_collisions():
    case = golden_case("g2-unicode-collisions-v2-ipv6")
    keys = {k for m in case.messages() for k in m["indexKeys"]}
    by_hash = defaultdict(set)
    for k in keys:
        by_hash[java_key_hash(k)].add(k)
    assert any(len(v) >= 2 for v in by_hash.values())  # the case is built to have Aa/BB-style pairs


def test_hash_filter_holds_what_was_put_in():
    rng = np.random.default_rng(5)
    put = rng.integers(0, 2**31 - 1, 10_000).astype(np.int32)
    f = hash_filter(put, bits=20)
    assert in_hash_filter(f, put).all()
    others = rng.integers(0, 2**31 - 1, 100_000)
    assert in_hash_filter(f, others).mean() < 0.02  # ~10,000 / 2^20 false positives


# --- formulas by hand ---------------------------------------------------------------------------

def test_expected_used_slots_and_mean_chain_by_hand():
    assert expected_used_slots(2, 2) == pytest.approx(1.5)  # 2 * (1 - (1/2)^2)
    # n = d = 4 over S = 4: U = 4 * (1 - (3/4)^4) = 175/64; over S = 3: U = 3 * (1 - (2/3)^4) = 65/27
    assert predicted_mean_chain(4, 4, 4) == pytest.approx(4 / (175 / 64))  # 1.4629
    assert predicted_mean_chain(4, 4, 3) == pytest.approx(4 / (65 / 27))  # 1.6615
    assert slots_for_mean_chain(4, 4, 1.5) == 4
    assert slots_for_mean_chain(10, 5, 1.9) is None  # two entries per hash: never below 2


def test_percentiles_and_rounding_by_hand():
    assert core.histogram_percentiles([1, 2, 3], [5, 3, 2]) == [1, 3, 3]  # ranks 5, 9 and 10 of 10
    assert core.histogram_percentiles([], []) == [0, 0, 0]
    assert round_up_nice(1_234_567) == 1_300_000
    assert round_up_nice(6001) == 6100
    assert round_up_nice(7) == 7


def test_files_per_day_by_hand():
    # Windows of 100 and 250 entries with room for 100 per file: 1 + 3 files in 2 hours -> 48 a day.
    assert files_per_day([100, 250], 101, 2 * 3_600_000, windowed=True) == pytest.approx(48)
    # One sequence of 350 entries in 12 hours: 3.5 files -> 7 a day.
    assert files_per_day([350], 101, 12 * 3_600_000, windowed=False) == pytest.approx(7)


def test_sizing_advice_by_hand():
    rows = sizing_advice([1000, 3000], 2 * 3_600_000, True, 1.0, (1000, 2000),
                              SizingTargets(mean_chain=1.5, files_per_day=24, headroom=2))
    built, advised, default = rows
    assert [r["scenario"] for r in rows] == ["as built", "advised", "broker default"]
    # As built: the fullest window (3000) fills a file of 1999 and rolls over: 1 + 2 files in 2 h.
    assert built["entries_per_file"] == 1999 and built["predicted_files_per_day"] == pytest.approx(36)
    # Advised: 2 x 3000 entries must fit one file per window -> indexNum >= 6001 -> 6,100 rounded up.
    assert advised["index_num"] == 6100 and advised["predicted_files_per_day"] == pytest.approx(24)
    # 6000 distinct hashes at mean chain 1.5: x / (1 - e^-x) = 1.5 at x = 6000 / S ~ 0.874, S ~ 6,865 -> 6,900.
    assert advised["hash_slot_num"] == 6900 and advised["predicted_mean_chain"] <= 1.5
    assert default["hash_slot_num"] == 5_000_000 and default["index_num"] == 20_000_000
    assert all(r["fits_2gib"] for r in rows)


def test_sizing_aims_at_what_windows_allow():
    # Ten-minute windows make 144 files a day at the least: a target of 24 cannot be met.
    rows = sizing_advice([100] * 6, 3_600_000, True, 1.0, (100, 200), SizingTargets(files_per_day=24))
    assert "one file per window" in rows[1]["note"]
    assert rows[1]["predicted_files_per_day"] == pytest.approx(144)


def test_sizing_targets_are_validated():
    with pytest.raises(ConfigError):
        SizingTargets(mean_chain=0.5)
    with pytest.raises(ConfigError):
        SizingTargets(headroom=0.5)


def test_auto_bucket():
    assert core.auto_bucket_ms(6 * 3_600_000) == 300_000  # 72 five-minute buckets
    assert core.auto_bucket_ms(24 * 3_600_000) == 900_000
    assert core.auto_bucket_ms(1) == 60_000
    assert math.isclose(MS_PER_DAY, 86_400_000)


def test_merge_of_partials_by_hand():
    # Two files' partials for one hash partition: hash 5 held 3 + 2 times, 9 once, 7 ten million times.
    f1 = (np.array([5, 9], "<i4"), np.array([3, 1], "<i4"))
    f2 = (np.array([5, 7], "<i4"), np.array([2, 10_000_000], "<i4"))
    k = merge_key_counts([f1[0].tobytes(), f2[0].tobytes()], [f1[1].tobytes(), f2[1].tobytes()], top=2)
    assert dict(zip(k.multiplicity["entries_per_hash"].tolist(), k.multiplicity["key_hashes"].tolist())) == \
        {1: 1, 5: 1, 10_000_000: 1}
    assert k.top == [{"key_hash": 7, "entries": 10_000_000, "files": 1}, {"key_hash": 5, "entries": 5, "files": 2}]
    assert k.repeated.tolist() == [5, 7]
    assert (k.distinct_hashes, k.entries) == (3, 10_000_006)
