"""CORPUS_RELEASE_HISTORY_GRACE: the durations a user writes, and a clear error for anything else."""

import pytest

from corpus_assets.domain.release.history import history_grace, parse_grace


@pytest.mark.parametrize("text, seconds", [
    ("24h", 86400), ("90m", 5400), ("7d", 604800), ("30s", 30), ("3600", 3600), ("0", 0), (" 1.5h ", 5400),
    ("2H", 7200), ("keep", None), ("KEEP", None),
])
def test_durations(text, seconds):
    assert parse_grace(text) == seconds


@pytest.mark.parametrize("text", ["", "-1h", "1w", "h", "24 hours", "forever", "1h30m"])
def test_anything_else_is_refused_naming_the_variable(text):
    with pytest.raises(ValueError, match="CORPUS_RELEASE_HISTORY_GRACE=.*expected a duration"):
        parse_grace(text)


def test_unset_or_empty_means_a_day(monkeypatch):
    monkeypatch.delenv("CORPUS_RELEASE_HISTORY_GRACE", raising=False)
    assert history_grace() == 86400
    monkeypatch.setenv("CORPUS_RELEASE_HISTORY_GRACE", "")
    assert history_grace() == 86400
    monkeypatch.setenv("CORPUS_RELEASE_HISTORY_GRACE", "keep")
    assert history_grace() is None
