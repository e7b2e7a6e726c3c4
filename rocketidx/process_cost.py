"""A process's CPU time and peak memory: the one way a task measures what it cost.

Every task result (:mod:`rocketidx.build.results`), every split's :class:`rocketidx.commitlog.splits.RangeInfo`
and the build summary's peak RSS figures come from here, so they are comparable: CPU is user + system
time of this process, peak memory is ``ru_maxrss`` (KiB on Linux).
"""
from __future__ import annotations

import resource


def cpu_ms() -> int:
    """CPU time this process has used so far, in ms (user + system)."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return int((r.ru_utime + r.ru_stime) * 1000)


def peak_rss_kb() -> int:
    """The peak resident memory of this process so far, in KiB."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


class Usage:
    """CPU spent since it was made (:attr:`cpu_ms`), and the peak RSS at the time it is read."""

    def __init__(self) -> None:
        self._cpu0 = cpu_ms()

    @property
    def cpu_ms(self) -> int:
        return cpu_ms() - self._cpu0

    @property
    def peak_rss_kb(self) -> int:
        return peak_rss_kb()


def keep_freed_memory() -> bool:
    """Have this process's ``malloc`` keep what it frees for its next allocations (glibc's ``mallopt``: a fixed
    32 MiB mmap threshold, no trimming), instead of handing it back to the kernel and faulting it in again.

    A pool worker runs task after task, each making arrays of tens of MB (a window's slot table, a batch's
    columns): with glibc's defaults a forked worker returned and refaulted them every time, 190,000 page faults
    more than the one pass in a store-6m build, half a second of system time. The peak is what the tasks
    need either way; it is only kept. False where the C library has no ``mallopt`` (not glibc)."""
    import ctypes
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    m_trim_threshold, m_mmap_threshold = -1, -3
    return bool(mallopt(m_mmap_threshold, 32 << 20)) and bool(mallopt(m_trim_threshold, 1 << 30))
