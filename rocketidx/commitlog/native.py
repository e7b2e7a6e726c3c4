"""The optional compiled kernel (``rocketidx/_native.c``), or None where it is not built.

Both read paths give the same records and entries; the kernel does in one pass per record what the
numpy path does in several (see the README's "The compiled kernel"). ``setup.py`` builds it when a C
compiler and zlib are there; a ``--py-files`` zip on a cluster cannot import it.
"""
from __future__ import annotations

import logging

import rocketidx.layout as L

try:
    import rocketidx._native as kernel
except ImportError:  # pragma: no cover - depends on the install
    kernel = None
if kernel is not None and getattr(kernel, "REC_COLS", None) != L.REC_COLS:
    # A kernel built from older sources writes rows of another width: reading with it would mix columns.
    logging.getLogger(__name__).warning(
        "rocketidx._native was built from other sources (records of %s columns, these %s): the numpy path runs; "
        "rebuild it with `pip install -e .` (make setup)", getattr(kernel, "REC_COLS", "?"), L.REC_COLS)
    kernel = None


def native_available() -> bool:
    return kernel is not None


def reader_name(native: bool | None = None) -> str:
    """What a read in this process runs: ``kernel`` or ``numpy`` (what task results and summaries report, so
    that an executor without the kernel, e.g. one given only a ``--py-files`` zip, shows)."""
    return "kernel" if use_native(native) else "numpy"


def readers_of(names) -> str | None:
    """The summary's word for the readers tasks ran: ``kernel`` or ``numpy`` when all ran one, else ``mixed``."""
    seen = {n for n in names if n}
    return None if not seen else seen.pop() if len(seen) == 1 else "mixed"


def use_native(native: bool | None) -> bool:
    """``native=None``: the kernel where it is built; True insists on it."""
    if native and kernel is None:
        raise RuntimeError("rocketidx._native is not built")
    return kernel is not None if native is None else native
