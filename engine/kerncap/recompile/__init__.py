"""Kernel-only recompile of a reproducer's edited source into variants/."""
