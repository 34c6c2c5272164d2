"""Job functions for tests/test_fanout.py: they run in fan-out worker processes (so
they live in an importable module) and report where they ran, or kill their worker."""

import os
import time
from pathlib import Path


def where(delay: float = 0.0, *extra):
    time.sleep(delay)
    return {"cvd": os.environ.get("CUDA_VISIBLE_DEVICES"), "name": os.environ.get("KERNCAP_WORKER_NAME"),
            "pid": os.getpid(), "extra": list(extra)}


def compiled(tag: str):
    return {"tag": tag, "compiled_by": os.environ.get("KERNCAP_WORKER_NAME"), "pid": os.getpid()}


def die_once(marker: str):
    """Kills its worker process the first time (as a crashing driver would), succeeds after."""
    path = Path(marker)
    if not path.exists():
        path.write_text("died")
        os._exit(1)
    return "survived"


def die_always():
    os._exit(1)
