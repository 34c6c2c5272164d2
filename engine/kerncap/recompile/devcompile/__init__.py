"""Kernel-only CUDA C++ compiles (issue 18): nvcc's steps run by kerncap on a reduced
translation unit (reduce, instantiate), with the captured cubin's module id (module_id)
and per-phase timing (phases, build). Only the local toolkit's nvcc runs, through
kerncap.recompile.trust (docs/sources.md)."""
