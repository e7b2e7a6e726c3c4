"""Index statistics in this process, no Spark: the same tables and summary as :mod:`rocketidx.spark.stats`.

In: an index directory (a build output or a broker's ``store/index``), optionally its CommitLog. Out:
:class:`LocalIndexStats`, whose :meth:`~StatsResults.to_pandas` and :meth:`~StatsResults.summary` equal
the Spark ``IndexStats``' (the tests hold them to it), so ``rocketidx stats`` picks an engine by size
and prints the same thing either way.

The steps are the Spark plan's, run one after another on the core functions of :mod:`rocketidx.stats.core`:
one :func:`~rocketidx.stats.core.scan_file` per file (its small rows kept, its key counts split by hash
partition), one :func:`~rocketidx.stats.keys.merge_key_counts` per hash partition (exact global counts, a
filter of the hashes held twice or more), and with a CommitLog one pass over the indexed offsets'
byte ranges (:func:`~rocketidx.stats.keys.commitlog_partials`) and :func:`~rocketidx.stats.keys.merge_key_groups`.
Memory: the files' small rows plus one hash partition's counts at a time (~16 M key hashes), the
same bound as a Spark merge task.

:class:`StatsResults` holds what both engines share once the tables exist: the sizing advice and the
summary.
"""
from __future__ import annotations

import math
import os

import numpy as np
import pyarrow as pa

from rocketidx.stats import core
from rocketidx.stats.sizing import MS_PER_DAY, SizingTargets, sizing_advice
from rocketidx.stats.keys import (DEFAULT_FILTER_BITS, DEFAULT_TOP, TOPIC_BUCKET_ROWS, commitlog_partials, hash_filter, merge_key_counts, merge_key_groups, split_key_counts)
from rocketidx.errors import StoreLayoutError
import rocketidx.storage as storage

DEFAULT_PART_ENTRIES = 16 << 20  # key hashes per merge partition, as on Spark
COMMITLOG_SPLIT_BYTES = 128 << 20

FILE_COLUMN_NAMES = (
    "file", "name", "window_id", "window_start_ms", "seq", "begin_timestamp", "end_timestamp", "begin_phy_offset",
    "end_phy_offset", "hash_slot_count", "index_count", "hash_slot_num", "index_num", "entries", "fill_ratio",
    "used_slots", "load_factor", "slot_usage", "expected_used_slots", "mean_chain", "mean_walk", "p50_chain",
    "p90_chain", "p99_chain", "max_chain", "distinct_hashes", "entries_per_hash", "messages", "disk_bytes",
    "apparent_bytes")


