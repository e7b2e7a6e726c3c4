"""rocketidx.process_cost: a pool worker keeps the memory it frees for its next task's arrays."""
from __future__ import annotations

import subprocess
import sys

import pytest

# Twenty rounds of four arrays of 12 MB made, written and dropped together, as a worker's tasks make a window's
# slot table and a batch's columns: the page faults they cost (ru_minflt), with glibc's defaults or after
# keep_freed_memory().
_CHURN = """
import resource, sys
import numpy as np
from rocketidx.process_cost import keep_freed_memory
kept = keep_freed_memory() if sys.argv[1] == "keep" else None
def round_():
    arrays = [np.ones(1_500_000) for _ in range(4)]
    del arrays
round_()  # the first touches, before counting
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(20):
    round_()
print(kept, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _faults(mode: str) -> tuple[str, int]:
    out = subprocess.run([sys.executable, "-c", _CHURN, mode], check=True, capture_output=True, text=True).stdout
    kept, faults = out.split()
    return kept, int(faults)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_a_process_that_keeps_freed_memory_does_not_fault_it_in_again():
    _, default = _faults("default")
    kept, kept_faults = _faults("keep")
    assert kept == "True"
    pages = 20 * 4 * 12_000_000 // 4096
    # glibc's defaults hand the freed top of the heap back and fault it in again (39,588 faults here); kept: none
    assert default > pages // 10, default
    assert kept_faults < pages // 100, (default, kept_faults)
