"""What every rocketidx Spark job shares: task set-up, Arrow -> Spark schemas, typed errors back to the driver.

In: the Arrow schemas and task functions of :mod:`rocketidx.spark.stats`, :mod:`rocketidx.spark.verify`.
Out: Spark schemas, ``applyInArrow``-ready functions, and the typed error a task raised, raised again on
the driver.

Stays true: nothing here holds state; a task's typed error keeps its type, file and byte offset on the
driver, so the CLI's exit code 2 and callers' ``except`` clauses see what the task saw.
"""
from __future__ import annotations

import re
from contextlib import contextmanager

import pyarrow as pa

from rocketidx.errors import CorruptIndexError, CorruptRecordError


def spark_schema(schema: pa.Schema):
    """The Spark ``StructType`` of an Arrow schema (``mapInArrow``/``applyInArrow`` want one)."""
    from pyspark.sql.pandas.types import from_arrow_schema
    return from_arrow_schema(schema)


def task_setup() -> None:
    """Per-task set-up every rocketidx Spark task does (:func:`rocketidx.spark.session.tune_python_worker`)."""
    from rocketidx.spark.session import tune_python_worker
    tune_python_worker()


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
