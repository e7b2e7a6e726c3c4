"""The manual, the README and the package's docstrings and comments cite only what a clone holds: no path out
of the checkout (``../shared/spec/consume-queue.md`` was one), and no section of a spec page a clone lacks
(``spec §5``): the rules those pages held are in docs/formats.md."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SOURCES = sorted((ROOT / "rocketidx").rglob("*.py"))

UP = re.compile(r"(?<![\w./])\.\./[\w./-]*")  # a relative path that climbs: ../x, ../../y/z.md
# What makes such a path a citation rather than an example of what a user types (``../nc/store/commitlog``):
# a file's name (``../shared/tools/refcheck.py``), or the reference checkout beside the clone.
CITED = re.compile(r"\.\w{1,5}$|^(?:\.\./)+shared(?:/|$)")
SPEC = re.compile(r"\bspec\b[^.\n]{0,25}?§|\b(?:consume-queue|index-build)\.md\b")  # a spec page, by section or name


def outside(cited: str, where: Path) -> bool:
    """Whether a ``../`` path, read from the citing file's folder (as a link there is), is not a file or
    folder of the checkout."""
    target = (where.parent / cited.rstrip(".")).resolve()
    return not (target.is_relative_to(ROOT) and target.exists())


def citations(path: Path, text: str | None = None) -> list[str]:
    """What ``path`` (or ``text``, as if it were that file) cites outside the checkout, one line each."""
    found = []
    for n, line in enumerate((path.read_text() if text is None else text).splitlines(), 1):
        found += [f"{path.relative_to(ROOT)}:{n}: {m}" for m in UP.findall(line)
                  if CITED.search(m.rstrip(".")) and outside(m, path)]
        found += [f"{path.relative_to(ROOT)}:{n}: {m.group(0)!r}" for m in SPEC.finditer(line)]
    return found


@pytest.mark.parametrize("path", PAGES + SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_nothing_cites_a_path_outside_the_checkout(path):
    assert not citations(path)


def test_the_check_sees_both_kinds():
    text = ("see `../shared/spec/consume-queue.md` §6 and [the README](../README.md)\n"
            "# placed as the spec's §5 says; (spec §3-4)\n"
            "`../nc/store/commitlog` matches; a `../shared/` checkout; run `../tools/x.py`.\n")
    found = citations(ROOT / "docs" / "a-page.md", text)
    assert [f.split(": ", 1)[1] for f in found if ":3: " in f] == ["../shared/", "../tools/x.py"]
    found = [f for f in found if ":3: " not in f]
    assert any("../shared/spec/consume-queue.md" in f for f in found)
    assert not any(f.endswith(": ../README.md") for f in found)  # a link inside the checkout is fine
    assert sum("§" in f for f in found) == 2 and len(found) == 4


def test_no_page_says_spark_builds_no_consumequeues():
    # docs/cli.md said so of the nightly job while docs/consumequeue.md ("On Spark") describes how it builds them.
    said = [f"{p.relative_to(ROOT)}: {line.strip()[:120]}" for p in PAGES for line in p.read_text().splitlines()
            if "ConsumeQueues are not built" in line]
    assert not said
