"""Source discovery for CUDA C++ kernels: which files define a kernel, how they were
compiled, and copying them into a reproducer as editable sources (docs/sources.md)."""

from kerncap.sources.attach import BUILD_JSON, attach_sources, capture_arch
from kerncap.sources.discover import Discovery, SourcesNotFound, discover

__all__ = ["BUILD_JSON", "Discovery", "SourcesNotFound", "attach_sources", "capture_arch", "discover"]
