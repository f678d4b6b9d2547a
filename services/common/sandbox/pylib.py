"""A read-only copy of pytest (and what it imports) under the sandbox root, for runs that test code.

Never the service's own site-packages: it may live under /tmp (hidden by a run's tmpfs) or /root
(unreadable for the sandbox uid), and it holds far more than a test run needs. Made once per root
and pytest version; concurrent makers race safely (the loser's copy is dropped).
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

PYTEST_PACKAGES = ("pytest", "_pytest", "pluggy", "iniconfig", "packaging", "py.py")
"""What `python -m pytest` imports on Python 3.11."""


def pytest_path(root: Path) -> list[str]:
    """The PYTHONPATH entries that give a sandboxed run `python -m pytest`."""
    import pytest

    target = Path(root) / f"pylib-pytest{pytest.__version__}"
    if (target / ".complete").exists():
        return [str(target)]
    site = Path(pytest.__file__).resolve().parents[1]
    staging = Path(tempfile.mkdtemp(dir=root, prefix=".pylib-"))
    for name in PYTEST_PACKAGES:
        src = site / name
        if src.is_dir():
            shutil.copytree(src, staging / name, ignore=shutil.ignore_patterns("__pycache__"))
        elif src.exists():
            shutil.copy2(src, staging / name)
    (staging / ".complete").write_text("")
    for path in [staging, *staging.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    try:
        staging.rename(target)
    except OSError:  # another run made it first
        shutil.rmtree(staging, ignore_errors=True)
    return [str(target)]
