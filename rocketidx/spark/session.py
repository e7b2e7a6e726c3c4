"""SparkSession for rocketidx: join the one spark-submit made, or create a local one.

In: an optional master, Spark settings (``conf/spark.json``: section ``spark`` of ``spark.*`` settings,
plus ``split_bytes`` and ``shuffle_partitions``). Out: a SparkSession with the ``rocketmq-commitlog``
source registered, and a frozen :class:`SparkSettings`.

Stays true: a session started by ``spark-submit`` (or a notebook's) keeps the master and settings it was
given; a session created here is ``local[*]`` unless told otherwise, runs its Python workers on this very
interpreter (``PYSPARK_PYTHON``), and logs only warnings. The driver JVM started here leads a process group
of its own and ends when this process ends, however it ends, through its own shutdown hooks (which stop the
SparkContext and delete Spark's temp directories). Unless rocketidx logs at INFO (``-v``), that JVM starts
quietly: no start-up chatter (log4j profile lines, the loopback-hostname and native-hadoop warnings, the
JVM's incubator-module notice) and no console progress bar; its real warnings and errors still reach stderr.
"""
from __future__ import annotations

import logging
import os
import re
import sys
import threading
import zipfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Mapping

from rocketidx.build.engine import launched_by_spark_submit
# Resolved with the other settings (rocketidx.config); named here too, where Spark's callers look for them.
from rocketidx.config import SparkSettings, load_spark_settings  # noqa: F401
import rocketidx.interrupts as interrupts

log = logging.getLogger(__name__)

DEFAULT_MASTER = "local[*]"

# A driver JVM started here logs through this file (warnings up, minus start-up chatter) unless -v.
QUIET_LOG4J = Path(__file__).with_name("log4j2-quiet.properties")
# Spark's console progress bar draws `\r[Stage 0:===>  (1 + 1) / 2]` on stderr, into notebook cells too;
# the CLI draws its own progress line (rocketidx.cli.progress), on a terminal only.
QUIET_DEFAULTS = {"spark.ui.showConsoleProgress": "false"}
# What the JVM itself prints on start that no log4j setting reaches: Spark's launcher always adds
# --add-modules=jdk.incubator.vector, and Java announces incubator modules on stderr.
JVM_CHATTER = re.compile(r"WARNING: Using incubator modules: ")


def quiet() -> bool:
    """Start Spark quietly: true unless rocketidx logs at INFO or below (``rocketidx -v``)."""
    return not logging.getLogger("rocketidx").isEnabledFor(logging.INFO)


def get_session(master: str | None = None, conf: Mapping[str, str] | None = None, *, app_name: str = "rocketidx",
                log_level: str = "WARN", sources: bool = True):
    """The active session, else a new one (``local[*]`` unless ``master`` or spark-submit says otherwise).

    ``conf`` only applies to a session created here (a running one keeps its settings; the
    runtime SQL settings among them are set on it). ``sources``: register the ``rocketmq-commitlog``
    source now; registering starts Spark SQL (about 2 s the first time), which the direct build never
    needs, so it registers only when it falls back to the shuffle plan.
    """
    from pyspark.sql import SparkSession

    from rocketidx.spark.sources.commitlog import register

    conf = dict(conf or {})
    spark = SparkSession.getActiveSession()
    if spark is None:
        keeping = interrupts.signal_keeping_ours()
        if keeping is not None:  # a command's Ctrl-C and SIGTERM handlers stay (rocketidx.interrupts)
            import pyspark.core.context
            pyspark.core.context.signal = keeping
        settings = {"spark.app.name": app_name}
        submitted = launched_by_spark_submit()
        if master or not submitted:
            settings["spark.master"] = master or DEFAULT_MASTER
        if not submitted:
            # Local workers must run this interpreter: the one that has rocketidx and its numpy/pyarrow.
            os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
            os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
        given = {}
        if submitted:
            # spark-submit's --conf must win over the settings file: only fill in what it left unset.
            from pyspark import SparkConf
            given = dict(SparkConf().getAll())
        # From the start, not only after setLogLevel: spark-submit's driver logs INFO until then.
        settings.update((k, v) for k, v in {"spark.log.level": log_level, **QUIET_DEFAULTS, **conf}.items()
                        if k not in given)
        if not submitted:
            hush = quiet()
            if hush:
                _quiet_settings(settings)
            _start_driver_jvm(settings, relay_stderr=hush)
        spark = SparkSession.builder.config(map=settings).getOrCreate()
    else:
        for k, v in conf.items():
            if k.startswith("spark.sql.") and spark.conf.isModifiable(k):
                spark.conf.set(k, v)
    spark.sparkContext.setLogLevel(log_level)
    if sources:
        register(spark)
    return spark


