"""Shared fixtures: an isolated data root and Dagster home per test."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from s3_server import s3_env, s3_server

PROJECT = Path(__file__).resolve().parents[1]
S3_FIXTURES = (s3_env, s3_server)  # the real S3-compatible server on 127.0.0.1, for any test module


@pytest.fixture
def corpus_env(tmp_path, monkeypatch):
    """A fresh CORPUS_HOME / DAGSTER_HOME, and the project's sources.yaml unless a test writes its own."""
    home = tmp_path / "home"
    dagster_home = home / "dagster"
    dagster_home.mkdir(parents=True)
    monkeypatch.setenv("CORPUS_HOME", str(home))
    monkeypatch.setenv("DAGSTER_HOME", str(dagster_home))
    monkeypatch.setenv("CORPUS_SOURCES", str(PROJECT / "sources.yaml"))
    monkeypatch.setenv("CORPUS_CURATION", str(PROJECT / "curation.yaml"))
    return home


def write_sources(path: Path, body: str) -> Path:
    path.write_text(body)
    os.environ["CORPUS_SOURCES"] = str(path)
    return path
