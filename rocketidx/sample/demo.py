"""The tour ``rocketidx demo`` (``make run``) gives: a sample store, its index built through the operations
in process and on Spark, and a few of its keys looked up.

In: a directory (the store goes in ``DIR/store``, the builds in ``DIR/out`` and ``DIR/out-spark``). Out: the
steps' results, which :mod:`rocketidx.cli` prints. Stays true: a store already in ``DIR/store`` is kept as it
is (a demo never deletes data); both builds go through :func:`rocketidx.ops.build.build`, as ``rocketidx
build`` does, so the demo shows what the command does, not a path of its own.
"""
from __future__ import annotations

import filecmp
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from rocketidx.config import build_request
from rocketidx.ops.build import BuildResult, build
from rocketidx.ops.engine import held_session
from rocketidx.ops.query import query_key
from rocketidx.sample import DEMO_MESSAGES
from rocketidx.sample.generate import GenConfig, generate_store

DEMO_SEGMENT_BYTES = 64 * 1024**2
DEMO_SPAN_MS = 6 * 3_600_000


def sample_store(root: str | os.PathLike, messages: int | None = None, *, say: Callable[[str], None] = print,
                 warn: Callable[[str], None] = print) -> Path:
    """``root/store``, generated (``messages``, default :data:`DEMO_MESSAGES`) unless a sample store is there;
    one that is there is kept, and ``warn`` says so when ``messages`` asks for another size."""
    store = Path(root) / "store"
    if not (store / "generator.json").exists():
        count = DEMO_MESSAGES if messages is None else messages
        say(f"generating a sample store of {count:,} messages in {store} ...")
        generate_store(store, GenConfig(messages=count, segment_bytes=DEMO_SEGMENT_BYTES, span_ms=DEMO_SPAN_MS))
    elif messages is not None:
        held = _messages_held(store)
        if held != messages:
            holds = f"holds {held:,} messages" if isinstance(held, int) else "holds a sample store"
            warn(f"--messages {messages:,} ignored: {store} already {holds} and is kept; "
                 f"delete {store} to generate {messages:,}")
    return store


def _messages_held(store: Path) -> int | None:
    try:
        held = json.loads((store / "generator.json").read_text()).get("messages")
    except (OSError, ValueError, AttributeError):
        return None
    return held if isinstance(held, int) else None


def build_in_process(store: Path, out: Path) -> BuildResult:
    """The store's index, built in this process as ``rocketidx build --in-process`` builds it (zone UTC, so
    the window files' names do not depend on the machine); whole (``full``), as the demo times a whole build."""
    return build(build_request(store / "commitlog", out, timezone="UTC", in_process=True, overwrite=True, full=True))


@dataclass(frozen=True)
class SparkComparison:
    """The same build on Spark: the session's start, a first build, a second in the same session, the tasks
    it ran, whether its files equal the in-process build's, and the break-even the engine rule uses."""

    master: str
    session_s: float
    first_s: float
    again_s: float
    tasks: int | None
    identical: bool
    break_even: int


def compare_on_spark(store: Path, out: Path, reference: Path, master: str) -> SparkComparison:
    """Build ``store``'s index twice on Spark (``master``) in one session into ``out``, and compare the files
    with ``reference``'s: what Spark costs (a JVM, Python workers, a first job) against what it buys."""
    # Whole builds (``full``): the second would otherwise find nothing changed and read nothing.
    request = build_request(store / "commitlog", out, timezone="UTC", master=master, overwrite=True, full=True)
    t0 = time.monotonic()
    with held_session(request.engine):
        session_s = time.monotonic() - t0
        first = build(request)
        again = build(request)
    names = os.listdir(out / "index")
    identical = all(filecmp.cmp(out / "index" / n, reference / "index" / n, shallow=False) for n in names) \
        and sorted(names) == sorted(os.listdir(reference / "index"))
    return SparkComparison(master, session_s, first.wall_s, again.wall_s, (first.spark or {}).get("partitions"),
                           identical, request.engine.settings.break_even)


def example_lookups(store: Path, out: Path, messages: int = 3) -> list[tuple[str, str, list[int]]]:
    """(topic, key, offsets newest first) for the unique key and first key of the log's first ``messages``
    messages, as ``rocketidx query`` answers them from ``out``."""
    from rocketidx.commitlog.readers import read_segment
    from rocketidx.commitlog.segments import list_segments
    first, _ = read_segment(list_segments(store)[0], end=4096)
    files = str(out)
    answers = []
    for row in first.slice(0, messages).to_pylist():
        for key in [row["uniq_key"]] + (row["keys"] or "").split(" ")[:1]:
            if key:
                answers.append((row["topic"], key, query_key(files, row["topic"], key)))
    return answers