class StatsResults:
    """The part of the statistics both engines share once their tables exist.

    Subclasses provide ``_pandas(name)`` (a named table as pandas), ``_group_totals()`` (the key-group
    totals as pandas, CommitLog only) and the attributes ``index_dir``, ``commitlog``, ``manifest``,
    ``targets`` and ``bucket_ms``.
    """

    NAMES = ("files", "chains", "longest_chains", "slot_bins", "buckets", "collisions", "hot_keys", "sizing")
    COMMITLOG_NAMES = ("topics", "topic_buckets", "true_collisions")

    def names(self) -> tuple[str, ...]:
        return self.NAMES + (self.COMMITLOG_NAMES if self.commitlog is not None else ())

    def to_pandas(self, *names: str) -> dict:
        """The named results as pandas DataFrames (all of them by default); every one is small."""
        out = {}
        for name in names or self.names():
            if name == "sizing":
                import pandas as pd
                out[name] = pd.DataFrame(self.sizing_rows())
            else:
                out[name] = self._pandas(name).copy()
        return out

    def sizing_rows(self) -> list[dict]:
        """The ``sizing`` table (:func:`rocketidx.stats.sizing.sizing_advice` of the observed windows)."""
        f = self._pandas("files")
        f = f[f["entries"] > 0]
        if len(f) == 0:
            return []
        window_ms = (self.manifest.window_ms if self.manifest is not None else None) or 0
        S, I = int(f["hash_slot_num"].iloc[0]), int(f["index_num"].iloc[0])
        # A bare directory or a one-window build is one sequence of files, as a broker writes them.
        windowed = window_ms > 0 and f["window_id"].notna().all()
        if windowed:
            per_window = f.groupby("window_id")["entries"].sum().to_numpy()
            span = (int(f["window_id"].max()) - int(f["window_id"].min()) + 1) * window_ms
        else:
            per_window = np.array([f["entries"].sum()])
            span = int(f["end_timestamp"].max()) - int(f["begin_timestamp"].min())
        fullest = f.loc[f["entries"].idxmax()]
        observed = {"mean_chain": round(float(fullest["mean_chain"]), 3),
                    "files_per_day": round(len(f) * MS_PER_DAY / max(span, 60_000), 2)}
        return sizing_advice(per_window, span, windowed, f["entries"].sum() / f["distinct_hashes"].sum(),
                                  (S, I), self.targets, observed)

    def summary(self) -> dict:
        """Totals for a terminal or a script: one small dict of plain numbers."""
        files = self._pandas("files")
        coll = self._pandas("collisions")
        entries = int(files["entries"].sum())
        used = int(files["used_slots"].sum())
        chains = self._pandas("chains")
        total_slots = chains.groupby("chain_length")["slots"].sum()
        p50, p90, p99 = core.histogram_percentiles(total_slots.index.to_numpy(), total_slots.to_numpy())
        out = {
            "index": storage.redact(self.index_dir), "files": len(files), "entries": entries,
            "windows": int(files["window_id"].nunique()) if files["window_id"].notna().any() else None,
            "hash_slot_num": int(files["hash_slot_num"].iloc[0]) if len(files) else None,
            "index_num": int(files["index_num"].iloc[0]) if len(files) else None,
            "bucket_ms": self.bucket_ms,
            "begin_timestamp": int(files.loc[files["entries"] > 0, "begin_timestamp"].min()) if entries else None,
            "end_timestamp": int(files["end_timestamp"].max()) if entries else None,
            "messages": int(files["messages"].sum()),
            "mean_fill_ratio": float(files["fill_ratio"].mean()) if len(files) else 0.0,
            "used_slots": used, "mean_chain": entries / used if used else 0.0,
            "p50_chain": p50, "p90_chain": p90, "p99_chain": p99,
            "max_chain": int(files["max_chain"].max()) if len(files) else 0,
            "distinct_key_hashes": int(coll["key_hashes"].sum()),
            "key_hashes_with_repeats": int(coll.loc[coll["entries_per_hash"] >= 2, "key_hashes"].sum()),
            "disk_bytes": int(files["disk_bytes"].sum()), "apparent_bytes": int(files["apparent_bytes"].sum()),
        }
        if self.commitlog is not None:
            t = self._group_totals()
            shipped_hashes, shipped_keys = int(t["hashes"].sum()), int(t["keys"].sum())
            # A hash that did not pass the filter is held once in the index: one key, one entry.
            keys = shipped_keys + (out["distinct_key_hashes"] - shipped_hashes)
            out.update({
                "distinct_keys": keys,
                "colliding_key_hashes": int(t["colliding_hashes"].sum()),
                "colliding_keys": int(t["colliding_keys"].sum()),
                "colliding_entries": int(t["colliding_entries"].sum()),
                "share_of_keys_needing_filtering": int(t["colliding_keys"].sum()) / keys if keys else 0.0,
                "share_of_entries_needing_filtering": int(t["colliding_entries"].sum()) / entries if entries else 0.0,
            })
        return out

    def unpersist(self) -> None:
        """Nothing is cached outside this object in process (the Spark results free their caches)."""


def commitlog_ranges(commitlog: str, lo: int, hi: int, split_bytes: int) -> list:
    """The byte ranges (:class:`rocketidx.commitlog.segments.SegmentRange`) where the records of offsets
    ``[lo, hi]`` start."""
    from rocketidx.commitlog.segments import list_segments
    from rocketidx.commitlog.splits import SplitSpec, plan_splits
    segments = list_segments(commitlog, from_offset=lo, to_offset=hi + 1)
    return [r for r in plan_splits(segments, SplitSpec(split_bytes=split_bytes))
            if r.segment.base_offset + r.end > lo and r.segment.base_offset + r.start <= hi]


def index_bytes(index_dir: str | os.PathLike, hash_slot_num: int | None = None,
                index_num: int | None = None) -> int:
    """Allocated bytes of an index's files (what a stats pass reads; sparse holes cost nothing)."""
    refs, _ = core.file_refs(str(index_dir), hash_slot_num, index_num)
    return sum(storage.footprint(r.path)[0] for r in refs)


