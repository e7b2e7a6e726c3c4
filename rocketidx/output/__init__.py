"""Where a build's files go: the manifest, local and remote outputs with their lock and atomic commit,
opening what a build left, and the checks a command makes before it writes.
"""
