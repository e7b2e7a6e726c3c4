"""The notebooks run headless against a generated store: no cell may fail, every figure must be drawn.

Both notebooks run in one kernel (one JVM start instead of two). Their parameters cell is rewritten to point
at the store of the ``small_store`` fixture and, for index_stats.ipynb, to save its figures in tmp_path;
commitlog_sql.ipynb reads a copy of that store, and its build, on the test S3 server (``s3://`` parameters). The
figures are checked as images: PNG signature, over 1 KB, and not a single flat colour.
"""
from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import nbformat
import numpy as np
import pytest

pytestmark = pytest.mark.spark

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
FIGURES = ["entries_over_time", "fill", "chain_lengths", "slot_occupancy", "hot_keys", "collisions", "sizing",
           "topics", "entries_per_queue"]
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
# No spark.ui.showConsoleProgress here: a session the notebooks start keeps the progress bar off itself.
QUIET = {"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "2"}
# Spark's and the JVM's start-up chatter and progress bars, which used to fill the first Spark cell.
CHATTER = ("log4j", "WARN Utils", "SPARK_LOCAL_IP", "NativeCodeLoader", "incubator modules", "[Stage ",
           "Setting default log level", "setLogLevel")
# A log4j warning of any logger (`WARN SparkStringUtils: Truncated the string representation of a plan`), and a
# Python warning such as matplotlib's `UserWarning: Tight layout not applied`.
WARNING_LINE = re.compile(r" WARN |Warning: ")
# The generator's retry topic is 140 characters, 129 of them x; pandas' own 50-character cut left 36 of them, and
# plots.LABEL_WIDTH leaves fewer than 30.
LONG_NAME = "x" * 30
EPOCH_MS = re.compile(r"(?<![\d.])1[5-9]\d{11}(?![\d.])")  # 2017..2033 in epoch ms: a time not made readable


def with_parameters(path: Path, **values) -> nbformat.NotebookNode:
    nb = nbformat.read(path, as_version=4)
    cells = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    assert len(cells) == 1 and nb.cells.index(cells[0]) <= 1, f"{path.name}: the parameters cell comes first"
    known = {line.split("=")[0].strip() for line in cells[0].source.splitlines() if "=" in line and not line.startswith("#")}
    assert set(values) <= known, f"{path.name}: unknown parameters {set(values) - known}"
    cells[0].source += "\n# set by the test\n" + "\n".join(f"{k} = {v!r}" for k, v in values.items())
    return nb


def test_notebooks_are_committed_without_outputs():
    for path in sorted(NOTEBOOKS.glob("*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        nbformat.validate(nb)
        for cell in nb.cells:
            if cell.cell_type == "code":
                assert cell.outputs == [] and cell.execution_count is None, f"{path.name} has outputs"


def test_notebooks_execute_and_draw_every_figure(small_store, tmp_path, s3_server):
    from nbclient import NotebookClient

    from rocketidx.build.in_process import build_index
    from rocketidx.output.target import read_manifest
    from rocketidx.config import BuildConfig
    store, out = small_store
    remote = f"s3://{s3_server.new_bucket()}"
    s3_server.upload_dir(str(store / "commitlog"), f"{remote}/store/commitlog")
    m = read_manifest(out)
    build_index(store, f"{remote}/out", BuildConfig(hash_slot_num=m["hash_slot_num"], index_num=m["index_num"],
                                                   window_ms=m["window_ms"], timezone=m["timezone"]))
    figs = tmp_path / "figures"
    stats_nb = with_parameters(NOTEBOOKS / "index_stats.ipynb", STORE=str(store), INDEX=str(out), FIG_DIR=str(figs),
                               TOP=5, SPARK_MASTER="local[2]", SPARK_CONF=QUIET)
    sql_nb = with_parameters(NOTEBOOKS / "commitlog_sql.ipynb", STORE=f"{remote}/store", INDEX=f"{remote}/out",
                             SPARK_MASTER="local[2]", SPARK_CONF=QUIET)
    resources = {"metadata": {"path": str(NOTEBOOKS)}}  # the notebooks import sample_data from their folder
    first = NotebookClient(stats_nb, timeout=600, kernel_name="python3", resources=resources)
    try:
        # Any cell error raises CellExecutionError here, with the cell and traceback in the message.
        # Without PYTEST_CURRENT_TEST, ipykernel sends what the kernel's subprocesses (the JVM) write on
        # fd 2 to the cells, as in Jupyter; under pytest it would leave fd 2 alone.
        env = {k: v for k, v in os.environ.items() if k != "PYTEST_CURRENT_TEST"}
        first.execute(cleanup_kc=False, env=dict(env, PYSPARK_PYTHON=sys.executable))
        NotebookClient(sql_nb, km=first.km, timeout=600, resources=resources).execute()
    finally:
        if first.km is not None:
            first._cleanup_kernel()  # shuts the shared kernel (and its JVM) down

    stderr = [o.text for nb in (stats_nb, sql_nb) for c in nb.cells if c.cell_type == "code"
              for o in c.outputs if o.get("name") == "stderr"]
    noise = [line for text in stderr for line in text.splitlines() if any(c in line for c in CHATTER)]
    assert not noise, f"Spark's start-up chatter in the notebooks' cells: {noise[:5]}"
    warned = [line for text in stderr for line in text.splitlines() if WARNING_LINE.search(line)]
    assert not warned, f"warnings in the notebooks' cells: {warned[:5]}"
    shown = [text for c in stats_nb.cells if c.cell_type == "code" for o in c.outputs  # text, not images
             for text in [o.get("text", ""), *(o.get("data", {}).get(k, "") for k in ("text/plain", "text/html"))]]
    assert not [t for t in shown if LONG_NAME in t], "a 140-character topic shown whole"
    assert not [m for t in shown for m in EPOCH_MS.findall(t)], "epoch milliseconds shown as numbers"

    for name in FIGURES:
        png = figs / f"{name}.png"
        assert png.exists(), f"figure {name} was not saved"
        data = png.read_bytes()
        assert data[:8] == PNG_SIGNATURE and len(data) > 1024, name
        import matplotlib.image
        pixels = matplotlib.image.imread(png)
        assert pixels.ndim == 3 and np.ptp(pixels[..., :3]) > 0.1, f"{name} is a blank image"
    images = [o for c in stats_nb.cells if c.cell_type == "code" for o in c.outputs if "image/png" in o.get("data", {})]
    assert len(images) >= len(FIGURES), "every figure is displayed in the notebook too"
    last = stats_nb.cells[-1].outputs[-1]["text"]
    assert all(name in last for name in FIGURES)
    lookup = [c for c in stats_nb.cells if "query_offsets(" in c.source][0]
    assert "offset(s), newest first" in "".join(o.get("text", "") for o in lookup.outputs)
    said = "".join(o.get("text", "") for c in sql_nb.cells if c.cell_type == "code" for o in c.outputs)
    assert "not found" not in said  # it read the S3 copy, not a fallback sample
    tables = [c for c in sql_nb.cells if c.cell_type == "code" and any("text/html" in o.get("data", {}) for o in c.outputs)]
    assert len(tables) >= 5, "each SQL cell shows its result"
