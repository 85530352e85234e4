"""Exporting a snapshot's training view to a Hugging Face ``datasets`` directory.

``export_hf_dataset(snapshot, out_dir)`` writes ``train.jsonl``'s rows with
``datasets.Dataset.from_list(rows).save_to_disk(...)``, so ``datasets.load_from_disk(out_dir)``
reads it back.

Decisions
---------
* **Source identity is recorded twice**: in the dataset info ``description`` (a JSON object, so it
  travels with the ``datasets`` metadata in ``dataset_info.json``) and in ``corpus_source.json``
  next to the data files: ``dataset_id``, the sha256 of the source ``manifest.json``, the digest of
  ``train.jsonl``, the recipe factory and the row count.
* **New directory only.** An existing non-empty ``out_dir`` is refused; the export is written to a
  temp directory beside it and renamed into place, owner-only (training rows may hold answers).
* The rows are read through ``Snapshot.training_rows()``, which verifies the file digest first.
* ``datasets`` is imported lazily, so the rest of the package does not need it.
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