class LocalIndexStats(StatsResults):
    """Statistics of one index computed in this process (see the module docstring)."""

    def __init__(self, index_dir: str, commitlog: str | None, *, hash_slot_num: int | None = None,
                 index_num: int | None = None, bucket_ms: int | None = None, top: int = DEFAULT_TOP,
                 bins: int = core.DEFAULT_BINS, targets: SizingTargets = SizingTargets(),
                 filter_bits: int = DEFAULT_FILTER_BITS, check_crc: bool = True,
                 split_bytes: int = COMMITLOG_SPLIT_BYTES):
        import pandas as pd
        refs, manifest = core.file_refs(index_dir, hash_slot_num, index_num)
        if not refs:
            raise StoreLayoutError(storage.redact(index_dir), "no IndexFiles found")
        if commitlog is not None:
            from rocketidx.commitlog.segments import list_segments
            list_segments(commitlog)  # a typed error naming the path before any work
        self.index_dir, self.commitlog, self.manifest, self.targets = index_dir, commitlog, manifest, targets
        self.top, self.filter_bits, self.check_crc, self.split_bytes = top, filter_bits, check_crc, split_bytes
        headers = [core.read_header(r.path, r.hash_slot_num, r.index_num) for r in refs]
        live = [h for h in headers if h.index_count > 1]
        span = (max(h.end_timestamp for h in live) - min(h.begin_timestamp for h in live)) if live else 0
        self.bucket_ms = bucket_ms or core.auto_bucket_ms(max(1, span))
        total = sum(h.index_count - 1 for h in headers)
        parts = max(1, math.ceil(total / DEFAULT_PART_ENTRIES))
        files, chains, longest, bins_rows, buckets = [], [], [], [], []
        blobs: dict[int, tuple[list[bytes], list[bytes]]] = {p: ([], []) for p in range(parts)}
        for ref in refs:
            s = core.scan_file(ref, bucket_ms=self.bucket_ms, top=top, bins=bins)
            files.append(s.row)
            name = s.row["name"]
            chains.append(pd.DataFrame({"file": ref.file_index, "name": name, "chain_length": s.chain_lengths,
                                        "slots": s.chain_slots}))
            longest += [dict(r, file=ref.file_index, name=name) for r in s.longest]
            bins_rows.append(pd.DataFrame(dict(s.bins, file=ref.file_index, name=name)))
            buckets.append(pd.DataFrame(s.buckets))
            for p, h, c in split_key_counts(s.key_hashes, s.key_counts, parts):
                blobs[p][0].append(h)
                blobs[p][1].append(c)
        self._tables = {
            "files": pd.DataFrame(files, columns=list(FILE_COLUMN_NAMES)).sort_values("file", kind="stable"),
            "chains": _frame(chains, ["file", "name", "chain_length", "slots"], ["file", "chain_length"]),
            "longest_chains": _longest(longest, top),
            "slot_bins": _frame(bins_rows, ["file", "name", "bin", "first_slot", "slots", "used_slots", "entries"],
                                ["file", "bin"]),
            "buckets": _buckets(buckets),
        }
        mult, tops, flt = [], [], np.zeros(1 << (filter_bits - 3), np.uint8)
        for p in range(parts):  # one hash partition's counts in memory at a time
            k = merge_key_counts(blobs[p][0], blobs[p][1], top)
            blobs[p] = ([], [])
            mult.append(pd.DataFrame(k.multiplicity))
            tops += k.top
            flt |= hash_filter(np.concatenate([k.repeated, np.array([t["key_hash"] for t in k.top], np.int32)]),
                                    filter_bits)
        coll = pd.concat(mult, ignore_index=True).groupby("entries_per_hash", as_index=False)["key_hashes"].sum()
        coll["entries"] = coll["entries_per_hash"] * coll["key_hashes"]
        self._tables["collisions"] = coll.sort_values("entries_per_hash").reset_index(drop=True)
        top_df = pd.DataFrame(tops, columns=["key_hash", "entries", "files"])
        self._top = top_df.sort_values(["entries", "key_hash"], ascending=[False, True]).head(top).reset_index(drop=True)
        self._filter = flt
        self._groups_df = None
        self._totals = None
        if commitlog is None:
            self._tables["hot_keys"] = self._top

    # -- the CommitLog side, on first use ----------------------------------------------------------

    def _commitlog_pass(self) -> None:
        import pandas as pd

        from rocketidx.commitlog.segments import open_segment
        from rocketidx.commitlog.readers import RangeReader
        f = self._tables["files"]
        f = f[f["entries"] > 0]
        lo = int(f["begin_phy_offset"].min()) if len(f) else 0
        hi = int(f["end_phy_offset"].max()) if len(f) else -1
        ranges = commitlog_ranges(self.commitlog, lo, hi, self.split_bytes) if hi >= lo else []
        tbs, kts = [], []
        for rng in ranges:
            buf = open_segment(rng.segment)
            try:
                for batch in RangeReader(buf, rng, check_crc=self.check_crc):
                    tb, kt = commitlog_partials(batch, bucket_ms=self.bucket_ms, key_filter=self._filter,
                                                     phy_range=(lo, hi))
                    tbs.append(tb)
                    kts.append(kt)
            finally:
                if hasattr(buf, "close"):
                    buf.close()
        tb = (pa.concat_tables(tbs) if tbs else TOPIC_BUCKET_ROWS.empty_table()).to_pandas()
        sums = ["messages", "indexed_messages", "entries"]
        topic_buckets = tb.groupby(["topic", "bucket_start_ms"], as_index=False)[sums].sum()
        topic_buckets["keys_per_message"] = topic_buckets["entries"] / topic_buckets["messages"]
        self._tables["topic_buckets"] = topic_buckets.sort_values(["topic", "bucket_start_ms"]).reset_index(drop=True)
        topics = topic_buckets.groupby("topic", as_index=False)[sums].sum()
        topics["keys_per_message"] = topics["entries"] / topics["messages"]
        self._tables["topics"] = topics.sort_values(["entries", "topic"], ascending=[False, True]).reset_index(drop=True)
        wanted = set(int(h) for h in self._top["key_hash"])
        totals, groups = merge_key_groups(kts, wanted, 5)
        self._totals = pd.DataFrame([totals])
        g = pd.DataFrame(groups, columns=["key_hash", "distinct_keys", "entries", "keys", "key_entries"])
        self._tables["true_collisions"] = g[g["distinct_keys"] >= 2].sort_values(
            ["distinct_keys", "entries", "key_hash"], ascending=[False, False, True]).reset_index(drop=True)
        hot = self._top.merge(g[["key_hash", "distinct_keys", "keys", "key_entries"]], on="key_hash", how="left")
        self._tables["hot_keys"] = hot.sort_values(["entries", "key_hash"], ascending=[False, True]).reset_index(drop=True)

    def _pandas(self, name: str):
        if name not in self._tables:
            if name in self.COMMITLOG_NAMES + ("hot_keys",) and self.commitlog is not None:
                self._commitlog_pass()
            else:
                raise KeyError(name)
        return self._tables[name]

    def _group_totals(self):
        if self._totals is None:
            self._commitlog_pass()
        return self._totals