def _quiet_settings(settings: dict) -> None:
    """Point the driver JVM at :data:`QUIET_LOG4J` (after any Java options already given; a
    ``log4j2.configurationFile`` given there wins), and bind a local master to the loopback address, which
    it uses anyway: Spark warns twice when the hostname resolves to 127.0.0.1 and no SPARK_LOCAL_IP is set."""
    opts = settings.get("spark.driver.extraJavaOptions", "")
    if "log4j2.configurationFile" not in opts and "log4j.configurationFile" not in opts:
        settings["spark.driver.extraJavaOptions"] = f"{opts} -Dlog4j2.configurationFile={QUIET_LOG4J.as_uri()}".strip()
    if settings.get("spark.master", "").startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")


def _relay(stream, pattern: re.Pattern) -> None:
    """Copy the JVM's stderr to this process's ``sys.stderr`` (a terminal, or a notebook's cell) line by line,
    leaving out lines that ``pattern`` matches."""
    for raw in iter(stream.readline, b""):
        line = raw.decode("utf-8", "replace")
        if pattern.match(line):
            continue
        try:
            sys.stderr.write(line)
            sys.stderr.flush()
        except (OSError, ValueError):  # stderr closed or gone: keep draining so the JVM never blocks
            pass


def _start_driver_jvm(settings: Mapping[str, str], *, relay_stderr: bool = False) -> None:
    """Start the driver JVM with ``settings``, leading a process group of its own (unless one runs already).

    The JVM needs no group with this process to end with it: PySpark gives it a pipe, and at EOF (this
    process ended, however it ended) it exits through its shutdown hooks, which stop the SparkContext and
    delete Spark's temp directories by running ``rm -rf``. In this process's group, the JVM and those
    ``rm -rf`` processes get every signal sent to the group: a Jupyter kernel that shuts down SIGTERMs the
    processes of its group again and again (0.01 s, 0.03 s, 0.1 s... apart, then SIGKILLs them), killing an
    ``rm`` mid-way ("Failed to delete" stack traces) or the JVM (directories left behind), as ``kill -9``
    of a driver's process group does.

    ``relay_stderr``: the JVM's stderr comes through a pipe and a daemon thread (:func:`_relay`) that drops
    :data:`JVM_CHATTER`; everything else it prints (its workers' too) still reaches stderr.
    """
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway
    if SparkContext._gateway is not None:  # a JVM from an earlier session of this process: reused
        return
    spark_conf = SparkConf().setAll(list(settings.items()))
    popen_kwargs: dict = {"start_new_session": True}
    write_end = None
    if relay_stderr:
        # A pipe of our own, read from before the JVM starts: a JVM that fails to start (no Java, a bad
        # option) still gets its reason through, ahead of PySpark's "exited before sending its port number".
        read_end, write_end = os.pipe()
        threading.Thread(target=_relay, args=(os.fdopen(read_end, "rb"), JVM_CHATTER), name="rocketidx-jvm-stderr",
                         daemon=True).start()
        popen_kwargs["stderr"] = write_end
    try:
        # A Ctrl-C while PySpark waits for the new JVM to say where it listens would leave that JVM running
        # for good (PySpark removes the file the JVM is about to write; the JVM's listener thread lives on):
        # it waits the second or two until the JVM is up, and then ends the command.
        with interrupts.deferred(commit=False):
            gateway = launch_gateway(spark_conf, popen_kwargs=popen_kwargs)
    finally:
        if write_end is not None:
            os.close(write_end)  # the JVM holds its own copy; the relay ends when the JVM and its workers do
    SparkContext(conf=spark_conf, gateway=gateway)  # the context getOrCreate() then finds


