"""Ctrl-C and SIGTERM for the commands: one line, exit status 130, no traceback; a commit finishes first.

In: SIGINT (a terminal's Ctrl-C, sent to the whole process group) or SIGTERM, at any moment of a command.
Out: :class:`Interrupted` raised in the main thread, which the command's ``main`` turns into one line on
stderr and ``sys.exit(130)``.

Stays true:
- everything a command holds is released on the way out by the ``finally`` blocks it already has (a
  staged version discarded, the output's lock released, a Spark session stopped: its running jobs are
  cancelled first, so the JVM and its Python workers end with it);
- a signal that arrives inside :func:`deferred` (the commit: from naming the staged files to swapping the
  ``current`` pointer and removing the previous version) is held until the block ends, so the commit
  either did not begin (the previous output is unchanged) or is finished (:attr:`Interrupted.committed`);
- :func:`install` runs before the heavy imports (numpy, pyarrow, pyspark), so an early Ctrl-C is handled
  the same way; PySpark's own SIGINT handler, which a new SparkContext would install, is kept out by
  :func:`signal_keeping_ours`.
"""
from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from contextlib import contextmanager

EXIT_STATUS = 130  # 128 + SIGINT, what shells report for a command ended by Ctrl-C
SIGNALS = (signal.SIGINT, signal.SIGTERM)

_state = {"installed": False, "deferring": 0, "pending": None, "raised": False, "signum": None}


class Interrupted(KeyboardInterrupt):
    """The command was asked to stop (``signum``); ``committed``: a commit was under way and finished."""

    def __init__(self, signum: int, committed: bool = False) -> None:
        super().__init__(signum, committed)
        self.signum, self.committed = signum, committed

    def message(self, what: str = "the previous output is unchanged") -> str:
        name = signal.Signals(self.signum).name
        if self.committed:
            return f"interrupted ({name}) during the commit, which was finished: the output holds the new build"
        return f"interrupted ({name}); {what}"


class _SignalKeepingOurs:
    """The ``signal`` module as ``pyspark.core.context`` sees it once :func:`signal_keeping_ours` is in place: every
    SparkContext installs PySpark's SIGINT handler, which cancels jobs and raises a bare KeyboardInterrupt
    (or a Py4JError while the context is still starting); the command's handler does the same job, so
    that request is ignored."""

    def __getattr__(self, name):
        return getattr(signal, name)

    @staticmethod
    def signal(signum, handler):
        if _state["installed"] and signum in SIGNALS:
            return signal.getsignal(signum)
        return signal.signal(signum, handler)


def _handle(signum, frame) -> None:
    if _state["deferring"]:
        _state["pending"] = signum
        return
    if _state["raised"]:  # the command is already on its way out (a terminal user presses Ctrl-C again)
        return
    _state.update(raised=True, signum=signum)
    raise Interrupted(signum)


def run_interruptible(prog: str, run, argv: list[str] | None = None) -> int:
    """A command's entry point: the handlers first (before ``run`` imports anything heavy), then
    ``run(argv)``; an interrupt that reaches here ends it with one line on stderr and :data:`EXIT_STATUS`."""
    install()
    try:
        return run(argv)
    except BaseException as e:
        stop = caught(e)  # an interrupt, or an error its unwinding set off
        if stop is None:
            raise
        print(f"{prog}: {stop.message()}", file=sys.stderr)
        return EXIT_STATUS


def caught(error: BaseException) -> Interrupted | None:
    """The interrupt behind ``error``: itself, one in its chain, or, once a signal was raised, whatever
    its unwinding set off (a map closed under a live view, a Py4J call on a closed connection); None
    when no signal came."""
    seen = error
    while seen is not None:
        if isinstance(seen, Interrupted):
            return seen
        seen = seen.__context__ or seen.__cause__
    return Interrupted(_state["signum"]) if _state["raised"] and _state.get("signum") else None


class _QuietAfterInterrupt(logging.Filter):
    """Py4J logs an interrupted call to the JVM (and the calls that then find its connection closed, or the
    connection's shutdown failing) with a traceback; after an interrupt those are its echo, not news."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (_state["raised"] and f"{os.sep}py4j{os.sep}" in record.pathname)


_QUIET = _QuietAfterInterrupt()
# A logger's filters see only the records made on it, not those its children pass up: so on Py4J's own loggers
# (py4j.clientserver logs "Exception occurred while shutting down connection" when an interrupt cuts a call),
# as well as on the root logger.
_PY4J_LOGGERS = ("py4j", "py4j.clientserver", "py4j.java_gateway")


def install() -> None:
    """Handle SIGINT and SIGTERM from now on (the main thread only; elsewhere Python forbids it)."""
    if threading.current_thread() is not threading.main_thread():
        return
    for s in SIGNALS:
        signal.signal(s, _handle)
    _state.update(installed=True, raised=False, signum=None)
    for logger in (logging.getLogger(), *map(logging.getLogger, _PY4J_LOGGERS)):
        if _QUIET not in logger.filters:
            logger.addFilter(_QUIET)


def uninstall() -> None:
    """Python's own handlers back, and no interrupt remembered (for a process that goes on: a test)."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
    _state.update(installed=False, raised=False, signum=None, pending=None)


def signal_keeping_ours():
    """What ``pyspark.core.context`` should see as its ``signal`` module so that a new SparkContext keeps
    the command's handlers (:class:`_SignalKeepingOurs`); None outside a command (a notebook keeps
    PySpark's). :mod:`rocketidx.spark.session` puts it in place: only that package imports pyspark."""
    return _SignalKeepingOurs() if _state["installed"] else None


@contextmanager
def deferred(*, commit: bool = True):
    """Hold SIGINT and SIGTERM while the block runs; one that came is raised when the block is done
    (``commit``: the block was a commit, and :attr:`Interrupted.committed` says it finished)."""
    _state["deferring"] += 1
    done = False
    try:
        yield
        done = True
    finally:
        _state["deferring"] -= 1
        signum = _state["pending"]
        if not _state["deferring"] and signum is not None:
            _state["pending"] = None
            if done:  # else the block's own error is the one to report
                _state.update(raised=True, signum=signum)
                raise Interrupted(signum, committed=commit)
