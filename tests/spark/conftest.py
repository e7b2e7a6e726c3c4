"""Spark tests: one local SparkSession for the whole run (session-scoped), and scratch helpers.

The session is ``local[2]`` with the UI off and small Arrow batches, Python workers on this interpreter.
Tests that need it take the ``spark`` fixture and carry the ``spark`` marker.
"""
from __future__ import annotations

import os
import sys

import pytest


@pytest.fixture(scope="session")
def spark():
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from rocketidx.spark.session import get_session
    session = get_session("local[2]", {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": "2",
        "spark.sql.adaptive.enabled": "false",
        "spark.sql.execution.arrow.maxRecordsPerBatch": "4096",
        "spark.driver.memory": "1g",
        "spark.sql.session.timeZone": "UTC",
    })
    yield session
    session.stop()
