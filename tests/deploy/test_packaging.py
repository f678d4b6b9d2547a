"""Our packaging metadata: setuptools reads pyproject.toml without a warning of its own making.

`pip install -e .` runs this same configuration step in its build backend (five times, one per hook);
a deprecated field there prints a SetuptoolsDeprecationWarning on every install.
"""

from __future__ import annotations

import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_pyproject_reads_without_a_setuptools_warning(monkeypatch):
    from setuptools.config.pyprojecttoml import apply_configuration
    from setuptools.dist import Distribution

    monkeypatch.chdir(ROOT)  # readme and package paths are relative to the project root
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        dist = apply_configuration(Distribution(), ROOT / "pyproject.toml")
    ours = [str(w.message).splitlines()[0] for w in caught if "setuptools" in type(w.message).__module__
            or "pyproject" in str(w.message) or "project." in str(w.message)]
    assert ours == [], ours
    assert dist.get_name() == "cascade-posttrain" and dist.metadata.license_expression == "Apache-2.0"
