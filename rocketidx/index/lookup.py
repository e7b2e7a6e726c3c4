"""A key's offsets in IndexFiles, with ``IndexService.queryOffset`` semantics."""
from __future__ import annotations

from rocketidx.commitlog.keys import key_hash_py
from rocketidx.index.reader import IndexFile
import rocketidx.layout as L


def query_offsets(files: list[IndexFile], topic: str, key: str, begin: int = 0, end: int = 2**63 - 1,
                  max_num: int = L.DEFAULT_MAX_MSGS_NUM_BATCH,
                  max_msgs_num_batch: int = L.DEFAULT_MAX_MSGS_NUM_BATCH) -> list[int]:
    """``IndexService.queryOffset`` over ``files`` (oldest first): offsets in the broker's order."""
    max_num = min(max_num, max_msgs_num_batch)
    kh = key_hash_py(f"{topic}#{key}")
    out: list[int] = []
    for f in reversed(files):
        if f.is_time_matched(begin, end):
            f.select_phy_offsets(out, kh, max_num, begin, end)
        if f.header.begin_timestamp < begin:
            break
        if len(out) >= max_num:
            break
    return out
