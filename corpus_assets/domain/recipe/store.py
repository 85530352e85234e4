"""The SQLite checkpoint store of a data job: ``<output>/work/checkpoints.sqlite3``.

One transaction per committed block, its marker row in ``blocks`` written with its data, so after
a crash a block is entirely there (reused on resume) or not at all. WAL, ``synchronous=FULL``,
used by the coordinator thread only; candidates keep their pool order in ``seq`` and ``task_id`` /
``input_key`` are UNIQUE. The file and its directory are owner-only (they hold references).

Decisions: docs/recipes.md#checkpoint-store
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Optional

from corpus_assets.domain.recipe.protocol import DataSample, RankedCandidate
from corpus_assets.domain.recipe.samples import record_to_sample

__all__ = ["CheckpointStore", "PoolSamples", "PoolScores"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS blocks (
    kind TEXT NOT NULL, batch INTEGER NOT NULL, idx INTEGER NOT NULL, info TEXT,
    PRIMARY KEY (kind, batch, idx));
CREATE TABLE IF NOT EXISTS decisions (
    batch INTEGER NOT NULL, raw_index INTEGER NOT NULL, outcome TEXT NOT NULL,
    task_id TEXT, detail TEXT, PRIMARY KEY (batch, raw_index));
CREATE TABLE IF NOT EXISTS candidates (
    seq INTEGER PRIMARY KEY, task_id TEXT NOT NULL UNIQUE, input_key TEXT NOT NULL UNIQUE,
    content_key TEXT NOT NULL, batch INTEGER NOT NULL, record TEXT NOT NULL, reference TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS candidates_batch ON candidates (batch, seq);
CREATE TABLE IF NOT EXISTS attempts (
    task_id TEXT NOT NULL, repeat INTEGER NOT NULL, response TEXT NOT NULL, failure_reason TEXT,
    batch INTEGER NOT NULL, chunk INTEGER NOT NULL, PRIMARY KEY (task_id, repeat));
CREATE TABLE IF NOT EXISTS calibration_chunks (
    batch INTEGER NOT NULL, chunk INTEGER NOT NULL, provenance TEXT NOT NULL,
    PRIMARY KEY (batch, chunk));
CREATE TABLE IF NOT EXISTS scores (
    task_id TEXT NOT NULL, repeat INTEGER NOT NULL, score REAL, PRIMARY KEY (task_id, repeat));
CREATE TABLE IF NOT EXISTS ranks (
    task_id TEXT PRIMARY KEY, eligible INTEGER NOT NULL, priority REAL, tie_breaker TEXT,
    grp TEXT, bucket TEXT, metadata TEXT);
CREATE INDEX IF NOT EXISTS ranks_order ON ranks (eligible, priority, tie_breaker, task_id);
CREATE TABLE IF NOT EXISTS selections (
    batch INTEGER PRIMARY KEY, outcome TEXT NOT NULL, detail TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS selected (position INTEGER PRIMARY KEY, task_id TEXT NOT NULL UNIQUE);
CREATE TABLE IF NOT EXISTS train_rows (position INTEGER PRIMARY KEY, task_id TEXT NOT NULL, row TEXT NOT NULL);
"""