def _frame(parts: list, columns: list[str], order: list[str]):
    import pandas as pd
    df = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=columns)
    return df[columns].sort_values(order, kind="stable").reset_index(drop=True)


def _longest(rows: list[dict], top: int):
    import pandas as pd
    df = pd.DataFrame(rows, columns=["file", "name", "slot", "length", "distinct_hashes", "head_item"])
    return df.sort_values(["length", "file", "slot"], ascending=[False, True, True]).head(top).reset_index(drop=True)


def _buckets(parts: list):
    import pandas as pd
    df = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=["bucket_start_ms", "entries",
                                                                                "messages"])
    b = df.groupby("bucket_start_ms", as_index=False)[["entries", "messages"]].sum()
    b["keys_per_message"] = b["entries"] / b["messages"]
    return b.sort_values("bucket_start_ms").reset_index(drop=True)


def index_stats_local(index_dir: str | os.PathLike, commitlog: str | os.PathLike | None = None, *,
                      check_log: bool = True, **kw) -> LocalIndexStats:
    """:class:`LocalIndexStats` of ``index_dir`` (and its keys in ``commitlog``); options as
    :func:`rocketidx.spark.stats.index_stats` takes them, less the Spark ones. A ``commitlog`` the index
    was not built from raises :class:`rocketidx.errors.IndexLogMismatchError` (a sample of its entries:
    :mod:`rocketidx.query.logmatch`; ``check_log=False``: the caller has checked)."""
    if commitlog is not None and check_log:
        from rocketidx.query.logmatch import require_index_of_log
        require_index_of_log(index_dir, commitlog, kw.get("hash_slot_num"), kw.get("index_num"),
                             check_crc=kw.get("check_crc", True))
    return LocalIndexStats(str(index_dir), None if commitlog is None else str(commitlog), **kw)


__all__ = ["LocalIndexStats", "StatsResults", "commitlog_ranges", "index_bytes", "index_stats_local"]
