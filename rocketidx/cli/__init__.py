"""``rocketidx``: the console script's parser, its commands, and the one exit-code map.

Each command family has its module here (``build``, ``backfill``, ``verify``, ``query``, ``stats``,
``timeindex``, ``gen`` with ``demo``), with its flags (``add_parser``) and what it runs.

Exit codes (:func:`exit_code`, which the spark-submit jobs use too): 0 done (a build whose reading stopped
at a corrupt record still exits 0: it indexed what the broker's recovery keeps and prints where and why it
stopped); 1 the input has problems (``verify`` found some, a ``--strict`` build stopped early or left
entries out); 2 the command could not run (bad arguments, a path that is not a CommitLog or index, a locked
store or output, any rocketidx error or OSError), with one line on stderr naming the file and, for bad
data, the byte offset; 130 interrupted (Ctrl-C, SIGTERM); 141, quietly, when stdout's reader left early
(``| head``).
"""
from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import Callable

from rocketidx.cli import backfill, build, gen, query, stats, timeindex, verify
from rocketidx.cli.common import OneLineParser, add_verbose, package_version
from rocketidx.errors import RocketIdxError
from rocketidx.config import resolve_paths
import rocketidx.interrupts as interrupts
from rocketidx.ops.progress import remote_reads


# What `--help` says of the exit codes (:func:`exit_code`), for the command line and the spark-submit jobs.
EXIT_CODES_HELP = ("exit codes: 0 done; 1 the input has problems (verify found some, a --strict build stopped "
                   "early or left entries out); 2 could not run (usage, paths, locks, any rocketidx error or "
                   "OSError: one line on stderr); 130 interrupted (Ctrl-C, SIGTERM); 141 stdout's reader left")


class _Version(argparse.Action):
    """``--version``: the installed version is looked up when asked for (importlib.metadata takes 30 ms, which
    every other command would pay at start-up)."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, help=None):
        super().__init__(option_strings, dest, nargs=0, default=default, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        print(f"rocketidx {package_version()}")  # on stdout, as argparse's own version action prints it
        parser.exit()


def _parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="rocketidx", description="Rebuild, query and inspect RocketMQ IndexFiles.",
                      epilog=EXIT_CODES_HELP)
    add_verbose(p)
    p.add_argument("--version", action=_Version, help="print rocketidx's version and exit")
    sub = p.add_subparsers(dest="command", required=True)
    # The order `rocketidx --help` lists them in.
    for add in (gen.add_gen_parser, build.add_parser, gen.add_demo_parser, backfill.add_parser, verify.add_parser,
                stats.add_parser, timeindex.add_parser, query.add_parser):
        add(sub)
    for command in sub.choices.values():
        add_verbose(command, after_command=True)
    return p


COMMANDS = {"stats": stats.cmd_stats, "demo": gen.cmd_demo, "verify": verify.cmd_verify,
            "backfill": backfill.run_backfill_command, "gen": gen.cmd_gen, "build": build.run_build,
            "query": query.cmd_query, "timeindex": timeindex.cmd_timeindex}
# What an interrupted command leaves, in the one line it prints (rocketidx.interrupts).
INTERRUPTED_LEAVES = {"build": "the previous output is unchanged",
                "backfill": "a swap cut short is rolled back by the next run; one that finished stays (the queues' "
                            "repair is in place once 'consumequeue: replaced' was printed, the index once "
                            "'installed'); whatever was not reached is as it was",
                "gen": "the store may be incomplete: run gen again", "demo": "the previous output is unchanged",
                "timeindex": "files already written are whole (each is written and then renamed)"}
def exit_code(prog: str, run: Callable[[], int], interrupted: str = "the previous output is unchanged") -> int:
    """The one map from how a command ended to its exit code, for ``rocketidx`` and the spark-submit jobs:
    ``run()``'s own code (0 done; 1 the input has problems: verify found some, a ``--strict`` build stopped
    early or left entries out); 2 it could not run (usage, paths, locks: any rocketidx error or OSError),
    one line on stderr; 130 interrupted (:mod:`rocketidx.interrupts`; ``interrupted``: what it leaves)."""
    try:
        return run()
    except BaseException as e:
        stop = interrupts.caught(e)  # an interrupt, or an error its unwinding set off
        if stop is not None:
            print(f"{prog}: {stop.message(interrupted)}", file=sys.stderr)
            return interrupts.EXIT_STATUS
        if isinstance(e, RocketIdxError):
            print(f"{prog}: {type(e).__name__}: {e}", file=sys.stderr)
            return 2
        if isinstance(e, BrokenPipeError) and _stdout_reader_gone():
            raise  # `| head` read what it wanted: _quiet_when_the_reader_leaves ends quietly
        if isinstance(e, OSError):
            print(f"{prog}: {e}", file=sys.stderr)
            return 2
        raise


EXIT_READER_GONE = 141  # 128 + SIGPIPE: what `cat`, `grep` or `git log` end with when `| head` stops reading


def _stdout_reader_gone() -> bool:
    """Whether stdout is a pipe whose reader has closed it (Linux flags such a pipe's write end POLLERR), so
    that a BrokenPipeError from elsewhere (a socket, a child's pipe) is still reported as an error."""
    import select
    try:
        poll = select.poll()
        poll.register(sys.stdout.fileno(), select.POLLOUT)
        return any(ev & (select.POLLERR | select.POLLHUP) for _, ev in poll.poll(0))
    except (AttributeError, OSError, ValueError):  # no poll(), or stdout is no file: assume it is the one
        return True


def _quiet_when_the_reader_leaves(main):
    """``rocketidx stats | head -1``: once the reader has what it wants, end quietly, no message, exit 141 as
    the coreutils do (the recipe of Python's "Note on SIGPIPE": the rest of stdout goes to /dev/null, so the
    interpreter's own flush at exit does not fail again). stdout is flushed here, inside, because output
    that still sits in the buffer would otherwise meet the closed pipe only at the interpreter's exit."""
    import functools

    @functools.wraps(main)
    def run(argv: list[str] | None = None) -> int:
        try:
            try:
                return main(argv)
            finally:
                sys.stdout.flush()
        except BrokenPipeError:
            if not _stdout_reader_gone():
                raise
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return EXIT_READER_GONE
    return run


@_quiet_when_the_reader_leaves
def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=[logging.WARNING, logging.INFO, logging.DEBUG][min(args.verbose, 2)],
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    def run() -> int:
        resolve_paths(args)
        from rocketidx.config import broker_release
        broker_release(getattr(args, "broker_version", None))  # a release no rule knows: refused before any work
        return COMMANDS[args.command](args)  # each operation holds its release's index rules itself
    with remote_reads() as reads:
        try:
            return exit_code(f"rocketidx {args.command}", run,
                             INTERRUPTED_LEAVES.get(args.command, "nothing was changed"))
        finally:
            if args.verbose and reads.requests:
                print(f"rocketidx {args.command}: read {reads.bytes:,} bytes from remote storage in "
                      f"{reads.requests:,} requests", file=sys.stderr)
