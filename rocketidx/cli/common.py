"""What the commands share: the parser (one-line usage errors, ``-v`` and ``--version``), the engine flags,
the Spark settings they read, the one-line refusal of a Spark flag where Spark does not run, and the
broker's own properties file (``--broker-conf``)."""
from __future__ import annotations

import argparse
import re
import sys

from rocketidx.units import count_arg, size_arg

_DASH_DIGIT = re.compile(r"^-\d")  # -1h, -5, -0.5g: no option of ours looks like this, a value may


class OneLineParser(argparse.ArgumentParser):
    """argparse with a usage error in one line (``rocketidx build: error: --window: 'abc': expected a
    duration like 1h ... (see rocketidx build --help)``) instead of the whole usage before it; and a long
    option's value that starts with a dash and a digit (``--window -1h``) passed to the option as
    ``--window=-1h``, so that its own parser refuses it with the reason (argparse takes ``-1h`` for an
    option and says ``expected one argument``). Subparsers are made of the same class."""

    def parse_known_args(self, args=None, namespace=None):
        joined: list[str] = []
        for token in sys.argv[1:] if args is None else args:
            last = joined[-1] if joined else ""
            if _DASH_DIGIT.match(token) and last.startswith("--") and "=" not in last and last != "--":
                joined[-1] = f"{last}={token}"
            else:
                joined.append(token)
        return super().parse_known_args(joined, namespace)

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message.removeprefix('argument ')} (see {self.prog} --help)\n")


def add_verbose(p: argparse.ArgumentParser, *, after_command: bool = False) -> None:
    """``-v``/``--verbose``, counted. Before the command (``rocketidx -v build``) and after it (``rocketidx
    build -v``) alike: a command's own copy leaves the count alone unless it is given there."""
    p.add_argument("-v", "--verbose", action="count", default=argparse.SUPPRESS if after_command else 0,
                   help="log more (-v info, -vv debug), before or after the command")


def package_version() -> str:
    """The installed distribution's version (pyproject.toml's), or what stands in for it when rocketidx
    runs from a tree no installer recorded (a --py-files zip)."""
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version("rocketidx")
    except PackageNotFoundError:
        return "(version unknown: not installed)"


def add_engine_arguments(p: argparse.ArgumentParser, what: str, spark_conf: str | None, engine_flag: bool) -> None:
    """``--in-process`` (where offered) and the Spark flags, as build and backfill both take them. A build's
    default engine is in process (its workers); a backfill's is chosen by size (docs/cli.md, "Engines")."""
    if engine_flag:
        p.add_argument("--in-process", action="store_true",
                       help=f"{what} in this Python process with the core alone, no Spark (small stores, no JVM)")
    default = ("in process, on --workers: a local Spark session does not beat them at any size, so the size picks "
               "no engine for a build (a URI output too large to stage in local scratch space: Spark on local[*])"
               if what == "build" else
               "chosen by size: in process below engine_break_even in --spark-conf, else Spark on local[*]")
    p.add_argument("--master", default=None,
                   help=f"run on Spark with this master (default: {default}; under spark-submit, its master)")
    p.add_argument("--spark-conf", default=spark_conf, help="Spark settings and split size (default conf/spark.json)")
    p.add_argument("--split-bytes", type=size_arg("--split-bytes"), default=None,
                   help="byte range per read task (default 128m)")
    p.add_argument("--partitions", type=count_arg("--partitions", 1), default=None,
                   help="writer partitions (default: cores)")


def spark_flag_misused(a, command: str, needs: str, flags: tuple[str, ...]) -> bool:
    """Say so on stderr if a Spark-only flag was given where Spark does not run."""
    given = [f for f in flags if getattr(a, f) is not None]
    if given:
        print(f"rocketidx {command}: --{given[0].replace('_', '-')} needs {needs}", file=sys.stderr)
    return bool(given)


BROKER_CONF_HELP = ("the properties file the broker was started with (mqbroker -c FILE): its maxHashSlotNum, "
                    "maxIndexNum (and for ConsumeQueues messageDelayLevel) are used where no flag gives them")


def add_broker_conf(p: argparse.ArgumentParser) -> None:
    p.add_argument("--broker-conf", default=None, help=BROKER_CONF_HELP)


BROKER_VERSION_HELP = ("the broker's RocketMQ release (4.9.8, 5.3.3, 5.5.0 ...), for the rules that differ by release: "
                       "from 5.4.0 the index holds a topic#T#TAGS entry per tagged message; the restart model differs "
                       "for 4.9 (default: 8fc57f1's rules, 5.0 to 5.3; docs/formats.md)")


def add_broker_version(p: argparse.ArgumentParser) -> None:
    p.add_argument("--broker-version", default=None, help=BROKER_VERSION_HELP)

