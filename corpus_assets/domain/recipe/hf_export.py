"""Exporting a snapshot's training view to a Hugging Face ``datasets`` directory.

``export_hf_dataset(snapshot, out_dir)`` saves ``train.jsonl``'s rows (read through the verifying
``Snapshot.training_rows()``) with ``datasets``, records the source identity in the dataset info
and in ``corpus_source.json``, refuses an existing non-empty ``out_dir`` and renames an owner-only
temp directory into place. ``datasets`` is imported lazily.

Decisions: docs/recipes.md#hugging-face-export
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

from corpus_assets.domain.recipe.protocol import RecipeError
from corpus_assets.domain.recipe.snapshot import Snapshot, load_snapshot

__all__ = ["SOURCE_FILE", "export_hf_dataset", "source_identity"]

SOURCE_FILE = "corpus_source.json"
EXPORT_FORMAT = "corpus.recipe_hf_export/1"


def source_identity(snapshot: Snapshot, rows: int) -> dict:
    return {
        "format": EXPORT_FORMAT,
        "dataset_id": snapshot.dataset_id,
        "manifest_sha256": snapshot.manifest_digest,
        "train_sha256": snapshot.manifest["files"]["train.jsonl"]["sha256"],
        "recipe": (snapshot.manifest.get("recipe") or {}).get("factory"),
        "calibrated": snapshot.calibrated,
        "rows": rows,
        "source_path": str(snapshot.path),
    }


def export_hf_dataset(snapshot: Snapshot | Path | str, out_dir: Path | str) -> Path:
    """Write the training rows as a ``datasets`` directory at ``out_dir``; return its path."""
    snap = snapshot if isinstance(snapshot, Snapshot) else load_snapshot(snapshot)
    out = Path(out_dir).resolve()
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise RecipeError(f"--export-hf: {out} already exists and is not empty; exports go to a new directory")
    try:
        import datasets  # noqa: PLC0415 - optional dependency, imported on use
    except ImportError:
        raise RecipeError("exporting to Hugging Face needs the 'datasets' package (pip install datasets)") from None

    rows = snap.training_rows()
    identity = source_identity(snap, len(rows))
    ds = datasets.Dataset.from_list(rows)
    ds.info.description = json.dumps({"corpus_source": identity}, sort_keys=True)

    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    try:
        ds.save_to_disk(str(tmp))
        fd = os.open(tmp / SOURCE_FILE, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(identity, f, sort_keys=True, indent=2)
            f.write("\n")
        os.chmod(tmp, 0o700)
        if out.exists():
            out.rmdir()
        os.rename(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out
