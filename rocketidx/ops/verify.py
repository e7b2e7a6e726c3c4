"""Verification: :func:`verify` takes a :class:`rocketidx.config.VerifyRequest` and returns a :class:`VerifyResult`.

In: an index (a build output or a broker's ``store/index``), ConsumeQueues, or a stopped broker's store,
and for the first two optionally the CommitLog they should describe. Out: the report (``.clean``,
``.problems``, ``.counts``; a store's also its state and what a restart would do) and the engine that ran.

Stays true: files that cannot be opened are reported, not raised, and the rest is checked without them; an
index whose build saw PHYSICALOFFSET fields out of place is judged in one in-process pass (a split read
cannot follow such a log); queue files checked without a CommitLog are checked here, no engine runs.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

from rocketidx.build.engine import Engine, data_bytes
from rocketidx.commitlog.entries import index_rules
from rocketidx.commitlog.segments import list_segments
from rocketidx.config import VerifyRequest, broker_release
from rocketidx.ops.engine import engine_for
from rocketidx.ops.progress import SILENT, Progress
import rocketidx.storage as storage

__all__ = ["VerifyRequest", "VerifyResult", "verify"]


@dataclass(frozen=True)
class VerifyResult:
    """The report (:class:`rocketidx.verify.report.VerifyReport`, or for a store
    :class:`rocketidx.verify.store.StoreReport`) and the engine that checked (None: no engine ran)."""

    report: object
    engine: Engine | None

    @property
    def clean(self) -> bool:
        return self.report.clean


def verify(request: VerifyRequest, progress: Progress | None = None) -> VerifyResult:
    """Check what ``request`` names: a store, ConsumeQueues, or an index. ``progress`` hears the engine
    before the check runs (:meth:`rocketidx.ops.progress.Progress.engine`)."""
    progress = progress or SILENT
    with index_rules(broker_release(request.broker_version).tag_entries):  # held here, as every operation does
        if request.store:
            return _verify_store(request, progress)
        if request.consumequeue:
            return _verify_queues(request, progress)
        return _verify_index(request, progress)


def _delays(request: VerifyRequest) -> tuple[int, ...]:
    from rocketidx.commitlog.dispatch import DEFAULT_DELAYS_MS, delay_levels_ms
    return DEFAULT_DELAYS_MS if request.delay_levels is None else delay_levels_ms(request.delay_levels)


def _verify_index(r: VerifyRequest, progress: Progress) -> VerifyResult:
    from rocketidx.verify.core import BuildRead, open_for_verify, verify_index
    from rocketidx.verify.report import VerifyReport
    pre = VerifyReport()
    files, manifest = open_for_verify(r.index, r.hash_slot_num, r.index_num, pre)
    windows = manifest.window_ms if manifest else None
    window_ids = manifest.window_ids if manifest else None
    if pre.counts:  # files that could not be opened are left out of the rest
        window_ids = None
    rules = BuildRead.of(manifest)
    work = sum(min(storage.footprint(f.path)) for f in files)
    if r.commitlog:
        work += data_bytes(list_segments(r.commitlog))
    out_of_place = ("the build saw PHYSICALOFFSET fields that are not their records' positions: judged in one "
                    "in-process pass") if rules.fields_out_of_place and r.commitlog and not r.engine.spark_flag else None
    engine = engine_for(r.engine, work, in_process_only=out_of_place)
    progress.engine(engine)
    if engine.spark:
        from rocketidx.spark.session import spark_session
        from rocketidx.spark.verify import verify_index_spark
        settings = r.engine.settings
        with spark_session(settings) as spark, progress.on_spark(spark):
            report = verify_index_spark(files, r.commitlog, spark=spark, window_ms=windows, window_ids=window_ids,
                                        check_crc=r.check_crc, split_bytes=settings.split_bytes, rules=rules)
    else:
        report = verify_index(files, r.commitlog, window_ms=windows, window_ids=window_ids, check_crc=r.check_crc,
                              rules=rules)
    report.problems[:0] = pre.problems
    report.counts.update(pre.counts)
    return VerifyResult(report, engine)


def _verify_queues(r: VerifyRequest, progress: Progress) -> VerifyResult:
    """The files alone here; with a CommitLog, its queues rebuilt on the engine the rule picks (Spark, or this
    process), the comparison made here."""
    from rocketidx.output.open import consumequeue_dir
    from rocketidx.verify.queues import verify_consumequeues
    delays = _delays(r)
    directory = consumequeue_dir(r.consumequeue)
    engine = None
    if r.commitlog:
        engine = engine_for(r.engine, data_bytes(list_segments(r.commitlog)))
        progress.engine(engine)
    if engine is not None and engine.spark:
        from rocketidx.spark.session import spark_session
        from rocketidx.spark.verify import verify_consumequeues_spark
        settings = r.engine.settings
        with spark_session(settings) as s, progress.on_spark(s):
            report = verify_consumequeues_spark(directory, r.commitlog, spark=s, split_bytes=settings.split_bytes,
                                                delays_ms=delays, check_crc=r.check_crc, light_queues=r.light_queues)
    else:
        report = verify_consumequeues(directory, r.commitlog, check_crc=r.check_crc, delays_ms=delays,
                                      light_queues=r.light_queues)
    return VerifyResult(report, engine)


def _verify_store(r: VerifyRequest, progress: Progress) -> VerifyResult:
    """Every area of a stopped broker's store against its CommitLog, on the engine the rule picks for the
    store's CommitLog."""
    import rocketidx.layout as L
    from rocketidx.verify.store import verify_store
    cq_size = r.broker.get("mappedFileSizeConsumeQueue")
    kw = dict(hash_slot_num=r.hash_slot_num, index_num=r.index_num, delays_ms=_delays(r), check_crc=r.check_crc,
              cq_file_size=L.cq_file_size(cq_size or L.DEFAULT_CQ_FILE_SIZE), broker=dict(r.broker),
              broker_source=f"--broker-conf {r.broker_conf}" if r.broker_conf else None,
              broker_version=r.broker_version)
    log = os.path.join(r.store, "commitlog")
    engine = engine_for(r.engine, data_bytes(list_segments(log)) if os.path.isdir(log) else 0)
    progress.engine(engine)
    if engine.spark:
        from rocketidx.spark.session import spark_session
        from rocketidx.spark.verify import verify_store_spark
        settings = r.engine.settings
        with spark_session(settings) as s, progress.on_spark(s):
            report = verify_store_spark(r.store, spark=s, split_bytes=settings.split_bytes, **kw)
    else:
        report = verify_store(r.store, **kw)
    return VerifyResult(report, engine)
