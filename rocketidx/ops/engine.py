"""The engine an operation runs on: the one call of :func:`rocketidx.build.engine.choose_engine`.

In: the operation's resolved engine flags (:class:`rocketidx.config.EngineRequest`) and the bytes it will
read. Out: the :class:`rocketidx.build.engine.Engine`, which the operation reports. Stays true: every
operation that can run on Spark asks here, so ``--in-process``, ``--master``, spark-submit and the
break-even mean the same for all of them.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

from rocketidx.build.engine import Engine, choose_engine
from rocketidx.config import EngineRequest


def engine_for(request: EngineRequest, work_bytes: int, *, spark_only: str | None = None,
               in_process_only: str | None = None, workers: int | None = None) -> Engine:
    """The engine for ``work_bytes`` under ``request``'s flags; ``spark_only``/``in_process_only`` name a
    reason one engine cannot run the operation (verify's ``--spark`` is one: Spark whatever the size);
    ``workers``: the operation runs in process on that many (a build), and the size picks no engine."""
    if request.spark_flag and spark_only is None:
        spark_only = "--spark"
    return choose_engine(work_bytes, in_process=request.in_process, master=request.master,
                         break_even=request.settings.break_even, spark_only=spark_only,
                         in_process_only=in_process_only, workers=workers)


@contextmanager
def held_session(request: EngineRequest) -> Iterator:
    """A Spark session under ``request``'s settings, held across several operations (a notebook's, the
    demo's): an operation run inside finds it active and neither starts nor stops one of its own."""
    from rocketidx.spark.session import spark_session
    with spark_session(request.settings, sources=False) as spark:
        yield spark
