"""kerncap's hook inside the captured application's Python processes.

The engine puts this directory first on PYTHONPATH when it spawns the app, so Python
runs this file at start-up in every process of the app (torch.compile workers too).
It does nothing unless KERNCAP_MODE is set, never breaks the app (every hook is
wrapped; failures are logged to stderr with a "kerncap:" prefix), imports neither
torch nor triton itself (the patches are applied when the app imports them), and
hands over to any other `sitecustomize` further down sys.path.
"""

import os
import sys


def _chain_next_sitecustomize() -> None:
    """Run the sitecustomize that this one shadows (distributions and venvs ship one)."""
    try:
        import importlib.machinery
        import importlib.util

        here = os.path.dirname(os.path.realpath(__file__))
        rest = [p for p in sys.path if os.path.realpath(p or os.curdir) != here]
        spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
        if spec is None or spec.loader is None:
            return
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    except Exception as exc:  # the other sitecustomize's failure is not ours to raise
        sys.stderr.write(f"kerncap: the next sitecustomize failed: {type(exc).__name__}: {exc}\n")


def _install_kerncap_hooks() -> None:
    if not os.environ.get("KERNCAP_MODE"):
        return
    try:
        import _kerncap_hooks

        _kerncap_hooks.install()
    except Exception as exc:
        sys.stderr.write(f"kerncap: Python hooks not installed: {type(exc).__name__}: {exc}\n")


_install_kerncap_hooks()
_chain_next_sitecustomize()