@contextmanager
def spark_session(settings: SparkSettings | None = None, spark=None, *, sources: bool = True) -> Iterator:
    """A session for one command: ``spark`` if given, else the active one (a notebook's, a test's), else a
    new one from ``settings``. Only a session made here is stopped on the way out, so a command run inside
    a notebook leaves its session alone, and a spark-submit job stops its own before exiting (a cluster
    would otherwise see its executors vanish mid-shutdown)."""
    from pyspark.sql import SparkSession
    from rocketidx.commitlog.entries import tag_entries_on
    if tag_entries_on():  # executors run their own Python, which the rule set in this one does not reach
        from rocketidx.errors import ConfigError
        raise ConfigError("--broker-version", "5.4 or later", "the tag entries of a 5.4+ broker's index are made in "
                          "process only for now: run with --in-process")
    settings = settings or SparkSettings()
    if spark is None and SparkSession.getActiveSession() is None:
        spark = get_session(settings.master, settings.conf, sources=sources)
        try:
            yield spark
        except BaseException as e:
            if interrupts.caught(e) is not None:  # Ctrl-C: end the running job quietly before the session stops
                settle(spark)
            raise
        finally:
            stop_session(spark)
        return
    yield spark if spark is not None else get_session(settings.master, settings.conf, sources=sources)


def settle(spark, timeout_s: float = 30.0) -> None:
    """After an interrupt: cancel the session's jobs and wait (at most ``timeout_s``) until none runs, so
    that no task writes into a staged version the build is about to remove. Spark's log is silenced
    first: the cancelled tasks' errors are the interrupt's, not news."""
    import time
    sc = spark.sparkContext
    try:
        sc.setLogLevel("OFF")
        sc.cancelAllJobs()
        tracker = sc.statusTracker()
        deadline = time.monotonic() + timeout_s
        while tracker.getActiveJobsIds() and time.monotonic() < deadline:
            time.sleep(0.05)
    except Exception as e:  # the JVM is going away: its tasks go with it
        log.debug("settling the Spark session after an interrupt: %s", e)


def stop_session(spark) -> None:
    """Stop a session this process made, without PySpark's wait for its accumulator server.

    ``SparkContext.stop`` shuts the accumulator server down with ``socketserver``'s ``shutdown()``, which
    blocks until the server's poll loop next wakes: about a second, a tenth of a small command's run.
    The server runs in a daemon thread; told to stop, it ends at its next poll by itself.
    """
    server = getattr(spark.sparkContext, "_accumulatorServer", None)
    if server is not None and hasattr(server, "_BaseServer__shutdown_request"):
        def shutdown() -> None:
            server.server_shutdown = True
            server._BaseServer__shutdown_request = True
        server.shutdown = shutdown
    spark.stop()


def build_py_files(dest_dir: str | os.PathLike) -> Path:
    """Zip the rocketidx package's Python sources for ``spark-submit --py-files`` (returns the zip).

    Executors then import rocketidx from the zip; numpy, pyarrow and pandas must be installed where
    they run (or ship a packed environment with ``--archives``). A compiled ``_native`` module cannot be
    imported from a zip, so executors use the numpy path unless rocketidx is installed there.
    """
    root = Path(__file__).resolve().parents[1]  # the rocketidx package
    dest = Path(dest_dir)
    dest.mkdir(parents=True, exist_ok=True)
    target = dest / "rocketidx.zip"
    tmp = target.with_suffix(".zip.tmp")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as z:
        for p in sorted(root.rglob("*.py")):
            if "__pycache__" not in p.parts:
                z.write(p, Path("rocketidx") / p.relative_to(root))
    os.replace(tmp, target)
    return target
