"""A stopped broker's store as rocketidx meets it: its paths, lock, checkpoint, segments and topic table."""
