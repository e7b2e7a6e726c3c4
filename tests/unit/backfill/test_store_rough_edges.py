"""Issue 31 items 7, 8 and 19: a store without consumequeue/, a queue file cut short, a plan without write
access. Each failed on 5d56397 (a stray-file per segment and exit 1, Errno 20, the message of a bare
directory; a file-size and a missing-file for one file; Permission denied on the lock)."""
from __future__ import annotations

import json
import os
import shutil

import pytest

from refdata import GOLDEN_CASES
from store_scenarios import biggest, store_of

from rocketidx.cli import main

CASE = next(c for c in GOLDEN_CASES if (c / "expected" / "cq-manifest.json").exists())


@pytest.mark.parametrize("command", [
    ["verify", "--consumequeue", "{s}"],
    ["verify", "--consumequeue", "{s}", "--commitlog", "{s}", "--in-process"],
    ["stats", "--consumequeue", "{s}"],
    ["query", "--consumequeue", "{s}", "--topic", "TopicOrders", "--queue-id", "0", "--queue-offset", "0"],
])
def test_a_store_without_queues_is_one_line_naming_it(tmp_path, capsys, command):
    store, _ = store_of(CASE, tmp_path / "store")
    shutil.rmtree(store / "consumequeue")
    assert main([a.format(s=store) for a in command]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{store}: a broker store without consumequeue/" in err[0]


def test_a_queue_file_cut_short_is_reported_once(tmp_path, capsys):
    store, _ = store_of(CASE, tmp_path / "store")
    victim = sorted(biggest(store).iterdir())[0]
    os.truncate(victim, 7 * 20 + 9)
    assert main(["verify", "--consumequeue", str(store), "--commitlog", str(store), "--in-process", "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    about = [p["kind"] for p in report["problems"] if p["file"] == str(victim)]
    assert about == ["file-size"], report["problems"]


def test_a_dry_run_needs_only_read_access(tmp_path, capsys, monkeypatch):
    """Root reads past file modes, so the refusal a user without write access meets is simulated: any open
    of the lock for writing fails. The plan opens it read-only and takes a shared lock."""
    store, sizes = store_of(CASE, tmp_path / "store")
    (store / "lock").write_bytes(b"")
    real_open = os.open

    def read_only(path, flags, *a, **kw):
        if str(path).endswith("/lock") and flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT):
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, flags, *a, **kw)
    monkeypatch.setattr(os, "open", read_only)
    flags = ["--hash-slots", str(sizes["hash_slot_num"]), "--index-num", str(sizes["index_num"])]
    assert main(["backfill", "--store", str(store), "--dry-run", "--in-process"] + flags) == 0
    out = capsys.readouterr().out
    assert "lock is taken shared, so read access is enough" in out
    assert main(["backfill", "--store", str(store), "--in-process"] + flags) == 2  # a repair still needs it
    assert "Permission denied" in capsys.readouterr().err


def test_an_interrupt_after_the_queue_swap_says_the_queues_are_repaired(tmp_path, capsys, monkeypatch):
    """Item 16: the line an interrupted backfill prints tells what a finished queue swap left (before, it
    spoke of the index alone while the queue repair was already installed)."""
    import signal

    import rocketidx.backfill.repair as repair
    from rocketidx.interrupts import Interrupted
    store, sizes = store_of(CASE, tmp_path / "store")
    victim = sorted(biggest(store).iterdir())[-1]
    victim.unlink()
    index_before = sorted(p.name for p in (store / "index").iterdir())

    def cut(*a, **kw):
        raise Interrupted(signal.SIGINT)
    monkeypatch.setattr(repair, "backfill_locked", cut)
    flags = ["--hash-slots", str(sizes["hash_slot_num"]), "--index-num", str(sizes["index_num"])]
    assert main(["backfill", "--store", str(store), "--in-process"] + flags) == 130
    captured = capsys.readouterr()
    assert "consumequeue: replaced 0, wrote 1" in captured.out
    err = captured.err.strip().splitlines()
    assert len(err) == 1 and "the queues' repair is in place once 'consumequeue: replaced' was printed" in err[0]
    assert victim.exists() and sorted(p.name for p in (store / "index").iterdir()) == index_before
