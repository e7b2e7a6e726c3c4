"""``make dist``: the wheel, the packed environment and the zip a cluster's executors take (not imported at run time)."""
