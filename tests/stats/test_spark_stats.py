"""rocketidx.spark.stats against references computed without rocketidx: a golden case with true
collisions (g2) read with its CommitLog, and a windowed build output whose files roll over."""
from __future__ import annotations

import json
from collections import Counter, defaultdict

import numpy as np
import pytest

from stats_reference import chain_lengths, golden_case, java_key_hash, nearest_rank

pytestmark = pytest.mark.spark

G2 = "g2-unicode-collisions-v2-ipv6"
BUCKET = 600_000
TOP = 5


@pytest.fixture(scope="module")
def g2(spark):
    from rocketidx.spark.stats import index_stats
    case = golden_case(G2)
    stats = index_stats(spark, case.index_dir, case.commitlog, hash_slot_num=case.hash_slot_num,
                        index_num=case.index_num, bucket_ms=BUCKET, top=TOP, key_parts=3)
    tables = stats.to_pandas()
    summary = stats.summary()
    yield case, stats, tables, summary
    stats.unpersist()


@pytest.fixture(scope="module")
def reference(g2):
    """Per file: chain lengths by walking links; over the index: entries per key hash; from
    messages.jsonl: keys per hash with Java's hashCode, per topic counts."""
    case = g2[0]
    files = case.files()
    walks = [chain_lengths(f) for f in files]
    hash_counts = Counter(it[0] for f in files for it in f.items[1:])
    keys_by_hash = defaultdict(Counter)
    topics = defaultdict(lambda: [0, 0, 0])
    for m in case.messages():
        topics[m["topic"]][0] += 1
        topics[m["topic"]][1] += bool(m["indexKeys"])
        topics[m["topic"]][2] += len(m["indexKeys"])
        for k in m["indexKeys"]:
            keys_by_hash[java_key_hash(k)][k] += 1
    return files, walks, hash_counts, keys_by_hash, topics


def test_files(g2, reference):
    case, _, t, _ = g2
    files, walks, _, _, _ = reference
    f = t["files"]
    expected = sorted(case.manifest["files"], key=lambda x: (x["window"], x["seq"]))
    assert f["name"].tolist() == [x["name"] for x in expected]
    assert f["entries"].tolist() == [x["entries"] for x in expected]
    assert f["used_slots"].tolist() == [x["header"]["hashSlotCount"] for x in expected]
    assert f["begin_phy_offset"].tolist() == [x["header"]["beginPhyOffset"] for x in expected]
    assert np.allclose(f["fill_ratio"], [x["entries"] / (case.index_num - 1) for x in expected])
    assert np.allclose(f["mean_chain"], [x["entries"] / len(w) for x, w in zip(expected, walks)])
    assert f["p99_chain"].tolist() == [nearest_rank(list(w.values()), 99) for w in walks]
    assert f["max_chain"].tolist() == [max(w.values()) for w in walks]
    assert f["distinct_hashes"].tolist() == [len({it[0] for it in rf.items[1:]}) for rf in files]
    assert (f["apparent_bytes"] == 40 + 4 * case.hash_slot_num + 20 * case.index_num).all()


def test_chains_and_longest(g2, reference):
    _, _, t, _ = g2
    _, walks, _, _, _ = reference
    c = t["chains"]
    for i, w in enumerate(walks):
        got = c[c["file"] == i]
        assert dict(zip(got["chain_length"], got["slots"])) == dict(Counter(w.values()))
    every = sorted(((-n, i, s) for i, w in enumerate(walks) for s, n in w.items()))[:TOP]
    lc = t["longest_chains"]
    assert list(zip(lc["file"], lc["slot"], lc["length"])) == [(i, s, -n) for n, i, s in every]


def test_slot_bins_add_up(g2):
    _, _, t, _ = g2
    b = t["slot_bins"].groupby("file")[["used_slots", "entries", "slots"]].sum()
    f = t["files"].set_index("file")
    assert (b["used_slots"] == f["used_slots"]).all()
    assert (b["entries"] == f["entries"]).all()
    assert (b["slots"] == f["hash_slot_num"]).all()


