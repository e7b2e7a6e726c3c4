"""``backfill --store`` of a RocksDB consume queue (``storeType=defaultRocksDB``): the database a dispatch of the
whole log makes, written new and swapped in whole.

In: the stopped broker's store, the queues rebuilt from its log (ConsumeQueue files in the repair's staging),
the broker's compression settings. Out: a :class:`RocksPlan` (keep the database, or replace it) and, when
installed, the backup directory.

Stays true: a database equal to the rebuild's (every entry, every ``max`` key, the checkpoint) is kept as it
is, ``min`` keys and all; any other is replaced whole by a new one (never edited in place: RocksDB's files
are one unit), through the swap every repair uses (:mod:`rocketidx.backfill.swap`: its files to the backup,
the new ones in, one rename each, journaled and rolled back after a kill). A ``consumequeue/`` holding
anything but one database's files (queue directories, say) is refused, named: rocketidx does not guess
which of two layouts the broker should load.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import rocketidx.backfill.swap as swap
import rocketidx.consumequeue.rocksdb as R
from rocketidx.backfill.queues import QueuePlan
from rocketidx.broker.store import BrokerStore
from rocketidx.errors import StoreLayoutError
from rocketidx.verify.rocksdb import compare_tables

# RocksJava's CompressionType.getLibraryName() -> the binding's codec (anything else: none, as getCompressionType)
CODECS = {"snappy": "snappy", "z": "zlib", "bzip2": "bz2", "lz4": "lz4", "lz4hc": "lz4hc", "zstd": "zstd"}


@dataclass
class RocksPlan(QueuePlan):
    differences: dict | None = None  # what the store's database lacks or holds wrong (verify's counts)
    entries: int = 0
    unreadable: str | None = None  # why RocksDB could not open the store's database

    def lines(self) -> list[str]:
        what = "keep" if not self.changes else ("write" if self.actions["write"] and not self.actions["replace"]
                                                else "replace")
        out = [f"consumequeue: a RocksDB database (storeType=defaultRocksDB), {self.entries:,} entries rebuilt: "
               f"{what}"]
        if self.unreadable:
            out.append(f"  the store's cannot be opened: {self.unreadable}")
        elif self.differences:
            out.append("  the store's: " + ", ".join(f"{k} {v}" for k, v in sorted(self.differences.items())))
        elif what == "write":
            out.append("  the store has none")
        else:
            out.append("  nothing to change: every entry, max key and the checkpoint are the rebuild's")
        return out


def plan_rocksdb(store: BrokerStore, config, log_start: int) -> tuple[RocksPlan, R.QueueTable]:
    """Whether the store's database is the one a dispatch of its log makes under ``config`` (its delay
    levels, CRC checking and light queues); the table to write if not."""
    from rocketidx.commitlog.dispatch import delay_levels_ms
    want = R.dispatched_table(store.commitlog, delays_ms=delay_levels_ms(config.delay_levels),
                              check_crc=config.check_crc, light_queues=config.light_queues)
    db = store.consumequeue
    plan = RocksPlan(str(store), 0, "RocksDB", entries=want.entry_count)
    names = _db_files(db)
    if not names:
        plan.actions["write"] = ["<database>"]
        return plan, want
    try:
        have = R.read_table(db)
    except StoreLayoutError as e:  # a database RocksDB cannot open (corrupt, half swapped): what a repair is for
        plan.unreadable = e.reason
        plan.differences = {"unreadable": 1}
        plan.actions["replace"] = names
        return plan, want
    report, _ = compare_tables(str(db), have, want, log_start=log_start, redispatch_from=None)
    counts = dict(report.counts)
    if have.checkpoint != want.checkpoint:
        counts["checkpoint"] = 1
    if counts:
        plan.differences = counts
        plan.actions["replace"] = names
    else:
        plan.actions["keep"] = names
    return plan, want


def _db_files(db: Path) -> list[str]:
    """The files of the database at ``db`` ([] without one); anything else there is refused."""
    if not db.is_dir():
        return []
    names = sorted(os.listdir(db))
    if not names:
        return []
    dirs = [n for n in names if (db / n).is_dir()]
    if dirs or not R.is_rocksdb(db):
        raise StoreLayoutError(str(db), "storeType=defaultRocksDB keeps its queues in a RocksDB database here, but "
                                        f"it holds {'directories (' + ', '.join(dirs[:5]) + ')' if dirs else 'no database'}"
                                        ": move them out (or give the broker conf the store was written with)")
    return names


def install_rocksdb(store: BrokerStore, table: R.QueueTable, staged: Path, plan: RocksPlan, stamp: str,
                    logics_ts: int | None, compression: str = "lz4", bottommost: str = "zstd") -> Path:
    """Write ``table`` as a new database at ``staged`` and swap it in for the store's; the backup directory."""
    R.write_table(staged, table, compression=CODECS.get(compression, "none"),
                  bottommost=CODECS.get(bottommost, "none"))
    old = _db_files(store.consumequeue)
    new = sorted(os.listdir(staged))
    plan.actions["write"] = [] if old else new
    return swap.install(swap.Swap(
        store, "consumequeue", staged, tuple(old), tuple(new),
        checkpoint={"logics_msg_timestamp_ms": logics_ts} if logics_ts is not None else {},
        note={"rocksdb": True, "entries": table.entry_count, "logics_msg_timestamp": logics_ts}), stamp)
