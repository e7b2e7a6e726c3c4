"""Tests marked ``campaign`` run in the long campaigns (make brokers), not in make test, which stays under 30
minutes: they run when ROCKETIDX_CAMPAIGN=1 and are skipped, with :data:`SKIP_REASON`, otherwise (conftest.py)."""
from __future__ import annotations

import os

CAMPAIGN = os.environ.get("ROCKETIDX_CAMPAIGN") == "1"
SKIP_REASON = "a long campaign's (make brokers runs it, with ROCKETIDX_CAMPAIGN=1): make test stays under 30 minutes"
