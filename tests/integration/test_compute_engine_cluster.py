"""The release engine on a real Dask LocalCluster: tasks run in other processes, results in item order."""

import os

import pytest

from corpus_assets.domain.core.compute import Engine


def _pid_and_square(x):
    import time

    time.sleep(0.05 * (5 - x))  # later items finish first
    if x == 4:
        raise ValueError("item 4 is bad")
    return os.getpid(), x * x


def _pid_square_ok(x):
    return os.getpid(), x * x


def test_local_cluster_runs_tasks_in_worker_processes_and_keeps_item_order():
    engine = Engine(workers=2)
    assert engine.kind == "local"
    out = engine.map(_pid_square_ok, list(range(8)), name="square")
    assert [sq for _, sq in out] == [x * x for x in range(8)]
    assert os.getpid() not in {pid for pid, _ in out}
    # a second map reuses the cluster: equal task functions and arguments are not deduplicated away
    assert [sq for _, sq in engine.map(_pid_square_ok, list(range(8)), name="square")] == [x * x for x in range(8)]


def test_a_failing_task_on_the_cluster_raises_in_the_caller():
    with pytest.raises(ValueError, match="item 4 is bad"):
        Engine(workers=2).map(_pid_and_square, [0, 1, 2, 3, 4], name="fails")


def test_local_cluster_workers_keep_glibc_adaptive_malloc():
    """Dask's default worker environment sets MALLOC_TRIM_THRESHOLD_, which makes every large
    array of a packing task fault its pages in again (half the task in the kernel); the
    engine's workers must not get it, but keep Dask's thread caps."""
    out = Engine(workers=2).map(os.getenv, ["MALLOC_TRIM_THRESHOLD_", "OMP_NUM_THREADS"], name="env")
    assert out == [os.environ.get("MALLOC_TRIM_THRESHOLD_"), "1"]


def test_a_script_without_a_main_guard_gets_a_clear_error_not_a_rerun(tmp_path):
    """Spawned workers import the main module again: a script that builds at module level would
    run its work a second time in every worker (real_pages_lifecycle.py once wiped CORPUS_HOME so).
    The error names the cause and the way out instead of Dask's "Nanny failed to start"."""
    import subprocess
    import sys

    script = tmp_path / "build_at_module_level.py"
    script.write_text(
        "from corpus_assets.domain.core.compute import Engine\n"
        "print(Engine(workers=2).map(abs, [-1, -2], name='abs'))\n")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode != 0
    assert 'if __name__ == "__main__":' in done.stderr and "CORPUS_RELEASE_WORKERS=1" in done.stderr
    assert "[1, 2]" not in done.stdout
