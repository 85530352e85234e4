"""Where things live by default: one data root, ``CORPUS_HOME``, defaulting to ``./var`` under the project.

``DAGSTER_HOME`` defaults to ``$CORPUS_HOME/dagster`` so a fresh checkout needs no setup.

``CORPUS_HOME`` may also be an object-store URL (``s3://bucket/prefix``; see object_store). Then
the durable layers, shard sets and releases live there, and :func:`corpus_home` is the *local*
root — cache of immutable versions, staging, the DuckDB catalog, Dagster's home — taken from
``CORPUS_LOCAL`` or, by default, ``./var/object-store/<url slug>`` under the project.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Optional

_URL_RE = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*://")


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


def is_url(value: str) -> bool:
    """True for an object-store URL (``s3://...``); plain paths and ``file://`` URLs are local."""
    return bool(_URL_RE.match(value or "")) and not value.lower().startswith("file://")


def data_url() -> Optional[str]:
    """``CORPUS_HOME`` when it is an object-store URL, else None (a local data root)."""
    value = os.environ.get("CORPUS_HOME", "")
    return value.rstrip("/") if is_url(value) else None


def corpus_home() -> Path:
    """The local root: the data root itself, or the local cache and working root of an object store."""
    url = data_url()
    if url is None:
        value = os.environ.get("CORPUS_HOME", "")
        if value.lower().startswith("file://"):
            return Path(value[len("file://"):]).resolve()
        return _env_path("CORPUS_HOME", lambda: project_root() / "var")
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", url).strip("-")[:80]
    return _env_path("CORPUS_LOCAL", lambda: project_root() / "var" / "object-store" / slug)


def catalog_path() -> Path:
    """The control-plane DuckDB file: ``CORPUS_CATALOG``, else ``catalog.duckdb`` in the local root.
    Machines that share one deployment share this file (a volume with working POSIX locks)."""
    return _env_path("CORPUS_CATALOG", lambda: corpus_home() / "catalog.duckdb")


def dagster_home() -> Path:
    return _env_path("DAGSTER_HOME", lambda: corpus_home() / "dagster")


def sources_path() -> Path:
    return _env_path("CORPUS_SOURCES", lambda: project_root() / "sources.yaml")


def ensure_homes() -> tuple[Path, Path]:
    """Create the data root and Dagster home and export both, so child processes agree on them."""
    home = corpus_home()
    dh = dagster_home()
    dh.mkdir(parents=True, exist_ok=True)
    if data_url() is None:
        os.environ["CORPUS_HOME"] = str(home)
    else:
        os.environ["CORPUS_LOCAL"] = str(home)
    os.environ["DAGSTER_HOME"] = str(dh)
    return home, dh


def curation_path() -> Path:
    return _env_path("CORPUS_CURATION", lambda: project_root() / "curation.yaml")


def releases_dir() -> Path:
    return _env_path("CORPUS_RELEASES", lambda: project_root() / "releases")


def dedup_path() -> Path:
    return _env_path("CORPUS_DEDUP", lambda: project_root() / "dedup.yaml")


if __name__ == "__main__":  # `python settings.py dagster_home`: the Makefile asks where things live
    import sys

    print({"corpus_home": corpus_home, "dagster_home": dagster_home}[sys.argv[1]]())
