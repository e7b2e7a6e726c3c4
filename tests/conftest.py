"""Shared fixtures of every test directory (the reference cases' paths are in refdata.py): the
reader-path parameter, the hypothesis profile, and one local SparkSession for the whole run.

The session is ``local[2]`` with the UI off and small Arrow batches, Python workers on this interpreter;
tests that take the ``spark`` fixture carry the ``spark`` marker.
"""
from __future__ import annotations

import os
import sys

import pytest
from hypothesis import HealthCheck, settings

# One profile for every property test: reproducible (derandomized, no example database), no deadline
# (a 2-core CI machine is slow at times), fixtures and large data allowed.
settings.register_profile("rocketidx", deadline=None, derandomize=True, database=None,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                                 HealthCheck.function_scoped_fixture])
settings.load_profile("rocketidx")


def _reader_native_params():
    from rocketidx.native import native_available
    return [pytest.param(False, id="numpy"),
            pytest.param(True, id="native", marks=pytest.mark.skipif(
                not native_available(), reason="rocketidx._native is not built"))]


@pytest.fixture(params=_reader_native_params())
def reader_native(request) -> bool:
    """Run a reader/entries test on the numpy reference path and on the compiled kernel."""
    return request.param


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