def test_buckets(g2, reference):
    case, _, t, _ = g2
    files = reference[0]
    per_bucket = Counter((f.begin_timestamp + it[2] * 1000) // BUCKET * BUCKET for f in files for it in f.items[1:])
    b = t["buckets"]
    assert dict(zip(b["bucket_start_ms"], b["entries"])) == dict(per_bucket)
    assert b["messages"].sum() == case.manifest["index"]["messagesIndexed"]


def test_collisions_and_hot_keys(g2, reference):
    _, _, t, s = g2
    _, _, hash_counts, keys_by_hash, _ = reference
    c = t["collisions"]
    assert dict(zip(c["entries_per_hash"], c["key_hashes"])) == dict(Counter(hash_counts.values()))
    assert s["distinct_key_hashes"] == len(hash_counts)
    top = sorted(hash_counts.items(), key=lambda kv: (-kv[1], kv[0]))[:TOP]
    h = t["hot_keys"]
    assert list(zip(h["key_hash"], h["entries"])) == top
    for kh, keys in zip(h["key_hash"], h["keys"]):  # most entries first, then by key
        expect = sorted(keys_by_hash[kh].items(), key=lambda kv: (-kv[1], kv[0]))[:5]
        assert list(keys) == [k for k, _ in expect]


def test_true_collisions_and_shares(g2, reference):
    _, _, t, s = g2
    _, _, hash_counts, keys_by_hash, _ = reference
    colliding = {h: c for h, c in keys_by_hash.items() if len(c) >= 2}
    assert colliding, "g2 is built to hold equal-hash keys"
    tc = t["true_collisions"]
    assert dict(zip(tc["key_hash"], tc["distinct_keys"])) == {h: len(c) for h, c in colliding.items()}
    assert dict(zip(tc["key_hash"], tc["entries"])) == {h: sum(c.values()) for h, c in colliding.items()}
    for kh, keys in zip(tc["key_hash"], tc["keys"]):
        assert set(keys) <= set(colliding[kh])
    distinct_keys = sum(len(c) for c in keys_by_hash.values())
    assert s["distinct_keys"] == distinct_keys
    assert s["colliding_keys"] == sum(len(c) for c in colliding.values())
    assert s["share_of_keys_needing_filtering"] == pytest.approx(s["colliding_keys"] / distinct_keys)
    assert s["share_of_entries_needing_filtering"] == pytest.approx(
        sum(sum(c.values()) for c in colliding.values()) / sum(hash_counts.values()))


def test_topics(g2, reference):
    _, _, t, _ = g2
    topics = reference[4]
    got = {r.topic: [r.messages, r.indexed_messages, r.entries] for r in t["topics"].itertuples()}
    assert got == dict(topics)
    tb = t["topic_buckets"].groupby("topic")["entries"].sum().to_dict()
    assert tb == {k: v[2] for k, v in topics.items()}


def test_sizing_table(g2):
    _, stats, t, _ = g2
    sz = t["sizing"]
    assert sz["scenario"].tolist() == ["as built", "advised", "broker default"]
    built = sz.iloc[0]
    assert (built["hash_slot_num"], built["index_num"]) == (1000, 1000)
    assert sz.iloc[1]["predicted_mean_chain"] <= stats.targets.mean_chain or sz.iloc[1]["note"]
    assert stats.sizing.count() == 3


@pytest.fixture(scope="module")
def windowed(spark, small_store):
    from rocketidx.spark.stats import index_stats
    store, out = small_store
    stats = index_stats(spark, out, bucket_ms=BUCKET, top=TOP)
    yield out, stats, stats.to_pandas("files", "buckets", "sizing")
    stats.unpersist()


def test_windowed_output_keeps_windows_and_counts_rolled_messages_once(windowed):
    out, _, t = windowed
    manifest = json.loads((out / "_manifest.json").read_text())
    f = t["files"]
    assert f["name"].tolist() == [x["name"] for x in manifest["files"]]
    assert f["window_id"].tolist() == [x["window_id"] for x in manifest["files"]]
    assert f["seq"].max() >= 1, "the fixture's windows roll over"
    assert t["buckets"]["messages"].sum() == manifest["messages_indexed"]
    assert t["buckets"]["entries"].sum() == manifest["entries"]


def test_windowed_sizing_counts_files_per_window(windowed):
    out, _, t = windowed
    manifest = json.loads((out / "_manifest.json").read_text())
    built = t["sizing"].iloc[0]
    windows = {x["window_id"] for x in manifest["files"]}
    span_days = len(windows) * manifest["window_ms"] / 86_400_000  # consecutive windows
    assert built["observed_files_per_day"] == pytest.approx(len(manifest["files"]) / span_days, rel=1e-3)
    assert built["predicted_files_per_day"] == pytest.approx(built["observed_files_per_day"], rel=1e-3)
    advised = t["sizing"].iloc[1]
    assert advised["predicted_files_per_day"] <= 24.0 + 1e-9 or "window" in advised["note"]


def test_items_source_agrees_with_the_scan(spark, windowed):
    """The rocketmq-index items output, aggregated in Spark SQL, gives the scan's chain lengths."""
    from rocketidx.spark.sources.index import read_index_items
    out, stats, t = windowed
    items = read_index_items(spark, out, items_per_split=500)
    items.createOrReplaceTempView("index_items")
    rows = spark.sql("""
        SELECT file, chain_length, count(*) AS slots FROM (
            SELECT file, slot, count(*) AS chain_length FROM index_items GROUP BY file, slot)
        GROUP BY file, chain_length""").collect()
    chains = stats.chains.toPandas()
    assert {(r.file, r.chain_length, r.slots) for r in rows} == set(zip(chains["file"], chains["chain_length"],
                                                                        chains["slots"]))
    assert items.count() == t["files"]["entries"].sum()


def test_small_files_share_tasks():
    from rocketidx.arrays import pack
    # Largest first, each to the lightest group: 5 -> A, 4 -> B, 1 -> B (4 < 5), 1 -> A (tie: first), 1 -> B.
    assert pack([5, 1, 1, 1, 4], 2) == [[0, 2], [1, 3, 4]]
    assert pack([3, 3], 5) == [[0], [1]]


def test_source_options_are_validated():
    from rocketidx.errors import ConfigError
    from rocketidx.spark.sources.index import IndexSourceOptions
    with pytest.raises(ConfigError, match="output"):
        IndexSourceOptions.parse({"path": "x", "output": "nope"})
    with pytest.raises(ConfigError, match="top"):
        IndexSourceOptions.parse({"path": "x", "top": "0"})
    with pytest.raises(ConfigError, match="path"):
        IndexSourceOptions.parse({})
    opts = IndexSourceOptions.parse({"path": "x", "bucket": "10m", "hash_slot_num": "97", "tasks": "3"})
    assert (opts.bucket_ms, opts.hash_slot_num, opts.tasks) == (600_000, 97, 3)
    assert IndexSourceOptions.parse(opts.as_options()) == opts


def test_commitlog_tables_need_the_commitlog(windowed):
    from rocketidx.errors import ConfigError
    with pytest.raises(ConfigError, match="CommitLog"):
        windowed[1].topics


def test_every_figure_renders_to_a_png(g2, tmp_path):
    import matplotlib.image
    from rocketidx.stats import plots
    _, _, t, _ = g2
    figs = plots.render_figures(t, tmp_path)
    assert set(figs) == set(plots.FIGURES)
    for name in plots.FIGURES:
        data = (tmp_path / f"{name}.png").read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 1024, name
        pixels = matplotlib.image.imread(tmp_path / f"{name}.png")
        assert np.ptp(pixels[..., :3]) > 0.1, f"{name} is blank"


def test_a_damaged_item_is_a_typed_error_naming_the_file(spark, small_store, tmp_path):
    """A task's CorruptIndexError comes back to the driver as itself, with the file and the byte."""
    import shutil
    import struct
    from rocketidx.errors import CorruptIndexError
    from rocketidx.spark.stats import index_stats
    _, out = small_store
    bare = tmp_path / "index"
    shutil.copytree(out / "index", bare)  # a bare directory: sizes from the arguments
    victim = sorted(bare.iterdir())[1]
    at = 40 + 4 * 1009 + 20 * 1  # item 1's keyHash
    with open(victim, "r+b") as f:
        f.seek(at)
        f.write(struct.pack(">i", -5))
    with pytest.raises(CorruptIndexError) as e:
        index_stats(spark, bare, hash_slot_num=1009, index_num=400)
    assert (e.value.path, e.value.offset) == (str(victim), at)


def test_another_log_is_refused_before_any_spark_job(spark, tmp_path):
    """Issue 20 item 6: statistics of an index with a CommitLog it was not built from would show that log's
    topics and keys as the index's: a typed error saying so, on Spark as in process."""
    from rocketidx.build.in_process import build_index
    from rocketidx.config import BuildConfig
    from rocketidx.errors import IndexLogMismatchError
    from rocketidx.sample.generate import GenConfig, generate_store
    from rocketidx.spark.stats import index_stats
    shape = dict(messages=3000, segment_bytes=256 * 1024, span_ms=3 * 3_600_000)
    generate_store(tmp_path / "A", GenConfig(seed=1, **shape))
    generate_store(tmp_path / "B", GenConfig(seed=2, **shape))
    build_index(tmp_path / "A", tmp_path / "out", BuildConfig(hash_slot_num=4096, index_num=8192))
    with pytest.raises(IndexLogMismatchError, match="not built from the CommitLog"):
        index_stats(spark, tmp_path / "out", tmp_path / "B")
    stats = index_stats(spark, tmp_path / "out", tmp_path / "A")
    assert stats.summary()["entries"] > 0
    stats.unpersist()
