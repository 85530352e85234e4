"""Running a recipe data job: generate → clean → dedup/exclude → calibrate → select → publish.

``run_data_job(config, output_dir, resume=False)`` runs the whole job in a dedicated coordinator
thread that owns its asyncio event loop, the SQLite checkpoint store and all snapshot I/O; the
caller only waits (``run_data_job_async`` for callers inside an event loop). The output directory
(owner-only) holds ``job.json``, ``config.json``, ``progress.json``, ``work/`` and the published
``dataset/``. Calibration sees public tasks only and is committed before scoring; chunks are
fixed by ``batch_size`` and merged in order, so the dataset does not depend on workers or
backend; resume reuses committed blocks and is refused when the identity changed. Logs and
errors carry counts and task ids only, never references.

Order, dedup rules, budgets, resume and failures: docs/recipes.md#executor
"""

from __future__ import annotations

import asyncio
import fcntl
import inspect
import json
import logging
import os
import shutil
import sys
import threading
import time
from pathlib import Path
from typing import Any, Mapping, Optional

from corpus_assets.domain.core.atomic_files import atomic_write, atomic_write_text
from corpus_assets.domain.recipe.config import DataJobConfig
from corpus_assets.domain.recipe.identity import identity_changes, identity_digest, job_identity
from corpus_assets.domain.recipe.plugins import create_recipe, is_ranked, is_sharded, load_callable
from corpus_assets.domain.recipe.protocol import (
    BudgetExhaustedError,
    CalibrationBatch,
    CalibrationContext,
    CalibrationProtocolError,
    GenerationContext,
    GenerationShard,
    InsufficientDataError,
    RecipeError,
    ResumeRefusedError,
    SelectionContext,
    SelectionPolicy,
    check_attempts,
    select_ranked_candidates,
)
from corpus_assets.domain.recipe.samples import (
    content_key,
    dumps,
    input_key,
    public_row,
    record_to_task,
)
from corpus_assets.domain.recipe.snapshot import Snapshot, load_snapshot, write_snapshot
from corpus_assets.domain.recipe.store import CheckpointStore, PoolSamples, PoolScores
from corpus_assets.domain.recipe.workers import (
    JobCancelled,
    WorkerPool,
    backoff_delay,
    call_with_retry,
    clean_chunk,
    is_retryable,
    iterate_with_retry,
    rank_chunk,
    score_chunk,
    shard_chunk,
    train_chunk,
)

__all__ = ["JobCancelled", "run_data_job", "run_data_job_async"]

log = logging.getLogger("corpus.recipe")

DATASET_DIR = "dataset"
WORK_DIR = "work"
CHECKPOINTS = "checkpoints.sqlite3"


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _write_json_atomic(path: Path, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, sort_keys=True, indent=2, ensure_ascii=False) + "\n", mode=0o600)


