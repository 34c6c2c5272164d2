"""Pruned reproducers: the pointer closure of a capture, and replacing a reproducer by
its closure once replay proves it (docs/prune.md)."""