class CheckpointStore:
    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        new = not self.path.exists()
        self.conn = sqlite3.connect(str(self.path), isolation_level=None)
        if new:
            os.chmod(self.path, 0o600)
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute("PRAGMA synchronous=FULL")
        self.conn.executescript(_SCHEMA)

    def close(self) -> None:
        self.conn.close()

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            yield self.conn
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise
        self.conn.execute("COMMIT")

    # --- meta and blocks -------------------------------------------------------------------

    def get_meta(self, key: str) -> Any:
        row = self.conn.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
        return None if row is None else json.loads(row[0])

    def set_meta(self, key: str, value: Any) -> None:
        with self.transaction() as c:
            c.execute("INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)", (key, json.dumps(value)))

    def has_block(self, kind: str, batch: int, idx: int = 0) -> bool:
        row = self.conn.execute(
            "SELECT 1 FROM blocks WHERE kind=? AND batch=? AND idx=?", (kind, batch, idx)
        ).fetchone()
        return row is not None

    def block_info(self, kind: str, batch: int, idx: int = 0) -> Any:
        row = self.conn.execute(
            "SELECT info FROM blocks WHERE kind=? AND batch=? AND idx=?", (kind, batch, idx)
        ).fetchone()
        return None if row is None or row[0] is None else json.loads(row[0])

    def blocks(self, kind: str, batch: Optional[int] = None) -> list[tuple[int, int, Any]]:
        q = "SELECT batch, idx, info FROM blocks WHERE kind=?"
        args: tuple = (kind,)
        if batch is not None:
            q += " AND batch=?"
            args += (batch,)
        rows = self.conn.execute(q + " ORDER BY batch, idx", args).fetchall()
        return [(b, i, None if info is None else json.loads(info)) for b, i, info in rows]

    @staticmethod
    def mark(c: sqlite3.Connection, kind: str, batch: int, idx: int = 0, info: Any = None) -> None:
        c.execute(
            "INSERT INTO blocks(kind, batch, idx, info) VALUES (?, ?, ?, ?)",
            (kind, batch, idx, None if info is None else json.dumps(info, sort_keys=True)),
        )

    # --- candidates ------------------------------------------------------------------------

    def pool_size(self, max_batch: Optional[int] = None) -> int:
        if max_batch is None:
            return self.conn.execute("SELECT COUNT(*) FROM candidates").fetchone()[0]
        return self.conn.execute("SELECT COUNT(*) FROM candidates WHERE batch<=?", (max_batch,)).fetchone()[0]

    def batch_records(self, batch: int) -> list[dict]:
        rows = self.conn.execute(
            "SELECT record FROM candidates WHERE batch=? ORDER BY seq", (batch,)
        ).fetchall()
        return [json.loads(r[0]) for r in rows]

    def records_by_ids(self, task_ids: Sequence[str]) -> list[dict]:
        out = []
        for tid in task_ids:
            row = self.conn.execute("SELECT record FROM candidates WHERE task_id=?", (tid,)).fetchone()
            if row is None:
                raise KeyError(tid)
            out.append(json.loads(row[0]))
        return out

    def task_seq(self, task_id: str) -> Optional[tuple[int, int]]:
        row = self.conn.execute("SELECT seq, batch FROM candidates WHERE task_id=?", (task_id,)).fetchone()
        return None if row is None else (row[0], row[1])

    def raw_count(self, batch: Optional[int] = None) -> int:
        if batch is None:
            return self.conn.execute("SELECT COUNT(*) FROM decisions").fetchone()[0]
        return self.conn.execute("SELECT COUNT(*) FROM decisions WHERE batch=?", (batch,)).fetchone()[0]

    def decision_counts(self) -> dict[str, int]:
        rows = self.conn.execute("SELECT outcome, COUNT(*) FROM decisions GROUP BY outcome ORDER BY outcome")
        return {o: n for o, n in rows}

    # --- calibration and scores ------------------------------------------------------------

    def attempts_for(self, task_id: str) -> list[tuple[int, Any, Optional[str]]]:
        rows = self.conn.execute(
            "SELECT repeat, response, failure_reason FROM attempts WHERE task_id=? ORDER BY repeat", (task_id,)
        ).fetchall()
        return [(r, json.loads(resp), fr) for r, resp, fr in rows]

    def scores_for(self, task_id: str, repeats: int) -> list[Optional[float]]:
        rows = dict(
            self.conn.execute("SELECT repeat, score FROM scores WHERE task_id=?", (task_id,)).fetchall()
        )
        return [rows.get(r) for r in range(repeats)]

    def calibration_provenance(self) -> list[dict]:
        rows = self.conn.execute(
            "SELECT batch, chunk, provenance FROM calibration_chunks ORDER BY batch, chunk"
        ).fetchall()
        return [{"batch": b, "chunk": c, "provenance": json.loads(p)} for b, c, p in rows]

    def calibration_stats(self) -> dict:
        c = self.conn
        attempts = c.execute("SELECT COUNT(*) FROM attempts").fetchone()[0]
        tasks = c.execute("SELECT COUNT(DISTINCT task_id) FROM attempts").fetchone()[0]
        reasons = dict(
            c.execute(
                "SELECT failure_reason, COUNT(*) FROM attempts WHERE failure_reason IS NOT NULL "
                "GROUP BY failure_reason ORDER BY failure_reason"
            ).fetchall()
        )
        scored, total = c.execute("SELECT COUNT(score), TOTAL(score) FROM scores").fetchone()
        return {
            "tasks": tasks,
            "attempts": attempts,
            "failures": sum(reasons.values()),
            "failure_reasons": reasons,
            "scored_attempts": scored,
            "mean_score": (total / scored) if scored else None,
        }

    # --- ranks and selection ---------------------------------------------------------------

    def ranked_candidates(self, max_batch: int) -> Iterator[RankedCandidate]:
        rows = self.conn.execute(
            "SELECT r.task_id, r.priority, r.tie_breaker, r.grp, r.bucket, r.metadata FROM ranks r "
            "JOIN candidates c ON c.task_id = r.task_id WHERE r.eligible=1 AND c.batch<=? "
            "ORDER BY r.priority, r.tie_breaker, r.task_id",
            (max_batch,),
        )
        for tid, prio, tie, grp, bucket, meta in rows:
            yield RankedCandidate(tid, prio, tie, grp, bucket, json.loads(meta))

    def eligible_count(self, max_batch: int) -> int:
        return self.conn.execute(
            "SELECT COUNT(*) FROM ranks r JOIN candidates c ON c.task_id = r.task_id "
            "WHERE r.eligible=1 AND c.batch<=?",
            (max_batch,),
        ).fetchone()[0]

    def selection(self, batch: int) -> Optional[tuple[str, Any]]:
        row = self.conn.execute("SELECT outcome, detail FROM selections WHERE batch=?", (batch,)).fetchone()
        return None if row is None else (row[0], json.loads(row[1]))

    def selections(self) -> list[tuple[int, str, Any]]:
        rows = self.conn.execute("SELECT batch, outcome, detail FROM selections ORDER BY batch").fetchall()
        return [(b, o, json.loads(d)) for b, o, d in rows]

    def selected_ids(self) -> list[str]:
        return [r[0] for r in self.conn.execute("SELECT task_id FROM selected ORDER BY position")]

    def train_rows(self) -> Iterator[tuple[str, str]]:
        yield from self.conn.execute("SELECT task_id, row FROM train_rows ORDER BY position")

    def train_row_count(self) -> int:
        return self.conn.execute("SELECT COUNT(*) FROM train_rows").fetchone()[0]


