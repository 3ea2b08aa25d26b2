"""The bottom layer: the clock, digests and atomic writes, and the value types."""
