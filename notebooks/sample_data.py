"""Paths for the notebooks: the parameters as given, or the sample store that ``make run`` generates.

In: the notebook's STORE / INDEX / COMMITLOG parameters: a URI (``s3://...``, ``hdfs://...``, ``file://...``),
or a path, absolute or relative to the repository root. Out: the store, its index (a build output) and
the CommitLog, as absolute paths or the URIs given, and whether the small fallback sample was generated.
Stays true: a notebook always has something to show. When the index is missing, a small store
(20,000 messages over 6 hours) is generated and built under ``sample/notebook/`` once; the store that
``make run`` generates is left alone.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


def repo_root(start: Path | None = None) -> Path:
    """The directory holding ``pyproject.toml`` and ``rocketidx/``, searching up from ``start``."""
    here = (start or Path.cwd()).resolve()
    for p in [here, *here.parents]:
        if (p / "pyproject.toml").exists() and (p / "rocketidx").is_dir():
            return p
    return here


@dataclass(frozen=True)
class SamplePaths:
    store: Path | str  # a local path, or the URI given
    index: Path | str
    commitlog: Path | str | None
    generated: bool


def resolve_paths(store: str | None, index: str | None, commitlog: str | None, *, use_commitlog: bool = True
                  ) -> SamplePaths:
    import rocketidx.storage as storage
    root = repo_root()

    def absolute(p: str | None) -> Path | str | None:
        if p is None or storage.is_remote(p):
            return p
        p = Path(storage.normalize(p))
        return p if p.is_absolute() else root / p
    store_p, index_p = absolute(store), absolute(index)
    commitlog_p = absolute(commitlog) if commitlog is not None else (store_p if use_commitlog else None)
    if index_p is not None and storage.stat(str(index_p)) is not None:
        return SamplePaths(store_p, index_p, commitlog_p, False)
    from rocketidx.build.in_process import build_index
    from rocketidx.config import BuildConfig
    from rocketidx.sample.generate import GenConfig, generate_store
    small = root / "sample" / "notebook"
    store_p, index_p = small / "store", small / "out"
    print(f"{index} not found (`make run` generates the full sample); using a small store in {small}")
    if not (store_p / "generator.json").exists():
        generate_store(store_p, GenConfig(messages=20_000, segment_bytes=16 * 2**20, span_ms=6 * 3_600_000))
    if not (index_p / "_manifest.json").exists():
        build_index(store_p, index_p, BuildConfig(hash_slot_num=50_021, index_num=100_000, timezone="UTC"))
    return SamplePaths(store_p, index_p, store_p if use_commitlog else None, True)
