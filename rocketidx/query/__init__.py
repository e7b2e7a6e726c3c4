"""Key queries over an index directory, the messages at offsets, and whether an index was built from a log.
"""
