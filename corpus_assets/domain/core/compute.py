"""Where the release phase's data-parallel tasks run: Dask, the engine the project already uses.

Release steps (dedup shards, token-view chunks, packing ranges) split their work into tasks — a
top-level function and one picklable argument per task, large data passed as file paths — and
hand them to :meth:`Engine.map`, which returns the results **in task order**. Callers combine
results in that order only, so an artifact never depends on the worker count or on which task
finished first.

Which Dask scheduler runs the tasks (:func:`engine_from_env`):

- ``CORPUS_DASK_SCHEDULER=tcp://host:8786``: the existing cluster (the one ``CORPUS_EXECUTOR=dask``
  runs steps on);
- the step itself runs on a Dask worker (``CORPUS_EXECUTOR=dask`` with a ``LocalCluster``): the
  same cluster, through ``worker_client`` (the step's worker secedes while it waits);
- ``CORPUS_RELEASE_WORKERS=N`` with N > 1: a ``LocalCluster`` of N single-threaded worker
  processes, started once per process and reused;
- otherwise: Dask's synchronous scheduler, in the calling process, one task after another.

Workers need what Dask workers of ``CORPUS_EXECUTOR=dask`` need: the corpus package, the same
environment and the same filesystem (task arguments name files under ``CORPUS_HOME`` or a
shared scratch directory).
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
import uuid
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Optional, Sequence

__all__ = ["Engine", "engine_from_env", "local_worker_environ", "RELEASE_WORKERS_ENV", "SCHEDULER_ENV"]

RELEASE_WORKERS_ENV = "CORPUS_RELEASE_WORKERS"
SCHEDULER_ENV = "CORPUS_DASK_SCHEDULER"
WORKER_MEMORY_ENV = "CORPUS_RELEASE_WORKER_MEMORY"  # Dask memory_limit per LocalCluster worker, e.g. "4GiB"

_lock = threading.Lock()
_local_clients: dict[tuple[int, str], Any] = {}


def local_worker_environ():
    """A ``dask.config.set`` context for starting a ``LocalCluster`` whose worker processes keep
    glibc's own malloc trimming. Dask's default ``pre-spawn-environ`` sets
    ``MALLOC_TRIM_THRESHOLD_=65536``, which also turns off glibc's adaptive mmap threshold, so
    every large array a task allocates is a fresh ``mmap`` whose pages fault in again: packing on
    2 such workers faulted 450k pages and spent 3.7 s in the kernel against 70k and 2.1 s without
    it (docs/benchmarks.md, "Parallel token views and packing"). The thread caps stay."""
    import dask

    spawn = dict(dask.config.get("distributed.nanny.pre-spawn-environ", default={}) or {})
    spawn.pop("MALLOC_TRIM_THRESHOLD_", None)
    return dask.config.set({"distributed.nanny.pre-spawn-environ": spawn})


@dataclass(frozen=True)
class Engine:
    """A Dask scheduler for release tasks. ``workers`` is how many tasks may run at once (1: the
    synchronous scheduler); ``address`` names an existing cluster instead of a local one."""

    workers: int = 1
    address: Optional[str] = None
    memory_limit: str = "auto"

    def __post_init__(self) -> None:
        if self.workers < 1:
            raise ValueError(f"workers must be >= 1, got {self.workers}")

    @property
    def kind(self) -> str:
        """``existing``, ``worker`` (inside a Dask worker), ``local`` or ``synchronous``."""
        if self.address:
            return "existing"
        if _on_dask_worker():
            return "worker"
        return "local" if self.workers > 1 else "synchronous"

    def describe(self) -> str:
        kind = self.kind
        if kind == "existing":
            return f"Dask cluster at {self.address}"
        if kind == "worker":
            return "the Dask cluster running this step"
        if kind == "local":
            return f"Dask LocalCluster of {self.workers} worker processes"
        return "Dask synchronous scheduler (in process)"

    def map(self, fn: Callable[[Any], Any], items: Iterable[Any], *, name: str = "task") -> list:
        """``[fn(item) for item in items]``, run as Dask tasks; results in item order. A task's
        exception is raised here (the first in item order among those that failed)."""
        items = list(items)
        if not items:
            return []
        kind = self.kind
        if kind == "synchronous":
            import dask
            from dask.local import get_sync

            tasks = [dask.delayed(_call, pure=False)(fn, _Opaque(item)) for item in items]
            # the scheduler itself, not its name: a name makes Dask import ``distributed`` to look
            # for a client (~0.2-0.5 s of every fresh step process)
            return list(dask.compute(*tasks, scheduler=get_sync))
        keys = _task_keys(name, len(items))
        if kind == "worker":
            from distributed import worker_client

            with worker_client() as client:
                return _gather_in_order(client, fn, items, keys)
        return _gather_in_order(self._client(), fn, items, keys)

    def _client(self):
        from distributed import Client, LocalCluster

        with _lock:
            if self.address:
                key = (0, self.address)
                if key not in _local_clients:
                    _local_clients[key] = Client(self.address, set_as_default=False)
                return _local_clients[key]
            key = (self.workers, self.memory_limit)
            client = _local_clients.get(key)
            if client is None or client.status not in ("running", "connecting"):
                try:
                    with local_worker_environ():
                        cluster = LocalCluster(
                            n_workers=self.workers,
                            threads_per_worker=1,
                            processes=True,
                            host="127.0.0.1",
                            # the scheduler's HTTP server (health, metrics) starts even without a dashboard;
                            # a free port, so a second cluster on the machine does not warn about 8787
                            dashboard_address="127.0.0.1:0",
                            memory_limit=self.memory_limit,
                            silence_logs=40,
                        )
                except RuntimeError as exc:  # Dask says only "Nanny failed to start"
                    raise RuntimeError(
                        f"the release engine could not start a LocalCluster of {self.workers} worker processes "
                        f"({exc}). Worker processes are spawned and import the main module again: a script "
                        f"that builds releases must do its work under `if __name__ == \"__main__\":`. "
                        f"Otherwise see the workers' error above, or set {RELEASE_WORKERS_ENV}=1 to build "
                        f"in process.") from exc
                client = Client(cluster, set_as_default=False)
                _local_clients[key] = client
            return client


class _Opaque:
    """Wraps a task argument so Dask neither traverses it (lists, tuples, dicts are walked for
    futures and delayed values) nor re-hashes it."""

    __slots__ = ("value",)

    def __init__(self, value: Any):
        self.value = value


def _call(fn: Callable[[Any], Any], arg: Any) -> Any:
    return fn(arg.value if isinstance(arg, _Opaque) else arg)


def _gather_in_order(client, fn, items: Sequence[Any], keys: Sequence[str]) -> list:
    futures = [client.submit(_call, fn, _Opaque(item), key=key, pure=False) for item, key in zip(items, keys)]
    try:
        return client.gather(futures, errors="raise")
    finally:
        for f in futures:
            f.release()


def _task_keys(name: str, n: int) -> list[str]:
    run = uuid.uuid4().hex[:12]  # never shared with another call: Dask deduplicates equal keys
    return [f"{name}-{run}-{i}" for i in range(n)]


def _on_dask_worker() -> bool:
    """Whether this code runs inside a Dask worker. A worker process has imported ``distributed``
    already; anywhere else, importing it just to ask would cost a fresh step process ~0.2-0.5 s."""
    if "distributed" not in sys.modules:
        return False
    try:
        from distributed import get_worker

        get_worker()
        return True
    except (ImportError, ValueError):
        return False


def engine_from_env(env: Optional[Mapping[str, str]] = None, *, workers: Optional[int] = None) -> Engine:
    """The engine the environment asks for (module docstring); ``workers`` overrides
    ``CORPUS_RELEASE_WORKERS``."""
    env = os.environ if env is None else env
    address = (env.get(SCHEDULER_ENV) or "").strip() or None
    if workers is None:
        raw = (env.get(RELEASE_WORKERS_ENV) or "1").strip()
        try:
            workers = int(raw)
        except ValueError:
            raise ValueError(f"{RELEASE_WORKERS_ENV}={raw!r}: expected a whole number of worker processes >= 1") from None
    memory = (env.get(WORKER_MEMORY_ENV) or "auto").strip()
    return Engine(workers=workers, address=address, memory_limit=memory)


@atexit.register
def _close_local_clients() -> None:
    with _lock:
        for client in _local_clients.values():
            try:
                cluster = client.cluster
                client.close()
                if cluster is not None:
                    cluster.close()
            except Exception:  # noqa: BLE001 - interpreter shutdown: nothing left to report to
                pass
        _local_clients.clear()
