"""What every rocketidx Spark job shares: task set-up, Arrow -> Spark schemas, typed errors back to the driver.

In: the Arrow schemas and task functions of the data sources, the build's writer, :mod:`rocketidx.spark.stats`
and :mod:`rocketidx.spark.verify`.
Out: Spark schemas, ``applyInArrow``-ready functions, and the typed error a task raised, raised again on
the driver.

Stays true: nothing here holds state; a task's typed error keeps its type, file and byte offset on the
driver, so the CLI's exit code 2 and callers' ``except`` clauses see what the task saw.
"""
from __future__ import annotations

import os
import re
import sys
from contextlib import contextmanager

import pyarrow as pa

from rocketidx.errors import CorruptIndexError, CorruptRecordError


def spark_schema(schema: pa.Schema):
    """The Spark ``StructType`` of an Arrow schema (``mapInArrow``/``applyInArrow`` want one)."""
    from pyspark.sql.pandas.types import from_arrow_schema
    return from_arrow_schema(schema)


def task_setup() -> None:
    """What every rocketidx task does first: in a Python worker, once, make PySpark's per-task housekeeping
    cheap.

    Between tasks a reused worker runs ``importlib.invalidate_caches()`` and ``gc.collect()``. On
    CPython 3.11 the first makes every ``zipimporter`` re-read its archive's directory (pyspark.zip's 16
    package importers: ~0.3 s of CPU per task on the reference machine, more than reading a 64 MiB
    split); the second walks every object numpy, pyarrow, pandas and pyspark created at import (0.06
    to 0.2 s per task). An unchanged archive keeps its directory, and the objects alive now (modules,
    their tables) are frozen out of the collector, so both cost milliseconds from the next task on.
    """
    import gc
    import zipimport
    cls = zipimport.zipimporter
    if getattr(cls, "_rocketidx_stable", False):
        return
    reread = cls.invalidate_caches

    def invalidate_caches(self) -> None:
        try:
            st = os.stat(self.archive)
            stamp = (st.st_mtime_ns, st.st_size)
        except OSError:
            stamp = None
        if stamp is not None and getattr(self, "_rocketidx_stamp", None) == stamp:
            return
        reread(self)
        self._rocketidx_stamp = stamp

    cls.invalidate_caches = invalidate_caches
    cls._rocketidx_stable = True
    # This task's setup has just re-read every archive: stamp them, so the next task is already free.
    for finder in list(sys.path_importer_cache.values()):
        if isinstance(finder, cls):
            try:
                st = os.stat(finder.archive)
            except OSError:  # the archive is gone: the next task re-reads it, as PySpark would
                continue
            finder._rocketidx_stamp = (st.st_mtime_ns, st.st_size)
    import numpy  # noqa: F401 - imported before freezing, so its objects are frozen too
    import pyarrow  # noqa: F401
    gc.collect()
    gc.freeze()


def grouped(fn, **kw):
    """``fn(table, **kw)`` as a task for ``applyInArrow``, which tells the table form from the iterator
    form by type hints (a ``functools.partial`` has none)."""
    def apply(table: pa.Table) -> pa.Table:
        return fn(table, **kw)
    return apply


_WORKER_ERROR = re.compile(r"rocketidx\.errors\.(CorruptIndexError|CorruptRecordError): (.+?) @ byte (\d+): (.*)")


@contextmanager
def typed_task_errors():
    """A task's typed error reaches the driver as a ``PythonException`` carrying the task's traceback as
    text; raise the typed error (file and byte offset) again, so callers and the CLI's exit code 2 see
    what the task saw. Anything else passes through unchanged."""
    from pyspark.errors import PythonException
    try:
        yield
    except PythonException as e:
        m = _WORKER_ERROR.search(str(e))
        if m is None:
            raise
        cls = CorruptIndexError if m.group(1) == "CorruptIndexError" else CorruptRecordError
        raise cls(m.group(2), int(m.group(3)), m.group(4).strip()) from e


__all__ = ["grouped", "spark_schema", "task_setup", "typed_task_errors"]
