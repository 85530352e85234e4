"""The release engine's synchronous scheduler and its configuration (the LocalCluster side:
tests/integration/test_compute_engine_cluster.py)."""

import subprocess
import sys
from pathlib import Path

import pytest

from corpus_assets.domain.core.compute import Engine, engine_from_env


def _square_or_fail(x):
    if x == "boom":
        raise RuntimeError("task failed: boom")
    return x * x


def test_results_come_back_in_item_order():
    assert Engine().map(_square_or_fail, [3, 1, 2]) == [9, 1, 4]
    assert Engine().map(_square_or_fail, []) == []


def test_container_arguments_reach_the_task_unchanged():
    # Dask walks lists/tuples/dicts looking for tasks; the engine hands them over as they are
    items = [[1, 2], (3, 4), {"a": [5]}]
    assert Engine().map(repr, items) == [repr(i) for i in items]


def test_a_failing_task_raises_in_the_caller():
    with pytest.raises(RuntimeError, match="boom"):
        Engine().map(_square_or_fail, [1, "boom", 2])


def test_the_synchronous_scheduler_does_not_import_distributed():
    """A release step on one worker pays no ``distributed`` import in its fresh process."""
    code = ("import sys; from corpus_assets.domain.core.compute import Engine; e = Engine(); "
            "print(e.kind, e.map(abs, [-2, 3]), 'distributed' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[2]).stdout.split()
    assert out == ["synchronous", "[2,", "3]", "False"]


def test_engine_from_env():
    assert engine_from_env({}).kind == "synchronous"
    assert engine_from_env({"CORPUS_RELEASE_WORKERS": "3"}).workers == 3
    assert engine_from_env({"CORPUS_RELEASE_WORKERS": "3"}, workers=1).workers == 1
    e = engine_from_env({"CORPUS_DASK_SCHEDULER": " tcp://10.0.0.5:8786 "})
    assert e.address == "tcp://10.0.0.5:8786" and e.kind == "existing"
    assert engine_from_env({"CORPUS_RELEASE_WORKER_MEMORY": "3GiB"}).memory_limit == "3GiB"


@pytest.mark.parametrize("raw", ["two", "1.5", ""])
def test_bad_worker_counts_are_refused_with_the_variable_named(raw):
    if raw == "":
        assert engine_from_env({"CORPUS_RELEASE_WORKERS": raw}).workers == 1  # empty: the default
        return
    with pytest.raises(ValueError, match="CORPUS_RELEASE_WORKERS"):
        engine_from_env({"CORPUS_RELEASE_WORKERS": raw})


def test_zero_workers_is_refused():
    with pytest.raises(ValueError, match="workers must be >= 1"):
        engine_from_env({"CORPUS_RELEASE_WORKERS": "0"})
