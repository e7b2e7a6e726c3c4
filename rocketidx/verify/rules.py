"""Which release's index rules a store's own IndexFiles follow, so that a check or a repair made with the
other rules is refused in one line instead of calling every file wrong or writing files the broker would
not have.

From RocketMQ 5.4.0 a broker indexes one more entry per message whose TAGS is not empty,
``topic#T#TAGS`` (5.5.0 IndexService.java:267-277); no broker.conf key says which rules a store has. The
look: the first items of the newest IndexFile that holds any, the messages they point at, and for each
tagged one whether the file holds its tag entry beside it. A message's entries are put one after the other,
so its tag entry, if the broker made one, lies within a few items of its first.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa

from rocketidx.commitlog.keys import key_hash
from rocketidx.errors import ConfigError
import rocketidx.layout as L

SAMPLE_ITEMS = 2000  # items read from the file's start
SAMPLE_MESSAGES = 200  # distinct messages looked at among them
AT_LEAST = 5  # tagged messages needed to tell


def tag_entries_seen(files, commitlog) -> tuple[bool | None, str, int, int]:
    """(whether the newest IndexFile holding items has tag entries, its path, tagged messages looked at,
    of those with their tag entry); None when fewer than :data:`AT_LEAST` tagged messages show."""
    from rocketidx.query.lookup import read_messages_at
    for f in reversed(files):
        count = int(f.header.index_count)
        if count <= L.FIRST_INDEX:
            continue
        hi = min(count, L.FIRST_INDEX + SAMPLE_ITEMS)
        items = f.read_item_fields(L.FIRST_INDEX, hi, ("key_hash", "phy_offset"))
        phys = list(dict.fromkeys(items["phy_offset"].tolist()))[:SAMPLE_MESSAGES]
        table, found = read_messages_at(commitlog, phys)
        rows = table.select(["topic", "tags", "sys_flag"]).to_pylist()
        tagged = [(p, r) for p, r, ok in zip(phys, rows, found) if ok and r["tags"]
                  and (r["sys_flag"] & L.SYSFLAG_TX_MASK) != L.SYSFLAG_TX_ROLLBACK]
        if len(tagged) < AT_LEAST:
            return None, f.path, len(tagged), 0
        keys = pa.array([f"{r['topic']}#{L.INDEX_TAG_TYPE}#{r['tags']}" for _, r in tagged], pa.string())
        want = set(zip(key_hash(keys).tolist(), (p for p, _ in tagged)))
        have = set(zip(items["key_hash"].tolist(), items["phy_offset"].tolist()))
        hits = len(want & have)
        return hits * 2 > len(tagged), f.path, len(tagged), hits
    return None, "", 0, 0


def check_index_rules(files, commitlog, tag_entries: bool) -> None:
    """A ConfigError naming the file when its entries follow the other release's rules."""
    seen, path, looked, hits = tag_entries_seen(files, commitlog)
    if seen is None or seen == tag_entries:
        return
    if seen:
        raise ConfigError("--broker-version", "not given or before 5.4",
                          f"{path} holds 5.4+ tag entries (topic#T#TAGS: {hits} of {looked} tagged messages); "
                          "give the release that wrote the store, e.g. --broker-version 5.5.0")
    raise ConfigError("--broker-version", "5.4 or later",
                      f"{path} holds no tag entry for {looked} tagged messages: a release before 5.4 wrote it; "
                      "give that release (e.g. --broker-version 5.3.3)")
