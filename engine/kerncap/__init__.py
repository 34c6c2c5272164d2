"""kerncap: extract one CUDA kernel dispatch into a VA-faithful standalone reproducer.

The engine is headless: the CLI (`kerncap.cli`) and the workbench (`kerncap_tui`) both
call it; it never imports the workbench.
"""

__version__ = "0.1.0"
