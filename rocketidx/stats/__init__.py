"""Index statistics: per-file scans (core), key-hash merges (keys), sizing advice (sizing), the in-process
engine (local) and plots.
"""