def _load_exclusions(paths: list[Path]) -> set[str]:
    ids: set[str] = set()
    for i, path in enumerate(paths):
        try:
            f = open(path, encoding="utf-8")
        except OSError as exc:
            raise RecipeError(f"exclude[{i}]: cannot read {path} ({exc.strerror})") from None
        with f:
            for n, line in enumerate(f, start=1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError:
                    raise RecipeError(f"exclude[{i}]: {path} line {n} is not valid JSON") from None
                if not isinstance(row, dict) or not isinstance(row.get("task_id"), str):
                    raise RecipeError(f"exclude[{i}]: {path} line {n} has no top-level string task_id")
                ids.add(row["task_id"])
    return ids


class _Job:
    def __init__(self, config: DataJobConfig | Mapping, output_dir: Path, resume: bool, cancel: threading.Event) -> None:
        if isinstance(config, Mapping):
            config = DataJobConfig.model_validate(dict(config))
        if not isinstance(config, DataJobConfig):
            raise TypeError("config must be a DataJobConfig or a mapping (see load_config)")
        self.config = config.resolved()
        self.out = Path(output_dir).resolve()
        self.resume = resume
        self.cancel = cancel
        self.work = self.out / WORK_DIR
        self.store: Optional[CheckpointStore] = None
        self.pool: Optional[WorkerPool] = None
        self.loop: Optional[asyncio.AbstractEventLoop] = None
        self.lock_fd: Optional[int] = None
        self.calibrator: Any = None
        self.job_started = False
        self.started_at = _now()
        self.identity: dict = {}
        cal = self.config.calibration
        self.repeats = cal.repeats if cal is not None else 0
        self.spec = (self.config.recipe, dumps(self.config.params))
        self.sel_ctx = SelectionContext(
            seed=self.config.seed,
            target_count=self.config.target_count,
            purpose=self.config.purpose,
            calibrated=cal is not None,
            repeats=self.repeats,
        )

    # ------------------------------------------------------------------------------ lifecycle

    def run(self) -> Snapshot:
        status, error = "failed", None
        try:
            snap = self._run()
            status = "succeeded"
            self.dataset_id = snap.dataset_id
            return snap
        except (JobCancelled, KeyboardInterrupt):
            status = "cancelled"
            raise
        except BaseException as exc:
            error = f"{type(exc).__name__}: {exc}"
            raise
        finally:
            self._cleanup()
            if self.job_started:
                self._write_job(status, error)
            self._unlock()

    def _cleanup(self) -> None:
        # a second interrupt must not cut the cleanup short
        while True:
            try:
                if self.pool is not None:
                    self.pool.shutdown()
                    self.pool = None
                if self.store is not None:
                    self.store.close()
                    self.store = None
                if self.loop is not None:
                    self.loop.run_until_complete(self.loop.shutdown_asyncgens())
                    self.loop.close()
                    self.loop = None
                return
            except KeyboardInterrupt:
                self.cancel.set()

    def _unlock(self) -> None:
        if self.lock_fd is not None:
            os.close(self.lock_fd)
            self.lock_fd = None

    def _write_job(self, status: str, error: Optional[str] = None) -> None:
        body = {
            "status": status,
            "output": str(self.out),
            "started_at": self.started_at,
            "updated_at": _now(),
            "job_identity": identity_digest(self.identity) if self.identity else None,
        }
        if error:
            body["error"] = error
        if status == "succeeded":
            body["dataset_id"] = getattr(self, "dataset_id", None)
            body["dataset_path"] = str(self.out / DATASET_DIR)
        _write_json_atomic(self.out / "job.json", body)

    def _progress(self, stage: str, **extra: Any) -> None:
        store = self.store
        body = {"stage": stage, "updated_at": _now(), **extra}
        if store is not None:
            body.update(raw_candidates=store.raw_count(), pool=store.pool_size())
        _write_json_atomic(self.out / "progress.json", body)

    def _check_cancel(self) -> None:
        if self.cancel.is_set():
            raise JobCancelled("data job cancelled")

    def _lock(self) -> None:
        fd = os.open(self.work / "job.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise RecipeError(f"{self.out}: another process is running this data job") from None
        self.lock_fd = fd

    # ---------------------------------------------------------------------------------- setup

    def _prepare(self) -> Optional[Snapshot]:
        """Check the output dir, compute the identity, open the store; a finished job's snapshot."""
        out = self.out
        if self.resume:
            if not (self.work / CHECKPOINTS).is_file():
                raise RecipeError(f"--resume: {out} holds no data job (no {WORK_DIR}/{CHECKPOINTS})")
        elif out.exists() and (not out.is_dir() or any(out.iterdir())):
            raise RecipeError(f"output directory {out} already exists and is not empty (use --resume to continue a job)")

        self.loop = asyncio.new_event_loop()
        asyncio.set_event_loop(self.loop)
        self.recipe = create_recipe(self.config.recipe, self.config.params)
        self.sharded = is_sharded(self.recipe)
        self.ranked = is_ranked(self.recipe)
        if self.config.calibration is not None:
            load_callable(self.config.calibration.implementation, "calibration.implementation")
        self.identity = job_identity(self.config, self.recipe)

        if self.resume:
            self._lock()
            self.store = CheckpointStore(self.work / CHECKPOINTS)
            changes = identity_changes(self.store.get_meta("identity"), self.identity)
            if changes:
                raise ResumeRefusedError(f"cannot resume {out}: " + "; ".join(changes))
            for leftover in out.glob(f".{DATASET_DIR}.tmp-*"):
                shutil.rmtree(leftover, ignore_errors=True)
            self.job_started = True
            dataset = out / DATASET_DIR
            if dataset.exists():
                snap = load_snapshot(dataset)
                if snap.manifest.get("job_identity") != identity_digest(self.identity):
                    raise ResumeRefusedError(f"cannot resume {out}: its dataset was published by another job identity")
                log.info("data job %s already finished: dataset %s verified", out, snap.dataset_id)
                return snap
        else:
            out.mkdir(parents=True, exist_ok=True, mode=0o700)
            os.chmod(out, 0o700)
            self.work.mkdir(mode=0o700, exist_ok=True)
            self._lock()
            self.store = CheckpointStore(self.work / CHECKPOINTS)
            self.store.set_meta("identity", self.identity)
            _write_json_atomic(out / "config.json", self.identity["config"])
            self.job_started = True
        self._write_job("running")
        return None

    async def _make_calibrator(self) -> Any:
        cal = self.config.calibration
        assert cal is not None
        factory = load_callable(cal.implementation, "calibration.implementation")
        obj = factory(**dict(cal.params))
        if inspect.isawaitable(obj):
            obj = await obj
        if not callable(obj):
            raise RecipeError(f"calibration.implementation: {cal.implementation!r} did not return a callable calibrator")
        return obj

    # ----------------------------------------------------------------------------------- main

    def _run(self) -> Snapshot:
        finished = self._prepare()
        if finished is not None:
            return finished
        cfg = self.config
        self.exclude = _load_exclusions(cfg.exclude)
        if cfg.calibration is not None:
            self.calibrator = self.loop.run_until_complete(self._make_calibrator())
        self.pool = WorkerPool(cfg.execution, self.cancel)
        log.info(
            "data job %s: recipe %s, target %d, purpose %s, %s",
            self.out, cfg.recipe, cfg.target_count, cfg.purpose, "resuming" if self.resume else "new",
        )
        final_batch = None
        for b in range(cfg.max_batches):
            self._check_cancel()
            self._generate_batch(b)
            self._calibrate_batch(b)
            self._score_batch(b)
            if self.ranked:
                self._rank_batch(b)
            ok, message = self._select(b)
            if ok:
                final_batch = b
                break
            raw = self.store.raw_count()
            out_of_batches = b + 1 >= cfg.max_batches
            out_of_candidates = cfg.max_candidates is not None and raw >= cfg.max_candidates
            if out_of_batches or out_of_candidates:
                raise BudgetExhaustedError(
                    f"budget exhausted: selection still insufficient after {b + 1} batch(es) "
                    f"(max_batches={cfg.max_batches}) and {raw} raw candidate(s) "
                    f"(max_candidates={cfg.max_candidates if cfg.max_candidates is not None else 'unlimited'}); "
                    f"pool holds {self.store.pool_size()} candidate(s) for target_count={cfg.target_count}; "
                    f"select asked for more data: {message}"
                )
            log.info("batch %d: selection insufficient, generating another batch", b)
        assert final_batch is not None
        self._project()
        return self._publish(final_batch)

    def _gen_context(self, b: int) -> GenerationContext:
        cfg = self.config
        return GenerationContext(
            seed=cfg.seed,
            batch_index=b,
            target_count=cfg.target_count,
            purpose=cfg.purpose,
            inputs=tuple(cfg.inputs),
            params=dict(cfg.params),
        )

    # ---------------------------------------------------------------- generate, clean, dedup

    def _generate_batch(self, b: int) -> None:
        store, cfg = self.store, self.config
        if store.has_block("generated", b):
            self._export_batch_public(b)
            return
        used_before = store.conn.execute("SELECT COUNT(*) FROM decisions WHERE batch<?", (b,)).fetchone()[0]
        remaining = None if cfg.max_candidates is None else cfg.max_candidates - used_before
        ctx = self._gen_context(b)
        bs = cfg.execution.batch_size
        self._progress("generate", batch=b)
        if self.sharded:
            truncated = self._generate_sharded(b, ctx, remaining)
        else:
            truncated = self._generate_plain(b, ctx, remaining, bs)
        raw = store.raw_count(b)
        with store.transaction() as c:
            store.mark(c, "generated", b, 0, {"raw": raw, "truncated": truncated})
        counts = dict(
            store.conn.execute(
                "SELECT outcome, COUNT(*) FROM decisions WHERE batch=? GROUP BY outcome", (b,)
            ).fetchall()
        )
        log.info(
            "batch %d: %d raw candidate(s)%s; kept %d, cleaned out %d, excluded %d, duplicates %d",
            b, raw, " (cut at max_candidates)" if truncated else "", counts.get("kept", 0),
            counts.get("cleaned_out", 0), counts.get("excluded", 0),
            counts.get("duplicate_task_id", 0) + counts.get("duplicate_input", 0),
        )
        self._export_batch_public(b)

    def _generate_plain(self, b: int, ctx: GenerationContext, remaining: Optional[int], bs: int) -> bool:
        committed = {idx for _, idx, _ in self.store.blocks("clean", b)}
        state = {"truncated": False}

        def jobs():
            raws = iterate_with_retry(lambda: self.recipe.generate(ctx), self.config.execution, self.cancel)
            chunk: list = []
            idx = n = 0
            for raw in raws:
                if remaining is not None and n >= remaining:
                    state["truncated"] = True
                    break
                chunk.append(raw)
                n += 1
                if len(chunk) == bs:
                    if idx not in committed:
                        yield idx, (self.spec, b, idx * bs, chunk)
                    idx += 1
                    chunk = []
            if chunk and idx not in committed:
                yield idx, (self.spec, b, idx * bs, chunk)

        for idx, results in self.pool.map_ordered(clean_chunk, jobs()):
            self._commit_clean("clean", b, idx, idx * bs, results)
        return state["truncated"]

    def _generate_sharded(self, b: int, ctx: GenerationContext, remaining: Optional[int]) -> bool:
        shards = call_with_retry(
            lambda: self.recipe.generation_shards(ctx, self.config.execution.batch_size),
            self.config.execution, self.cancel,
        )
        if not isinstance(shards, (list, tuple)):
            raise RecipeError(f"generation_shards (batch {b}) must return a list of GenerationShard")
        expected = 0
        for i, s in enumerate(shards):
            if not isinstance(s, GenerationShard) or s.start != expected or s.stop <= s.start:
                raise RecipeError(
                    f"generation_shards (batch {b}): shard {i} must be a GenerationShard starting at "
                    f"{expected} with stop > start (shards are contiguous from 0)"
                )
            expected = s.stop
        truncated = False
        if remaining is not None and expected > remaining:
            truncated = True
            shards = [GenerationShard(s.start, min(s.stop, remaining)) for s in shards if s.start < remaining]
        committed = {idx for _, idx, _ in self.store.blocks("shard", b)}
        jobs = (
            (i, (self.spec, ctx, s)) for i, s in enumerate(shards) if i not in committed
        )
        for i, results in self.pool.map_ordered(shard_chunk, jobs):
            self._commit_clean("shard", b, i, shards[i].start, results)
        return truncated

    def _commit_clean(self, kind: str, b: int, idx: int, start: int, results: list[Optional[dict]]) -> None:
        store = self.store
        with store.transaction() as c:
            for i, rec in enumerate(results):
                tid, detail = None, None
                if rec is None:
                    outcome = "cleaned_out"
                elif rec["task_id"] in self.exclude:
                    outcome, tid = "excluded", rec["task_id"]
                else:
                    tid = rec["task_id"]
                    ck, ik, ref = content_key(rec), input_key(rec), dumps(rec["reference"])
                    same_id = c.execute("SELECT content_key FROM candidates WHERE task_id=?", (tid,)).fetchone()
                    if same_id is not None:
                        if same_id[0] != ck:
                            raise RecipeError(
                                f"task_id {tid!r} was produced again with different cleaned content "
                                "(the same task_id must mean the same content)"
                            )
                        outcome = "duplicate_task_id"
                    else:
                        same_input = c.execute(
                            "SELECT task_id, reference FROM candidates WHERE input_key=?", (ik,)
                        ).fetchone()
                        if same_input is not None:
                            if same_input[1] != ref:
                                raise RecipeError(
                                    f"tasks {same_input[0]!r} and {tid!r} have the same public input "
                                    "but conflicting references"
                                )
                            outcome, detail = "duplicate_input", same_input[0]
                        else:
                            c.execute(
                                "INSERT INTO candidates(task_id, input_key, content_key, batch, record, reference) "
                                "VALUES (?, ?, ?, ?, ?, ?)",
                                (tid, ik, ck, b, dumps(rec), ref),
                            )
                            outcome = "kept"
                c.execute(
                    "INSERT INTO decisions(batch, raw_index, outcome, task_id, detail) VALUES (?, ?, ?, ?, ?)",
                    (b, start + i, outcome, tid, detail),
                )
            store.mark(c, kind, b, idx, {"raw": len(results)})
        self._progress("clean", batch=b, block=idx)

    def _export_batch_public(self, b: int) -> None:
        """Diagnostic ``work/batch-N-public.jsonl`` (usable as an exclude file); regenerable."""
        path = self.work / f"batch-{b}-public.jsonl"
        if path.exists():
            return
        def write(f) -> None:
            for rec in self.store.batch_records(b):
                f.write((dumps(public_row(rec)) + "\n").encode("utf-8"))

        atomic_write(path, write, mode=0o600)

    # ---------------------------------------------------------------------------- calibration

    def _batch_chunks(self, b: int) -> list[list[dict]]:
        records = self.store.batch_records(b)
        bs = self.config.execution.batch_size
        return [records[i : i + bs] for i in range(0, len(records), bs)]

    def _calibrate_batch(self, b: int) -> None:
        if self.calibrator is None:
            return
        chunks = self._batch_chunks(b)
        todo = [i for i in range(len(chunks)) if not self.store.has_block("calibrate", b, i)]
        if not todo:
            return
        self._progress("calibrate", batch=b)
        log.info("batch %d: calibrating %d chunk(s) (%d already committed)", b, len(todo), len(chunks) - len(todo))
        self.loop.run_until_complete(self._calibrate_chunks(b, chunks, todo))

    async def _calibrate_chunks(self, b: int, chunks: list[list[dict]], todo: list[int]) -> None:
        ex = self.config.execution
        sem = asyncio.Semaphore(ex.max_workers)

        async def one(i: int) -> None:
            async with sem:
                self._check_cancel()
                ids = [r["task_id"] for r in chunks[i]]
                ctx = CalibrationContext(repeats=self.repeats, batch_index=b, seed=self.config.seed)
                attempt = 0
                while True:
                    tasks = [record_to_task(r) for r in chunks[i]]  # fresh public copies
                    try:
                        result = self.calibrator(tasks, ctx)
                        if inspect.isawaitable(result):
                            result = await result
                        break
                    except Exception as exc:
                        if not is_retryable(exc) or attempt >= ex.max_retries:
                            raise
                        await asyncio.sleep(backoff_delay(attempt, ex.retry_delay))
                        attempt += 1
                self._commit_calibration(b, i, ids, result)

        tasks = [asyncio.ensure_future(one(i)) for i in todo]
        try:
            pending = set(tasks)
            while pending:
                done, pending = await asyncio.wait(pending, timeout=0.1, return_when=asyncio.FIRST_EXCEPTION)
                for t in done:
                    if t.exception() is not None:
                        raise t.exception()
                self._check_cancel()
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    def _commit_calibration(self, b: int, i: int, ids: list[str], result: Any) -> None:
        if not isinstance(result, CalibrationBatch):
            raise CalibrationProtocolError(
                f"calibrator returned {type(result).__name__} for batch {b} chunk {i}, expected CalibrationBatch"
            )
        attempts = check_attempts(result.attempts, ids, self.repeats)
        if not isinstance(result.provenance, dict):
            raise CalibrationProtocolError("calibrator provenance must be a dict")
        try:
            provenance = dumps(result.provenance)
        except (TypeError, ValueError):
            raise CalibrationProtocolError("calibrator provenance is not JSON-serializable") from None
        position = {tid: n for n, tid in enumerate(ids)}
        rows = []
        for (tid, r), a in sorted(attempts.items(), key=lambda kv: (position[kv[0][0]], kv[0][1])):
            try:
                response = dumps(a.response)
            except (TypeError, ValueError):
                raise CalibrationProtocolError(
                    f"calibrator response for task {tid!r} repeat {r} is not JSON-serializable"
                ) from None
            reason = a.failure_reason or None
            rows.append((tid, r, response, reason, b, i))
        with self.store.transaction() as c:
            c.executemany(
                "INSERT INTO attempts(task_id, repeat, response, failure_reason, batch, chunk) VALUES (?, ?, ?, ?, ?, ?)",
                rows,
            )
            c.execute(
                "INSERT INTO calibration_chunks(batch, chunk, provenance) VALUES (?, ?, ?)", (b, i, provenance)
            )
            self.store.mark(c, "calibrate", b, i)
        self._progress("calibrate", batch=b, block=i)

    def _score_batch(self, b: int) -> None:
        if self.calibrator is None:
            return
        store = self.store
        chunks = self._batch_chunks(b)

        def jobs():
            for i, chunk in enumerate(chunks):
                if store.has_block("score", b, i):
                    continue
                items = [
                    (rec, [(r, resp) for r, resp, reason in store.attempts_for(rec["task_id"]) if reason is None])
                    for rec in chunk
                ]
                yield i, (self.spec, items)

        for i, results in self.pool.map_ordered(score_chunk, jobs()):
            with store.transaction() as c:
                for rec, scored in zip(chunks[i], results):
                    got = dict(scored)
                    c.executemany(
                        "INSERT INTO scores(task_id, repeat, score) VALUES (?, ?, ?)",
                        [(rec["task_id"], r, got.get(r)) for r in range(self.repeats)],
                    )
                store.mark(c, "score", b, i)
            self._progress("score", batch=b, block=i)

    # ------------------------------------------------------------------------------ selection

    def _rank_batch(self, b: int) -> None:
        store = self.store
        chunks = self._batch_chunks(b)

        def jobs():
            for i, chunk in enumerate(chunks):
                if store.has_block("rank", b, i):
                    continue
                items = [(rec, store.scores_for(rec["task_id"], self.repeats)) for rec in chunk]
                yield i, (self.spec, items, self.sel_ctx)

        for i, results in self.pool.map_ordered(rank_chunk, jobs()):
            with store.transaction() as c:
                for rec, r in zip(chunks[i], results):
                    if r is None:
                        c.execute("INSERT INTO ranks(task_id, eligible) VALUES (?, 0)", (rec["task_id"],))
                    else:
                        c.execute(
                            "INSERT INTO ranks(task_id, eligible, priority, tie_breaker, grp, bucket, metadata) "
                            "VALUES (?, 1, ?, ?, ?, ?, ?)",
                            (rec["task_id"], r["priority"], r["tie_breaker"], r["group"], r["bucket"], dumps(r["metadata"])),
                        )
                store.mark(c, "rank", b, i)
            self._progress("rank", batch=b, block=i)

    def _select(self, b: int) -> tuple[bool, str]:
        store = self.store
        prev = store.selection(b)
        if prev is not None:
            outcome, detail = prev
            return outcome == "selected", detail.get("message", "")
        self._check_cancel()
        self._progress("select", batch=b)
        try:
            if self.ranked:
                ids, detail = call_with_retry(lambda: self._select_ranked(b), self.config.execution, self.cancel)
            else:
                ids = call_with_retry(
                    lambda: self.recipe.select(
                        PoolSamples(store, b), PoolScores(store, b, self.repeats), self.sel_ctx
                    ),
                    self.config.execution, self.cancel,
                )
                detail = {"mode": "plain"}
        except InsufficientDataError as exc:
            message = str(exc) or "InsufficientDataError"
            with store.transaction() as c:
                c.execute(
                    "INSERT INTO selections(batch, outcome, detail) VALUES (?, 'insufficient', ?)",
                    (b, json.dumps({"message": message, "pool": store.pool_size(b)})),
                )
            return False, message
        ids = self._check_selection(ids, b)
        with store.transaction() as c:
            c.executemany("INSERT INTO selected(position, task_id) VALUES (?, ?)", list(enumerate(ids)))
            c.execute(
                "INSERT INTO selections(batch, outcome, detail) VALUES (?, 'selected', ?)", (b, dumps(detail))
            )
        log.info("batch %d: selected %d task(s) from a pool of %d", b, len(ids), store.pool_size(b))
        return True, ""

    def _select_ranked(self, b: int) -> tuple[list[str], dict]:
        policy = self.recipe.selection_policy(self.sel_ctx, self.sel_ctx.calibrated)
        if not isinstance(policy, SelectionPolicy):
            raise RecipeError(f"selection_policy returned {type(policy).__name__}, expected SelectionPolicy")
        chosen = select_ranked_candidates(self.store.ranked_candidates(b), policy, self.config.target_count)
        eligible = self.store.eligible_count(b)
        result = self.recipe.finalize_selection(chosen, eligible, self.sel_ctx)
        if not isinstance(result, tuple) or len(result) != 2 or not isinstance(result[1], dict):
            raise RecipeError("finalize_selection must return (task_ids, stats dict)")
        ids, stats = result
        try:
            stats = json.loads(dumps(stats))
        except (TypeError, ValueError):
            raise RecipeError("finalize_selection stats are not JSON-serializable") from None
        detail = {
            "mode": "ranked",
            "eligible": eligible,
            "merged": len(chosen),
            "policy": {
                "minimum_per_group": dict(policy.minimum_per_group),
                "maximum_per_bucket": policy.maximum_per_bucket,
            },
            "stats": stats,
        }
        return ids, detail

    def _check_selection(self, ids: Any, b: int) -> list[str]:
        what = "finalize_selection" if self.ranked else "select"
        if not isinstance(ids, (list, tuple)):
            raise RecipeError(f"{what} must return a list of task ids, got {type(ids).__name__}")
        target = self.config.target_count
        if len(ids) != target:
            raise RecipeError(f"{what} returned {len(ids)} task id(s), expected exactly target_count={target}")
        seen: set[str] = set()
        for tid in ids:
            if not isinstance(tid, str):
                raise RecipeError(f"{what} returned a {type(tid).__name__} among task ids")
            if tid in seen:
                raise RecipeError(f"{what} returned task id {tid!r} twice")
            seen.add(tid)
            pos = self.store.task_seq(tid)
            if pos is None or pos[1] > b:
                raise RecipeError(f"{what} returned task id {tid!r}, which is not in the candidate pool")
        return list(ids)

    # ------------------------------------------------------------------------ project, publish

    def _project(self) -> None:
        store = self.store
        ids = store.selected_ids()
        bs = self.config.execution.batch_size
        chunks = [ids[i : i + bs] for i in range(0, len(ids), bs)]

        def jobs():
            for i, chunk in enumerate(chunks):
                if not store.has_block("train", 0, i):
                    yield i, (self.spec, store.records_by_ids(chunk))

        self._progress("project")
        for i, lines in self.pool.map_ordered(train_chunk, jobs()):
            with store.transaction() as c:
                c.executemany(
                    "INSERT INTO train_rows(position, task_id, row) VALUES (?, ?, ?)",
                    [(i * bs + j, tid, line) for j, (tid, line) in enumerate(zip(chunks[i], lines))],
                )
                store.mark(c, "train", 0, i)
            self._progress("project", block=i)

    def _report(self, final_batch: int) -> dict:
        store, cfg = self.store, self.config
        counts = store.decision_counts()
        raw = store.raw_count()
        removed = counts.get("cleaned_out", 0)
        selections = store.selections()
        selected_detail = next(d for b, o, d in selections if o == "selected")
        calibration: dict = {"calibrated": self.calibrator is not None, "repeats": self.repeats}
        if self.calibrator is not None:
            calibration.update(store.calibration_stats())
        return {
            "target_count": cfg.target_count,
            "purpose": cfg.purpose,
            "seed": cfg.seed,
            "generation": {
                "batches": [{"batch": b, **info} for b, _, info in store.blocks("generated")],
                "raw_candidates": raw,
                "max_batches": cfg.max_batches,
                "max_candidates": cfg.max_candidates,
            },
            "cleaning": {"input": raw, "removed": removed, "kept": raw - removed},
            "exclusion": {
                "files": len(cfg.exclude),
                "excluded_task_ids": len(self.exclude),
                "excluded": counts.get("excluded", 0),
            },
            "dedup": {
                "duplicate_task_id": counts.get("duplicate_task_id", 0),
                "duplicate_input": counts.get("duplicate_input", 0),
            },
            "pool": {"candidates": store.pool_size()},
            "calibration": calibration,
            "selection": {
                **selected_detail,
                "batches_used": final_batch + 1,
                "insufficient": [
                    {"batch": b, "message": d.get("message", "")} for b, o, d in selections if o == "insufficient"
                ],
                "selected": len(store.selected_ids()),
                "claims_model_difficulty_calibration": self.calibrator is not None,
            },
        }

    def _publish(self, final_batch: int) -> Snapshot:
        self._check_cancel()
        current = job_identity(self.config, self.recipe)
        changes = identity_changes(self.identity, current)
        if changes:
            raise RecipeError("sources or inputs changed while the job ran: " + "; ".join(changes))
        store, cfg = self.store, self.config
        ids = store.selected_ids()
        if store.train_row_count() != len(ids):
            raise RecipeError("internal: projection is incomplete")

        def records():
            for i in range(0, len(ids), 256):
                yield from store.records_by_ids(ids[i : i + 256])

        def probes():
            for tid in ids:
                scores = store.scores_for(tid, self.repeats)
                for r, resp, reason in store.attempts_for(tid):
                    yield {"task_id": tid, "repeat": r, "response": resp, "failure_reason": reason, "score": scores[r]}

        calibration = None
        if cfg.calibration is not None:
            calibration = {
                "implementation": cfg.calibration.implementation,
                "repeats": cfg.calibration.repeats,
                "sources": self.identity["calibrator_sources"],
                "provenance": store.calibration_provenance(),
            }
        manifest = {
            "calibrated": cfg.calibration is not None,
            "config": self.identity["config"],
            "purpose": cfg.purpose,
            "seed": cfg.seed,
            "target_count": cfg.target_count,
            "recipe": {"factory": cfg.recipe, "sources": self.identity["recipe_sources"]},
            "generation": {"sharded": self.sharded},
            "selection": {"mode": "ranked" if self.ranked else "plain"},
            "calibration": calibration,
            "backend": {
                "sources": self.identity["executor_sources"],
                "execution": cfg.execution.model_dump(mode="json"),
                "python": sys.version.split()[0],
            },
            "inputs": self.identity["inputs"],
            "exclude": self.identity["exclude"],
            "job_identity": identity_digest(self.identity),
        }
        self._progress("publish")
        snap = write_snapshot(
            self.out / DATASET_DIR,
            public_rows=(public_row(r) for r in records()),
            reference_rows=({"task_id": r["task_id"], "reference": r["reference"]} for r in records()),
            train_lines=(line for _, line in store.train_rows()),
            probe_rows=probes(),
            report=self._report(final_batch),
            manifest=manifest,
        )
        self._progress("done", dataset_id=snap.dataset_id)
        log.info("published dataset %s (%d tasks) at %s", snap.dataset_id, len(ids), snap.path)
        return snap


# ------------------------------------------------------------------------------------- public


def run_data_job(
    config: DataJobConfig | Mapping,
    output_dir: Path | str,
    *,
    resume: bool = False,
    cancel_event: Optional[threading.Event] = None,
) -> Snapshot:
    """Run (or ``resume``) a data job into ``output_dir`` and return its verified snapshot.

    The job runs in a dedicated coordinator thread with its own event loop. Setting
    ``cancel_event`` (or a KeyboardInterrupt in the calling thread) cancels it: the job stops at
    the next block, waits for its workers, closes the checkpoint store and records ``cancelled``;
    then ``JobCancelled`` (or the ``KeyboardInterrupt``) is raised.
    """
    job = _Job(config, Path(output_dir), resume, cancel_event or threading.Event())
    box: dict[str, Any] = {}
    done = threading.Event()

    def target() -> None:
        try:
            box["result"] = job.run()
        except BaseException as exc:  # handed to the caller
            box["error"] = exc
        finally:
            done.set()

    thread = threading.Thread(target=target, name="recipe-job-coordinator")
    thread.start()
    interrupted = False
    # wait on an Event, not Thread.join: an interrupted join can leave the thread's state wrong
    while not done.is_set():
        try:
            done.wait(0.2)
        except KeyboardInterrupt:
            interrupted = True
            job.cancel.set()
    thread.join()
    if "error" in box:
        err = box["error"]
        if interrupted and isinstance(err, JobCancelled):
            raise KeyboardInterrupt() from err
        raise err
    return box["result"]


async def run_data_job_async(
    config: DataJobConfig | Mapping, output_dir: Path | str, *, resume: bool = False
) -> Snapshot:
    """``run_data_job`` for callers inside an event loop; cancelling the awaiting task cancels the job
    (after its cleanup has finished) and re-raises ``CancelledError``."""
    loop = asyncio.get_running_loop()
    job = _Job(config, Path(output_dir), resume, threading.Event())
    fut: asyncio.Future = loop.create_future()

    def settle(result: Any, error: Optional[BaseException]) -> None:
        if fut.done():
            return
        if error is not None:
            fut.set_exception(error)
        else:
            fut.set_result(result)

    def target() -> None:
        try:
            r = job.run()
        except BaseException as exc:
            loop.call_soon_threadsafe(settle, None, exc)
        else:
            loop.call_soon_threadsafe(settle, r, None)

    threading.Thread(target=target, name="recipe-job-coordinator", daemon=True).start()
    try:
        return await asyncio.shield(fut)
    except asyncio.CancelledError:
        job.cancel.set()
        while not fut.done():
            try:
                await asyncio.shield(fut)
            except asyncio.CancelledError:
                continue
            except BaseException:
                break
        if fut.done() and not fut.cancelled():
            fut.exception()  # retrieved: the job's JobCancelled is expected here
        raise
