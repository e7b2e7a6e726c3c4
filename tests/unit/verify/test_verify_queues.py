"""verify --consumequeue: a damage campaign over reference ConsumeQueue files. With the CommitLog every damage is
reported by its kind; the files alone catch what the files can show; a clean build is always clean."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from cq_damage import ALONE, EXPECT, UNIT, biggest_queue, damage, log_end
from refdata import GOLDEN_CASES

from rocketidx.build.in_process import build_index
from rocketidx.cli import main
from rocketidx.config import BuildConfig
from rocketidx.verify.queues import verify_consumequeues

CASES = [c for c in GOLDEN_CASES if (c / "expected" / "cq-manifest.json").exists()]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_clean_reference_and_rebuilt_queues_verify_clean(case, tmp_path):
    assert verify_consumequeues(str(case / "expected" / "consumequeue")).clean
    assert verify_consumequeues(str(case / "expected" / "consumequeue"), case / "commitlog").clean
    size = json.loads((case / "expected" / "cq-manifest.json").read_text())["mappedFileSizeConsumeQueue"]
    build_index(case / "commitlog", tmp_path / "o", BuildConfig(timezone="UTC", targets=("consumequeue",),
                                                                 cq_file_size=size))
    assert verify_consumequeues(str(tmp_path / "o" / "consumequeue"), case / "commitlog").clean


@pytest.mark.parametrize("kind", sorted(EXPECT))
@pytest.mark.parametrize("case", CASES[:3], ids=lambda c: c.name)
def test_every_damage_is_reported_with_the_commitlog(case, kind, tmp_path):
    root = tmp_path / "consumequeue"
    shutil.copytree(case / "expected" / "consumequeue", root)
    damage(kind, root, log_end(case))
    with_log = verify_consumequeues(str(root), case / "commitlog")
    assert not with_log.clean and EXPECT[kind] in with_log.counts, dict(with_log.counts)
    alone = verify_consumequeues(str(root))
    if ALONE[kind]:
        assert ALONE[kind] in alone.counts, dict(alone.counts)
    if kind == "deleted-middle" and len(list(biggest_queue(case / "expected" / "consumequeue").iterdir())) > 2:
        assert "missing-file" in alone.counts  # a gap in a queue's files shows without the log


def test_the_command_line_reports_and_exits_1(tmp_path, capsys):
    case = CASES[0]
    root = tmp_path / "consumequeue"
    shutil.copytree(case / "expected" / "consumequeue", root)
    assert main(["verify", "--consumequeue", str(root), "--commitlog", str(case / "commitlog")]) == 0
    assert "clean" in capsys.readouterr().out
    damage("flip-tags", root, log_end(case))
    assert main(["verify", "--consumequeue", str(root), "--commitlog", str(case / "commitlog"), "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["counts"] == {"wrong-field": 1} and "tags_code" in report["problems"][0]["detail"]
    assert report["problems"][0]["offset"] == 5 * UNIT
    assert main(["verify", "--consumequeue", str(root), "--index", str(root)]) == 2


def test_a_custom_delay_table_needs_the_brokers_conf_to_verify_clean(capsys):
    case = Path(__file__).resolve().parents[2] / "reference" / "cq-spec" / "s02-delay-levels-custom-table"
    args = ["verify", "--consumequeue", str(case / "expected" / "consumequeue"), "--commitlog", str(case / "commitlog")]
    assert main(args + ["--broker-conf", str(case / "broker.conf"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["clean"]
    assert main(args + ["--json"]) == 1  # the default table gives the delayed messages other tagsCodes
    assert set(json.loads(capsys.readouterr().out)["counts"]) == {"wrong-field"}