class PoolSamples(Sequence):
    """The candidate pool (batches ``<= max_batch``) as a read-only, disk-backed sequence."""

    def __init__(self, store: CheckpointStore, max_batch: int) -> None:
        self._conn = store.conn
        self._n = store.pool_size(max_batch)

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, index):  # type: ignore[override]
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(self._n))]
        if index < 0:
            index += self._n
        if not 0 <= index < self._n:
            raise IndexError("pool index out of range")
        row = self._conn.execute("SELECT record FROM candidates WHERE seq=?", (index + 1,)).fetchone()
        return record_to_sample(json.loads(row[0]))

    def __iter__(self) -> Iterator[DataSample]:
        rows = self._conn.execute("SELECT record FROM candidates WHERE seq<=? ORDER BY seq", (self._n,))
        for (rec,) in rows:
            yield record_to_sample(json.loads(rec))


class PoolScores(Mapping):
    """``task_id -> [score per repeat]`` for the pool; ``None`` marks a failed attempt."""

    def __init__(self, store: CheckpointStore, max_batch: int, repeats: int) -> None:
        self._store = store
        self._n = store.pool_size(max_batch)
        self._repeats = repeats

    def __len__(self) -> int:
        return self._n

    def __iter__(self) -> Iterator[str]:
        for (tid,) in self._store.conn.execute(
            "SELECT task_id FROM candidates WHERE seq<=? ORDER BY seq", (self._n,)
        ).fetchall():
            yield tid

    def __getitem__(self, task_id: str) -> list[Optional[float]]:
        pos = self._store.task_seq(task_id) if isinstance(task_id, str) else None
        if pos is None or pos[0] > self._n:
            raise KeyError(task_id)
        return self._store.scores_for(task_id, self._repeats)
