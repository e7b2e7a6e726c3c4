"""A small sample of ``make faults``' ``indexloss`` part (bench/campaigns/index_loss_faults.py): stores that lost their
newest IndexFiles or one from the middle, with intact, cut or deleted queues, after a clean stop or a crash.
``verify --store`` reports exactly the entries the campaign's own restart model says a restart would not
restore, and after ``backfill --store`` every key answers as a full rebuild's index does."""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench" / "campaigns"))


def test_verify_reports_exactly_the_entries_a_restart_loses_and_the_repair_restores_every_key(tmp_path):
    from index_loss_faults import INDEX_KINDS, QUEUE_KINDS, run_index_loss
    counts, failures = run_index_loss(24, seed=7, work=tmp_path, workers=1)
    assert not failures, [(f["case"], f["step"], f["error"][:600]) for f in failures[:3]]
    agreed = {k.split(":")[0]: v for k, v in counts.items() if k.endswith("model = verify = repaired store")}
    # each chunk of 12 cases is every (index damage, queues, stop) kind once, on one base
    assert sorted(agreed) == sorted(f"{i}/{q}/{s}" for i in INDEX_KINDS for q in QUEUE_KINDS for s in ("clean", "crash"))
    assert sum(v for k, v in counts.items() if k.endswith(": entries lost") or "entries lost," in k) >= 3
