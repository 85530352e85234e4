"""The ``recipe`` source kind: a recipe data job whose selected tasks become a snapshot.

Capturing runs (or resumes) the data job into ``<output_root>/<snapshot>/``, verifies the
published dataset and turns every selected task into one raw item (a JSONL line read by the
``task`` adapter, which keeps the reference out of the record). Item ids are the stable task
ids and URIs ``recipe://<source>/<task_id>``, so deletion requests work as for any source.

How and why: docs/ingest.md#recipe-sources
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

from corpus_assets.domain.ingest.raw_items import RawItem, utc_timestamp
from corpus_assets.domain.ingest.file_readers import JSONL_LINE_TYPE


def render_input(public_input: Any) -> str:
    """The task text a model sees: ``problem`` (+ blank line + ``instructions``) for dict inputs with
    those keys, the string itself, or canonical JSON for anything else."""
    if isinstance(public_input, str):
        return public_input
    if isinstance(public_input, dict) and isinstance(public_input.get("problem"), str):
        text = public_input["problem"]
        if isinstance(public_input.get("instructions"), str) and public_input["instructions"]:
            text += "\n\n" + public_input["instructions"]
        return text
    return json.dumps(public_input, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def run_recipe_capture(source, snapshot: str, *, home: Path, clock=None,
                       log: Optional[Callable[[str], None]] = None) -> tuple[Iterator[RawItem], Callable[[], tuple]]:
    from corpus_assets.domain.recipe.config import load_config
    from corpus_assets.domain.recipe.executor import run_data_job

    config_path = Path(source.config)
    if not config_path.is_file():
        raise FileNotFoundError(f"source {source.id!r}: recipe config {str(config_path)!r} does not exist")
    config = load_config(config_path)
    root = Path(source.output_root) if source.output_root else Path(home) / "recipes" / source.id
    root.mkdir(parents=True, exist_ok=True)
    out = root / snapshot
    resume = out.exists() and any(out.iterdir())
    if log:
        log(f"{source.id}: {'resuming' if resume else 'running'} recipe data job {config.recipe} -> {out}")
    data = run_data_job(config, out, resume=resume)
    stats = {"dataset_id": data.dataset_id, "dataset_path": str(data.path), "calibrated": bool(data.calibrated),
             "recipe": config.recipe}

    def items() -> Iterator[RawItem]:
        refs = data.references()
        for task in data.public_tasks():
            row = {
                "task_id": task.task_id,
                "input": render_input(task.input),
                "reference": refs[task.task_id],
                "metadata": {**dict(task.metadata), "recipe_dataset_id": data.dataset_id},
            }
            content = json.dumps(row, sort_keys=True, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
            yield RawItem(item_id=task.task_id, uri=f"recipe://{source.id}/{task.task_id}",
                          retrieved_at=utc_timestamp(clock), content=content, content_type=JSONL_LINE_TYPE,
                          extra={"recipe_dataset_id": data.dataset_id})
        if log:
            log(f"{source.id}: recipe dataset {data.dataset_id[:16]} ({len(refs)} tasks, calibrated={data.calibrated})")

    return items(), lambda: (True, stats, [])
