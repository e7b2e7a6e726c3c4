"""The broker's CommitLog, read as its recovery reads it: segments -> records -> message columns and the index
entries each record dispatches; split planning, stop resolution, the readers, and the sparse time index.
"""
