"""A Dagster executor that runs each step on a Dask distributed cluster (``CORPUS_EXECUTOR=dask``).

Why not ``dagster_dask.dask_executor`` (0.29.27, checked against dask/distributed 2026.8):

- it hands Dagster's run record to ``Client.submit`` as a plain argument; current dask walks
  tuple arguments looking for futures, and the run record of any run that uses a concurrency
  pool holds a ``@record`` that refuses iteration, so every run of ``snapshot_job`` fails with
  "Iteration is not allowed on `@record` RunOpConcurrency";
- its Dask task keys are ``<job>.<step>`` without the run id, so two runs of the same job on one
  shared cluster are deduplicated by Dask (dagster issue #21418);
- it never claims pool slots, so ``pool="catalog_writer"`` would not be honoured.

This executor orchestrates with Dagster's own ``ActiveExecution`` (the engine loop of the
multiprocess executor: dependencies, skips, retries, pool slots from the instance) and only
replaces "run the step in a child process" with "run the step on a Dask worker". Arguments and
results travel inside plain wrapper objects that Dask does not look into. A step on a worker
builds the job from its module (the same Definitions, so the same code), opens the instance from
its ref (the same ``DAGSTER_HOME``) and writes its layers through the LayerStore under
``CORPUS_HOME``: a worker needs the corpus package, the same environment variables and the same
shared filesystem, and nothing else from the run process.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import ExitStack
from typing import Any

import dagster as dg
from dask.distributed import Client, LocalCluster
from dagster import _check as check
from dagster._core.definitions.executor_definition import multiple_process_executor_requirements
from dagster._core.definitions.reconstruct import ReconstructableJob
from dagster._core.events import DagsterEvent, EngineEventData
from dagster._core.execution.api import create_execution_plan, execute_plan_iterator
from dagster._core.execution.context.system import PlanOrchestrationContext
from dagster._core.execution.context_creation_job import create_context_free_log_manager
from dagster._core.execution.plan.active import ActiveExecution
from dagster._core.execution.plan.instance_concurrency_context import InstanceConcurrencyContext
from dagster._core.execution.plan.plan import ExecutionPlan
from dagster._core.execution.plan.state import KnownExecutionState
from dagster._core.execution.retries import RetryMode, get_retries_config
from dagster._core.executor.base import Executor
from dagster._core.instance.ref import InstanceRef
from dagster._core.storage.dagster_run import DagsterRun
from dagster._utils.error import serializable_error_info_from_exc_info

from corpus_assets.domain.core.compute import local_worker_environ

POLL_SECONDS = 0.25


class StepTask:
    """Everything a worker needs to run one step. A plain object, so Dask ships it as one opaque value."""

    __slots__ = ("recon_job", "dagster_run", "run_config", "step_key", "instance_ref", "known_state", "retry_mode")

    def __init__(self, recon_job: ReconstructableJob, dagster_run: DagsterRun, run_config: Mapping[str, Any],
                 step_key: str, instance_ref: InstanceRef, known_state: KnownExecutionState, retry_mode: RetryMode):
        self.recon_job = recon_job
        self.dagster_run = dagster_run
        self.run_config = run_config
        self.step_key = step_key
        self.instance_ref = instance_ref
        self.known_state = known_state
        self.retry_mode = retry_mode


class StepEvents:
    """The events of one step, returned from the worker (opaque to Dask's sizeof and graph parsing)."""

    __slots__ = ("events", "worker_pid")

    def __init__(self, events: Sequence[DagsterEvent], worker_pid: int):
        self.events = list(events)
        self.worker_pid = worker_pid

    def __sizeof__(self) -> int:
        return 1024 * (1 + len(self.events))


def run_step_on_worker(task: StepTask) -> StepEvents:
    """Runs on a Dask worker: one step of the run, events logged to the instance and returned."""
    with dg.DagsterInstance.from_ref(task.instance_ref) as instance:
        log_manager = create_context_free_log_manager(instance, task.dagster_run)
        events = [DagsterEvent.step_worker_started(
            log_manager,
            task.dagster_run.job_name,
            message=f'Executing step "{task.step_key}" on a Dask worker (pid {os.getpid()}).',
            metadata={"pid": dg.MetadataValue.text(str(os.getpid()))},
            step_key=task.step_key,
        )]
        plan = create_execution_plan(
            job=task.recon_job,
            run_config=task.run_config,
            step_keys_to_execute=[task.step_key],
            known_state=task.known_state,
        )
        events.extend(execute_plan_iterator(
            plan, task.recon_job, task.dagster_run, instance=instance,
            run_config=task.run_config, retry_mode=task.retry_mode.for_inner_plan(),
        ))
    for stream in (sys.stdout, sys.stderr):  # console log lines before a local worker is shut down
        stream.flush()
    return StepEvents(events, os.getpid())


class CorpusDaskExecutor(Executor):
    def __init__(self, cluster: Mapping[str, Mapping[str, Any]], retries: RetryMode, max_concurrent: int | None):
        ((self.cluster_type, self.cluster_config),) = cluster.items()
        self._retries = retries
        self.max_concurrent = max_concurrent

    @property
    def retries(self) -> RetryMode:
        return self._retries

    def _connect(self, stack: ExitStack, job_name: str):
        if self.cluster_type == "existing":
            return stack.enter_context(Client(self.cluster_config["address"])), self.max_concurrent
        workers = self.cluster_config.get("n_workers", 2)
        with local_worker_environ():  # glibc's adaptive malloc in the workers (core/compute.py)
            cluster = stack.enter_context(LocalCluster(
                n_workers=workers,
                threads_per_worker=1,  # one step per worker process: Dagster steps are not thread-safe
                processes=True,
                host=self.cluster_config.get("host", "127.0.0.1"),
                dashboard_address=None,
                name=job_name,
            ))
        return stack.enter_context(Client(cluster)), self.max_concurrent or workers

    def execute(self, plan_context: PlanOrchestrationContext, execution_plan: ExecutionPlan) -> Iterator[DagsterEvent]:
        check.invariant(plan_context.instance.is_persistent,
                        "the Dask executor needs a persistent Dagster instance (DAGSTER_HOME) that every worker can open")
        run = plan_context.dagster_run
        recon_job = plan_context.reconstructable_job
        instance_ref = plan_context.instance.get_ref()
        with ExitStack() as stack:
            client, limit = self._connect(stack, plan_context.job_name)
            yield DagsterEvent.engine_event(
                plan_context,
                f"Executing steps on the Dask cluster at {client.scheduler.address} "
                f"({len(client.scheduler_info().get('workers', {}))} workers, at most {limit or 'unbounded'} steps at once)",
                event_specific_data=EngineEventData(metadata={"scheduler": dg.MetadataValue.text(str(client.scheduler.address))}),
            )
            concurrency = stack.enter_context(InstanceConcurrencyContext(plan_context.instance, run))
            active = stack.enter_context(ActiveExecution(
                execution_plan, retry_mode=self.retries, max_concurrent=limit,
                instance_concurrency_context=concurrency,
            ))
            running: dict[Any, str] = {}
            try:
                while not active.is_complete or running:
                    if active.check_for_interrupts():
                        yield DagsterEvent.engine_event(plan_context, "Dask executor: termination requested; cancelling queued steps", EngineEventData.interrupted(list(running.values())))
                        active.mark_interrupted()
                        client.cancel(list(running))
                        for key in running.values():
                            active.verify_complete(plan_context, key)
                        running.clear()
                        break
                    for step in active.get_steps_to_execute():
                        task = StepTask(recon_job, run, plan_context.run_config, step.key, instance_ref,
                                        active.get_known_state(), self.retries)
                        future = client.submit(run_step_on_worker, task, key=f"{run.run_id}-{step.key}", pure=False)
                        running[future] = step.key
                    yield from active.concurrency_event_iterator(plan_context)
                    yield from active.plan_events_iterator(plan_context)
                    if not running:
                        if not active.is_complete:
                            time.sleep(max(POLL_SECONDS, min(active.sleep_interval(), 2.0)))
                        continue
                    done = [future for future in running if future.done()]
                    if not done:
                        time.sleep(POLL_SECONDS)
                    for future in done:
                        key = running.pop(future)
                        try:
                            events = future.result().events
                        except Exception:  # the worker died or the task could not run: fail (or retry) the step
                            error = serializable_error_info_from_exc_info(sys.exc_info())
                            step_context = plan_context.for_step(active.get_step_by_key(key))
                            yield DagsterEvent.engine_event(step_context, f"Dask executor: step {key} did not return", EngineEventData.engine_error(error))
                            event = self.log_failure_or_retry_event_after_error(step_context, error, active.get_known_state())
                            events = [event]
                        for event in events:
                            yield event
                            active.handle_event(event)
                        active.verify_complete(plan_context, key)
                    yield from active.plan_events_iterator(plan_context)
            except BaseException:
                # the orchestrator is going away: do not leave steps running on a shared cluster
                if running:
                    client.cancel(list(running))
                raise


@dg.executor(
    name="dask",
    requirements=multiple_process_executor_requirements(),
    config_schema={
        "cluster": dg.Field(
            dg.Selector({
                "local": dg.Field({
                    "n_workers": dg.Field(int, default_value=2, description="worker processes (one step each at a time)"),
                    "host": dg.Field(str, default_value="127.0.0.1", description="address the scheduler and workers bind to"),
                }),
                "existing": dg.Field({"address": dg.Field(dg.StringSource, description="scheduler address, e.g. tcp://10.0.0.5:8786")}),
            }),
            default_value={"local": {}},
            description="a LocalCluster started for the run, or an existing scheduler",
        ),
        "max_concurrent": dg.Field(int, is_required=False,
                                   description="steps in flight at once (default: n_workers for a local cluster, unbounded for an existing one)"),
        "retries": get_retries_config(),
    },
)
def corpus_dask_executor(init_context: dg.InitExecutorContext) -> CorpusDaskExecutor:
    """Runs each step on a Dask distributed cluster; pools, retries and dependencies as in the multiprocess executor."""
    config = init_context.executor_config
    return CorpusDaskExecutor(
        cluster=config["cluster"],
        retries=check.not_none(RetryMode.from_config(config["retries"])),
        max_concurrent=config.get("max_concurrent"),
    )
