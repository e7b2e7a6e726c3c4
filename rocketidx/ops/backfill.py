"""The repair of a stopped broker's store: :func:`backfill` takes a :class:`rocketidx.config.BackfillRequest` and
returns a :class:`BackfillOutcome`.

In: the request (the store, the targets, the sizes, the engine flags). Out: the index backfill's result and
the queues' repair (:mod:`rocketidx.backfill.repair`, :mod:`rocketidx.backfill.index`), the engine the rebuild
ran on and Spark's figures when it ran there; the plans go to ``log`` line by line as they are made.

Stays true: the store must be a local directory (its lock, a backup and an atomic swap need one); the engine
is chosen once the range to rebuild is known, from its bytes, through :func:`rocketidx.ops.engine.engine_for`
like every operation's; the broker release's index rules hold for the whole repair.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from rocketidx.backfill.queues import QueueRepair
from rocketidx.backfill.index import BackfillResult
from rocketidx.build.engine import Engine, data_bytes
from rocketidx.commitlog.entries import index_rules
from rocketidx.commitlog.segments import list_segments
from rocketidx.config import BackfillRequest, EngineRequest
from rocketidx.errors import StoreLayoutError
from rocketidx.ops.engine import engine_for
import rocketidx.storage as storage

__all__ = ["BackfillRequest", "BackfillOutcome", "backfill"]


@dataclass(frozen=True)
class BackfillOutcome:
    """What a repair did: the index backfill's result (None: not a target), the queues' repair (None: not a
    target, or skipped), why the queues were skipped, the queues' part's wall time, the engine the rebuild
    ran on (None: nothing was rebuilt) and Spark's figures."""

    index: BackfillResult | None
    queues: QueueRepair | None
    queues_skipped: str | None
    queues_wall_s: float | None
    engine: Engine | None
    spark: dict | None


class _EngineBuilder:
    """The repair's builder: when the range to rebuild is known, the engine for its bytes runs the in-process
    build or the Spark one (a session is started only then)."""

    def __init__(self, request: EngineRequest):
        self.request = request
        self.engine: Engine | None = None
        self.spark = None

    def __call__(self, commitlog, out, config, *, start_offset=None, skip_entries=0, name_after=None,
                 time_index="auto"):
        from rocketidx.build.in_process import build_index
        segments = list_segments(commitlog, from_offset=start_offset)
        self.engine = engine_for(self.request, data_bytes(segments, start_offset))
        if not self.engine.spark:
            return build_index(commitlog, out, config, segments=segments, start_offset=start_offset,
                               skip_entries=skip_entries, name_after=name_after, time_index=time_index)
        from rocketidx.spark.backfill import SparkBuilder
        if config.batch_queues:  # rebuilt in process only for now: the repair then leaves batchconsumequeue/ alone
            config = replace(config, batch_topics=())
        self.spark = SparkBuilder(self.request.settings)
        return self.spark(commitlog, out, config, start_offset=start_offset, skip_entries=skip_entries,
                          name_after=name_after, time_index=time_index)

    def close(self) -> None:
        if self.spark is not None:
            self.spark.close()


def backfill(request: BackfillRequest, log=print) -> BackfillOutcome:
    """Repair what ``request`` asks for in the stopped broker's store (a dry run: the plans only)."""
    r = request
    if storage.is_remote(r.store):
        raise StoreLayoutError(storage.redact(r.store), "backfill writes into a stopped broker's local store (its "
                                                        "lock, a backup and an atomic swap need a local disk); "
                                                        "give the store's path on the broker's machine")
    args = dict(hash_slot_num=r.hash_slot_num, index_num=r.index_num, window_ms=r.window_ms, timezone_name=r.timezone,
                dry_run=r.dry_run, check_crc=r.check_crc, log=log)
    builder = _EngineBuilder(r.engine)
    queues = skipped = wall = None
    try:
        with index_rules(r.release.tag_entries):
            if "consumequeue" in r.targets:
                from rocketidx.backfill.repair import repair_store
                rs = repair_store(r.store, targets=r.targets, cq_file_size=r.cq_file_size, delay_levels=r.delay_levels,
                                  builder=builder, remove_unexplained=r.remove_unexplained,
                                  light_queues=r.light_queues, batch_file_size=r.batch_file_size,
                                  queue_store=r.queue_store, rocksdb_compression=r.rocksdb_compression,
                                  rocksdb_light_queues=r.rocksdb_light_queues, **args)
                queues, index, wall = rs.queues, rs.index, rs.wall_s
                skipped = "consumequeue/ is a RocksDB database" if queues is None else None
            else:
                from rocketidx.backfill.index import run_backfill
                index = run_backfill(r.store, builder=builder, **args)
    finally:
        builder.close()
    return BackfillOutcome(index, queues, skipped, wall, builder.engine,
                           (builder.spark.stats if builder.spark else None) or None)
