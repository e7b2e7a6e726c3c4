"""How an operation reports how far it got, without knowing who listens: :class:`Progress`.

An operation calls :meth:`Progress.engine` once it has chosen its engine, before it runs (verify says it
first), :meth:`Progress.reading` around an in-process read (the hook it yields is called with the
CommitLogReader after every batch) and :meth:`Progress.on_spark` around a Spark job. The base class
shows nothing; the command line's (:class:`rocketidx.cli.progress.CommandProgress`) draws one line on a
terminal.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Callable, Iterator


class Progress:
    """Silent progress: what a library caller gets unless it passes its own."""

    def engine(self, engine) -> None:
        pass

    @contextmanager
    def reading(self, total_bytes: int) -> Iterator[Callable | None]:
        yield None

    @contextmanager
    def on_spark(self, spark) -> Iterator[None]:
        yield


SILENT = Progress()


@contextmanager
def remote_reads() -> Iterator:
    """The count of bytes and requests read from remote storage (``.bytes``, ``.requests``) while the block
    runs, from zero: what ``-v`` reports after a command."""
    import rocketidx.storage as storage
    storage.READS.reset()
    yield storage.READS
