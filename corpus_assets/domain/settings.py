"""Where things live by default: one data root, ``CORPUS_HOME``, defaulting to ``./var`` under the project.

``DAGSTER_HOME`` defaults to ``$CORPUS_HOME/dagster`` so a fresh checkout needs no setup.
"""

from __future__ import annotations

import os
from pathlib import Path


def project_root() -> Path:
    """The checkout this package runs from (the folder holding pyproject.toml), else the working directory."""
    here = Path(__file__).resolve()
    for parent in here.parents:
        if (parent / "pyproject.toml").is_file() and (parent / "corpus_assets").is_dir():
            return parent
    return Path.cwd()


def _env_path(variable: str, default) -> Path:
    """The path in an environment variable, or ``default()`` when it is unset."""
    value = os.environ.get(variable)
    return Path(value).resolve() if value else default()


def corpus_home() -> Path:
    return _env_path("CORPUS_HOME", lambda: project_root() / "var")


def dagster_home() -> Path:
    return _env_path("DAGSTER_HOME", lambda: corpus_home() / "dagster")


def sources_path() -> Path:
    return _env_path("CORPUS_SOURCES", lambda: project_root() / "sources.yaml")


def ensure_homes() -> tuple[Path, Path]:
    """Create the data root and Dagster home and export both, so child processes agree on them."""
    home = corpus_home()
    dh = dagster_home()
    dh.mkdir(parents=True, exist_ok=True)
    os.environ["CORPUS_HOME"] = str(home)
    os.environ["DAGSTER_HOME"] = str(dh)
    return home, dh


def curation_path() -> Path:
    return _env_path("CORPUS_CURATION", lambda: project_root() / "curation.yaml")


def releases_dir() -> Path:
    return _env_path("CORPUS_RELEASES", lambda: project_root() / "releases")


def dedup_path() -> Path:
    return _env_path("CORPUS_DEDUP", lambda: project_root() / "dedup.yaml")
