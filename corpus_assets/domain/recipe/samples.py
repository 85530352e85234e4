"""Converting samples, tasks and attempts to and from their JSON records, with validation.

Decisions
---------
* The stored form of a cleaned candidate is a record ``{"task_id", "input", "metadata",
  "reference"}``; its canonical JSON (``hashing.canonical_json``: sorted keys, UTF-8, no NaN) is
  what is compared, digested and written. Public rows never contain ``reference``.
* ``task_id`` must be a non-empty string; ``metadata`` a dict; ``input``, ``metadata`` and
  ``reference`` JSON-serializable. Errors name the task id and the field — never the value, so a
  reference cannot leak into an error message or a log.
* ``input_key`` (the exact-dedup key) is the digest of the canonical JSON of the public input;
  ``content_key`` (same task_id ⇒ same cleaned content) digests the whole record.
"""

from __future__ import annotations

import json
from typing import Any

from corpus_assets.domain.core.hashing import canonical_json, sha256_bytes
from corpus_assets.domain.recipe.protocol import DataSample, PublicTask, RecipeError

__all__ = [
    "dumps",
    "content_key",
    "input_key",
    "public_row",
    "record_to_sample",
    "record_to_task",
    "sample_to_record",
]


def dumps(obj: Any) -> str:
    return canonical_json(obj).decode("utf-8")


def _json_ok(value: Any, what: str) -> None:
    try:
        canonical_json(value)
    except (TypeError, ValueError) as exc:
        raise RecipeError(f"{what} is not JSON-serializable ({type(exc).__name__})") from None


def sample_to_record(sample: Any, where: str) -> dict:
    """Validate a ``DataSample`` and return its record; ``where`` names the producer for errors."""
    if not isinstance(sample, DataSample):
        raise RecipeError(f"{where} returned {type(sample).__name__}, expected DataSample")
    task = sample.task
    if not isinstance(task, PublicTask):
        raise RecipeError(f"{where}: sample.task is {type(task).__name__}, expected PublicTask")
    tid = task.task_id
    if not isinstance(tid, str) or not tid:
        raise RecipeError(f"{where}: task_id must be a non-empty string, got {type(tid).__name__}")
    if not isinstance(task.metadata, dict):
        raise RecipeError(f"{where}: task {tid!r}: metadata must be a dict")
    _json_ok(task.input, f"{where}: task {tid!r}: input")
    _json_ok(task.metadata, f"{where}: task {tid!r}: metadata")
    _json_ok(sample.reference, f"{where}: task {tid!r}: reference")
    # round-trip through JSON so every stored record is plain data (tuples become lists, ...)
    return json.loads(
        dumps({"task_id": tid, "input": task.input, "metadata": task.metadata, "reference": sample.reference})
    )


def record_to_task(record: dict) -> PublicTask:
    return PublicTask(task_id=record["task_id"], input=record["input"], metadata=dict(record.get("metadata") or {}))


def record_to_sample(record: dict) -> DataSample:
    return DataSample(task=record_to_task(record), reference=record["reference"])


def public_row(record: dict) -> dict:
    return {"task_id": record["task_id"], "input": record["input"], "metadata": record.get("metadata") or {}}


def input_key(record: dict) -> str:
    return sha256_bytes(canonical_json(record["input"]))


def content_key(record: dict) -> str:
    return sha256_bytes(canonical_json(record))
