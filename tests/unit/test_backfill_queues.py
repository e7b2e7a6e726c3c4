"""backfill --store --targets consumequeue --dry-run: the repair plan of a stopped broker's queues. Each crash
scenario's damaged files are planned for replacing or writing, healthy ones kept, strays removed; a store
whose consumequeue/ holds something that is not a queue file is refused in one line, and nothing changes."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from refdata import GOLDEN_CASES
from store_scenarios import NAMED, biggest, scenario, store_of

from rocketidx.backfill.queues import make_queue_plan
from rocketidx.cli import main
from rocketidx.errors import StoreLayoutError

CASES = [c for c in GOLDEN_CASES if (c / "expected" / "cq-manifest.json").exists()]


def snapshot(store: Path) -> dict[str, tuple[int, bytes]]:
    return {str(p.relative_to(store)): (p.stat().st_ino, p.read_bytes()) for p in store.rglob("*") if p.is_file()}


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_a_reference_store_needs_nothing(case, tmp_path):
    store, _ = store_of(case, tmp_path / "store")
    plan = make_queue_plan(store, str(tmp_path / "scratch"))
    assert plan.changes == 0 and plan.actions["keep"] and plan.file_size == 1280
    assert plan.size_from.endswith("queue files")


@pytest.mark.parametrize("name", sorted(NAMED))
@pytest.mark.parametrize("case", CASES[:3], ids=lambda c: c.name)
def test_each_crash_scenario_plans_the_damaged_files_only(case, name, tmp_path):
    store, _ = store_of(case, tmp_path / "store")
    before = {str(p.relative_to(store / "consumequeue")) for p in (store / "consumequeue").rglob("*") if p.is_file()}
    q = biggest(store)
    scenario(name, store, case)
    # The store's files tell the size; where consumequeue/ is gone, the broker's setting does.
    plan = make_queue_plan(store, str(tmp_path / "scratch"), cq_file_size=1280)
    changed = set(plan.actions["replace"]) | set(plan.actions["write"])
    assert changed and not plan.actions["remove"]
    assert set(plan.actions["keep"]) | changed == before  # the rebuild is the reference's files, all of them
    if name in ("queue-deleted", "newest-files-deleted", "dirty-tail", "truncated-mid-entry"):
        assert {c.rsplit("/", 1)[0] for c in changed} == {str(q.relative_to(store / "consumequeue"))}


def test_a_stray_queue_is_removed_and_the_command_changes_nothing(tmp_path, capsys):
    case = CASES[0]
    store, _ = store_of(case, tmp_path / "store")
    q = biggest(store)
    shutil.copytree(q, q.parent / "77")
    before = snapshot(store)
    assert main(["backfill", "--store", str(store), "--targets", "consumequeue", "--dry-run", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)["consumequeue"]
    assert plan["counts"]["remove"] == len(list(q.iterdir())) and plan["counts"]["write"] == 0
    assert all(r.startswith(f"{q.parent.name}/77/") for r in plan["remove"])
    assert snapshot(store) == before
    assert main(["backfill", "--store", str(store), "--targets", "consumequeue"]) == 2  # planned, not made yet
    assert "--dry-run" in capsys.readouterr().err
    assert snapshot(store) == before


@pytest.mark.parametrize("stray", ["name", "queue-dir", "topic-file"])
def test_something_that_is_not_a_queue_file_is_refused_in_one_line(stray, tmp_path, capsys):
    case = CASES[0]
    store, _ = store_of(case, tmp_path / "store")
    q = biggest(store)
    target = {"name": q / "notes.txt", "queue-dir": q.parent / "x1", "topic-file": store / "consumequeue" / "README"}
    if stray == "queue-dir":
        target[stray].mkdir()
    else:
        target[stray].write_text("x")
    before = snapshot(store)
    with pytest.raises(StoreLayoutError, match="move it out of consumequeue/ first"):
        make_queue_plan(store, str(tmp_path / "scratch"))
    assert main(["backfill", "--store", str(store), "--targets", "consumequeue", "--dry-run"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(target[stray]) in err[0]
    assert snapshot(store) == before


def test_queue_files_of_no_shared_size_are_refused_naming_two(tmp_path):
    case = CASES[0]
    store, _ = store_of(case, tmp_path / "store")
    files = sorted(p for p in (store / "consumequeue").rglob("*") if p.is_file())
    for f in files[: len(files) // 2 + 1]:
        with open(f, "ab") as fh:
            fh.write(bytes(20 * (1 + files.index(f) % 3)))
    with pytest.raises(StoreLayoutError, match="no file size is shared by most"):
        make_queue_plan(store, str(tmp_path / "scratch"))
