"""The published dataset of a data job (``<output>/dataset/``): writing it atomically, verifying it.

Directory 0700, files 0600 (it holds private references): ``public.jsonl``, ``references.jsonl``,
``train.jsonl``, ``probes.jsonl``, ``report.json`` and ``manifest.json``. ``dataset_id`` digests the
content files only, so it does not depend on where or how the job ran. Publication is a rename
of a fsynced temp directory; ``load_snapshot`` and every accessor re-verify the files they read
(``SnapshotError`` names the file).

Layout and decisions: docs/recipes.md#published-dataset
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator, Optional

from corpus_assets.domain.core.hashing import canonical_digest
from corpus_assets.domain.core.atomic_files import fsync_dir
from corpus_assets.domain.recipe.protocol import DataSample, PublicTask, RecipeError
from corpus_assets.domain.recipe.samples import dumps

__all__ = [
    "CONTENT_FILES",
    "FORMAT",
    "Snapshot",
    "SnapshotError",
    "compute_dataset_id",
    "load_snapshot",
    "write_snapshot",
]

FORMAT = "corpus.recipe_dataset/1"
CONTENT_FILES = ("public.jsonl", "references.jsonl", "train.jsonl", "probes.jsonl", "report.json")
MANIFEST = "manifest.json"


class SnapshotError(RecipeError):
    """A dataset directory that is missing, tampered with or misaligned."""


def compute_dataset_id(file_digests: dict[str, str]) -> str:
    return canonical_digest({"format": FORMAT, "files": {n: file_digests[n] for n in CONTENT_FILES}})


def _open_private(path: Path):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    return os.fdopen(fd, "wb")


class _Writer:
    def __init__(self, path: Path) -> None:
        self.f = _open_private(path)
        self.h = hashlib.sha256()
        self.rows = 0
        self.bytes = 0

    def write_line(self, line: str) -> None:
        data = line.encode("utf-8") + b"\n"
        self.f.write(data)
        self.h.update(data)
        self.rows += 1
        self.bytes += len(data)

    def close(self) -> dict:
        self.f.flush()
        os.fsync(self.f.fileno())
        self.f.close()
        return {"sha256": self.h.hexdigest(), "rows": self.rows, "bytes": self.bytes}


def write_snapshot(
    dest: Path,
    *,
    public_rows: Iterable[dict],
    reference_rows: Iterable[dict],
    train_lines: Iterable[str],
    probe_rows: Iterable[dict],
    report: dict,
    manifest: dict,
) -> "Snapshot":
    """Write the dataset to a temp dir next to ``dest`` and rename it into place (``dest`` must not exist)."""
    dest = Path(dest)
    if dest.exists():
        raise SnapshotError(f"{dest} already exists; a published dataset is never overwritten")
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.tmp-", dir=dest.parent))
    os.chmod(tmp, 0o700)
    files: dict[str, dict] = {}
    for name, lines in (
        ("public.jsonl", (dumps(r) for r in public_rows)),
        ("references.jsonl", (dumps(r) for r in reference_rows)),
        ("train.jsonl", train_lines),
        ("probes.jsonl", (dumps(r) for r in probe_rows)),
    ):
        w = _Writer(tmp / name)
        try:
            for line in lines:
                w.write_line(line)
        finally:
            files[name] = w.close()
    w = _Writer(tmp / "report.json")
    w.write_line(json.dumps(report, sort_keys=True, indent=2, ensure_ascii=False, allow_nan=False))
    files["report.json"] = w.close()
    dataset_id = compute_dataset_id({n: files[n]["sha256"] for n in CONTENT_FILES})
    full = {"format": FORMAT, "dataset_id": dataset_id, "files": files, **manifest}
    w = _Writer(tmp / MANIFEST)
    w.write_line(json.dumps(full, sort_keys=True, indent=2, ensure_ascii=False, allow_nan=False))
    w.close()
    fsync_dir(tmp)
    os.rename(tmp, dest)
    fsync_dir(dest.parent)
    return load_snapshot(dest)


# ---------------------------------------------------------------------------------------- read


def _read_lines(path: Path, expected_sha: str, name: str) -> Iterator[tuple[int, str]]:
    """Yield ``(line_no, text)``; after the last line, check the file digest."""
    h = hashlib.sha256()
    try:
        f = open(path, "rb")
    except OSError as exc:
        raise SnapshotError(f"{name}: cannot read ({exc.strerror})") from None
    with f:
        for n, raw in enumerate(f, start=1):
            h.update(raw)
            yield n, raw.decode("utf-8").rstrip("\n")
    if h.hexdigest() != expected_sha:
        raise SnapshotError(f"{name}: content digest does not match the manifest (file was modified)")


def _rows(path: Path, expected_sha: str, name: str) -> list[Any]:
    lines = list(_read_lines(path, expected_sha, name))  # digest verified before parsing is trusted
    out = []
    for n, text in lines:
        try:
            out.append(json.loads(text))
        except json.JSONDecodeError:
            raise SnapshotError(f"{name} line {n}: not valid JSON") from None
    return out


@dataclass(frozen=True)
class Snapshot:
    """A verified dataset directory; accessors re-verify the file they read."""

    path: Path
    manifest: dict
    manifest_digest: str

    @property
    def dataset_id(self) -> str:
        return self.manifest["dataset_id"]

    @property
    def calibrated(self) -> bool:
        return bool(self.manifest.get("calibrated"))

    def _file_rows(self, name: str) -> list[Any]:
        return _rows(self.path / name, self.manifest["files"][name]["sha256"], name)

    def task_ids(self) -> list[str]:
        return [r["task_id"] for r in self._file_rows("public.jsonl")]

    def public_tasks(self) -> list[PublicTask]:
        return [PublicTask(r["task_id"], r["input"], r["metadata"]) for r in self._file_rows("public.jsonl")]

    def references(self) -> dict[str, Any]:
        """``task_id -> reference`` in dataset order (private)."""
        return {r["task_id"]: r["reference"] for r in self._file_rows("references.jsonl")}

    def samples(self) -> list[DataSample]:
        refs = self.references()
        return [DataSample(t, refs[t.task_id]) for t in self.public_tasks()]

    def training_rows(self) -> list[dict]:
        return self._file_rows("train.jsonl")

    def probes(self) -> list[dict]:
        return self._file_rows("probes.jsonl")

    def report(self) -> dict:
        rows = list(_read_lines(self.path / "report.json", self.manifest["files"]["report.json"]["sha256"], "report.json"))
        return json.loads("\n".join(t for _, t in rows))


def _check_ids(name: str, rows: list[Any], keys: set[str]) -> list[str]:
    ids = []
    for n, row in enumerate(rows, start=1):
        if not isinstance(row, dict) or not isinstance(row.get("task_id"), str):
            raise SnapshotError(f"{name} line {n}: expected an object with a string task_id")
        if keys and set(row) != keys:
            raise SnapshotError(f"{name} line {n}: fields must be exactly {sorted(keys)}, got {sorted(row)}")
        ids.append(row["task_id"])
    return ids


def load_snapshot(path: Path | str) -> Snapshot:
    """Open and verify a dataset directory (digests, dataset_id, row counts and alignment)."""
    path = Path(path)
    mpath = path / MANIFEST
    try:
        mbytes = mpath.read_bytes()
    except OSError as exc:
        raise SnapshotError(f"{path}: no readable {MANIFEST} ({exc.strerror})") from None
    try:
        manifest = json.loads(mbytes)
    except json.JSONDecodeError:
        raise SnapshotError(f"{MANIFEST}: not valid JSON") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise SnapshotError(f"{MANIFEST}: format must be {FORMAT!r}")
    files = manifest.get("files")
    if not isinstance(files, dict) or any(
        not isinstance(files.get(n), dict) or not isinstance(files[n].get("sha256"), str) for n in CONTENT_FILES
    ):
        raise SnapshotError(f"{MANIFEST}: files must list {', '.join(CONTENT_FILES)} with sha256 digests")
    present = sorted(p.name for p in path.iterdir())
    extra = [n for n in present if n not in CONTENT_FILES and n != MANIFEST]
    if extra:
        raise SnapshotError(f"{path}: unexpected file(s) {', '.join(extra)}")

    rows: dict[str, list[Any]] = {}
    for name in CONTENT_FILES[:4]:
        rows[name] = _rows(path / name, files[name]["sha256"], name)
        if len(rows[name]) != files[name].get("rows"):
            raise SnapshotError(f"{name}: {len(rows[name])} rows, manifest says {files[name].get('rows')}")
    list(_read_lines(path / "report.json", files["report.json"]["sha256"], "report.json"))

    dataset_id = compute_dataset_id({n: files[n]["sha256"] for n in CONTENT_FILES})
    if manifest.get("dataset_id") != dataset_id:
        raise SnapshotError(f"{MANIFEST}: dataset_id does not match the content digests")

    public_ids = _check_ids("public.jsonl", rows["public.jsonl"], {"task_id", "input", "metadata"})
    if len(set(public_ids)) != len(public_ids):
        raise SnapshotError("public.jsonl: duplicate task_id")
    ref_ids = _check_ids("references.jsonl", rows["references.jsonl"], {"task_id", "reference"})
    train_ids = _check_ids("train.jsonl", rows["train.jsonl"], set())
    for name, ids in (("references.jsonl", ref_ids), ("train.jsonl", train_ids)):
        if ids != public_ids:
            at = next((i for i, (a, b) in enumerate(zip(ids, public_ids)) if a != b), min(len(ids), len(public_ids)))
            raise SnapshotError(f"{name}: rows are not aligned with public.jsonl (first difference at row {at + 1})")
    _check_probes(rows["probes.jsonl"], public_ids, manifest)
    return Snapshot(path=path, manifest=manifest, manifest_digest=hashlib.sha256(mbytes).hexdigest())


def _check_probes(probes: list[Any], public_ids: list[str], manifest: dict) -> None:
    position = {t: i for i, t in enumerate(public_ids)}
    keys = {"task_id", "repeat", "response", "failure_reason", "score"}
    ids = _check_ids("probes.jsonl", probes, keys)
    seen: set[tuple[str, int]] = set()
    last: Optional[tuple[int, int]] = None
    for n, (tid, row) in enumerate(zip(ids, probes), start=1):
        if tid not in position:
            raise SnapshotError(f"probes.jsonl line {n}: task {tid!r} is not in public.jsonl")
        key = (position[tid], row["repeat"])
        if (tid, row["repeat"]) in seen or (last is not None and key <= last):
            raise SnapshotError(f"probes.jsonl line {n}: rows are not aligned with public.jsonl")
        seen.add((tid, row["repeat"]))
        last = key
    calibration = manifest.get("calibration") or {}
    repeats = calibration.get("repeats") if manifest.get("calibrated") else 0
    if len(probes) != len(public_ids) * (repeats or 0):
        raise SnapshotError(
            f"probes.jsonl: {len(probes)} rows, expected {len(public_ids)} tasks x {repeats or 0} repeats"
        )
