"""rocketidx: rebuild, look up, verify and inspect Apache RocketMQ's IndexFiles and ConsumeQueues from
CommitLog segments, and repair a stopped broker's store.

What notebooks and scripts use::

    from rocketidx import build_index, open_index, query_key, verify_index, index_stats

    manifest, summary = build_index("store/commitlog", "out")   # in this process
    files = open_index("out")                                   # oldest first
    offsets = query_key(files, "Topic0", "K1")                  # queryMsgByKey's offsets, newest first
    report = verify_index(files, "store/commitlog")             # .clean, .problems
    stats = index_stats("out", "store/commitlog")               # in process or on Spark, by size

ConsumeQueues: ``build_index(..., BuildConfig(targets="consumequeue"))`` (or ``"index,consumequeue"``), then
:func:`open_consumequeues` and :func:`query_queue`. A stopped broker's store: :func:`verify_store` (every
area against the CommitLog, and what a restart would do) and :func:`repair_store` (``backfill --store``).

Each name is loaded on first use, so ``import rocketidx`` stays cheap and never loads pyspark; the
Spark engine is imported only when ``index_stats`` picks it. The package's folders follow the data:
``commitlog/`` (segments -> records -> entries) -> ``index/`` (windows -> IndexFiles) and ``consumequeue/``
-> ``output/`` (versioned, atomically committed) -> ``build/``; then ``query/``, ``verify/``, ``stats/``,
``backfill/``, ``spark/``, ``ops/`` (one entry point per operation, each taking a request) and ``cli/``
(docs/internals.md).
"""
from __future__ import annotations

import os
from importlib import import_module

__all__ = ["build_index", "open_index", "query_key", "verify_index", "index_stats", "open_consumequeues",
           "query_queue", "verify_store", "repair_store", "BuildConfig", "RocketIdxError",
           "BuildRequest", "StatsRequest", "VerifyRequest", "QueryRequest",
           "TimeIndexRequest", "BackfillRequest"]

# Names defined elsewhere, with the module that defines them; the others are the small wrappers below. The
# operations (rocketidx.ops: one entry point each, taking one of the request types) are these modules' own.
_LAZY = {
    "build_index": "rocketidx.build.in_process",
    "open_index": "rocketidx.query.lookup",
    "verify_index": "rocketidx.verify.core",
    "index_stats": "rocketidx.ops.stats",
    "query_key": "rocketidx.ops.query",
    "query_queue": "rocketidx.ops.query",
    "open_consumequeues": "rocketidx.output.open",
    "BuildConfig": "rocketidx.config",
    "BuildRequest": "rocketidx.config",
    "StatsRequest": "rocketidx.config",
    "VerifyRequest": "rocketidx.config",
    "QueryRequest": "rocketidx.config",
    "TimeIndexRequest": "rocketidx.config",
    "BackfillRequest": "rocketidx.config",
    "RocketIdxError": "rocketidx.errors",
}


def __getattr__(name: str):
    if name in _LAZY:
        value = getattr(import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'rocketidx' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


def verify_store(store: str | os.PathLike, **options):
    """``verify --store``: check a stopped broker's store (``index/``, ``consumequeue/``, ``checkpoint``)
    against its ``commitlog/``, in this process. Returns a report: ``.clean``, ``.areas`` (a verify report
    per area: ``.problems``, ``.counts``), ``.state`` (abort, lock, checkpoint, where a restart resumes),
    ``.restart`` (what a restart does about each kind of problem) and ``.as_dict()`` (``--json``).

    ``options``: as :func:`rocketidx.verify.store.verify_store` takes them (``hash_slot_num``, ``index_num``,
    ``check_crc``, ...). Details: docs/verify.md.
    """
    from rocketidx.verify.store import verify_store as check
    return check(store, **options)


def repair_store(store: str | os.PathLike, **options):
    """``backfill --store``: repair a stopped broker's index and ConsumeQueues from one read of its CommitLog,
    under the broker's lock, with a backup of every file replaced or removed and a journal an interrupted
    repair is rolled back from. ``dry_run=True`` plans and changes nothing. Returns what was planned and
    done (``.queues``, ``.index``: each part's plan, files installed, backup directory).

    ``options``: as :func:`rocketidx.backfill.repair.repair_store` takes them (``targets``, ``dry_run``,
    sizes, ``log`` for the progress lines, print by default). Details: docs/backfill.md.
    """
    from rocketidx.backfill.repair import repair_store as repair
    return repair(store, **options)
