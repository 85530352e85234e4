"""Collect real, duplicate-heavy license texts for the dedup quality evaluation (issue 4).

Two origins, both already on the machine (nothing is downloaded):

* ``pypi``: the LICENSE/LICENCE/COPYING/NOTICE-style files that the installed wheels ship in
  ``<dist>.dist-info/licenses/**`` (PEP 639) or directly as ``<dist>.dist-info/LICEN[CS]E*`` /
  ``COPYING*`` / ``NOTICE*`` — read from the project venv's ``site-packages``.
* ``debian``: ``/usr/share/doc/<package>/copyright``, the per-package copyright files that
  Debian packages install. Several doc directories are symlinks to another package's directory;
  a file whose real path was already collected is skipped (counted, not duplicated), so every
  duplicate in the corpus is a real second copy shipped by a different package.

Output: one JSONL line per file, ``{"id", "origin", "path", "bytes", "sha256", "text"}``, sorted
by id (deterministic for a given machine state), plus a ``manifest.json`` with the counts.
Bytes are decoded as UTF-8 with ``errors="replace"``.

    .venv/bin/python bench/dedup_quality/collect_licenses.py
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
PROJECT = HERE.parent.parent
DEFAULT_OUT = PROJECT / "bench" / "data" / "dedup_quality"
DEFAULT_SITE = PROJECT / ".venv" / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
DEFAULT_DOC = Path("/usr/share/doc")

_LICENSE_NAME = re.compile(r"^(LICEN[CS]E|COPYING|NOTICE|COPYRIGHT)", re.IGNORECASE)


def _record(origin: str, ident: str, path: Path) -> dict:
    data = path.read_bytes()
    return {
        "id": f"{origin}:{ident}",
        "origin": origin,
        "path": str(path),
        "bytes": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
        "text": data.decode("utf-8", errors="replace"),
    }


def collect_pypi(site: Path) -> list[dict]:
    out = []
    for dist in sorted(site.glob("*.dist-info")):
        files = []
        lic = dist / "licenses"
        if lic.is_dir():
            files += [p for p in sorted(lic.rglob("*")) if p.is_file()]
        files += [p for p in sorted(dist.iterdir()) if p.is_file() and _LICENSE_NAME.match(p.name)]
        for p in files:
            out.append(_record("pypi", f"{dist.name}/{p.relative_to(dist)}", p))
    return out


def collect_debian(doc: Path) -> tuple[list[dict], int]:
    out, seen, skipped = [], set(), 0
    for pkg in sorted(os.listdir(doc)):
        p = doc / pkg / "copyright"
        if not p.is_file():
            continue
        real = os.path.realpath(p)
        if real in seen:
            skipped += 1
            continue
        seen.add(real)
        out.append(_record("debian", pkg, p))
    return out, skipped


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--site-packages", type=Path, default=DEFAULT_SITE)
    ap.add_argument("--doc-root", type=Path, default=DEFAULT_DOC)
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = ap.parse_args(argv)

    pypi = collect_pypi(args.site_packages)
    debian, symlinked = collect_debian(args.doc_root)
    rows = sorted(pypi + debian, key=lambda r: r["id"])
    args.out.mkdir(parents=True, exist_ok=True)
    corpus = args.out / "licenses.jsonl"
    with open(corpus, "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n")
    manifest = {
        "corpus": str(corpus.relative_to(PROJECT)) if corpus.is_relative_to(PROJECT) else str(corpus),
        "records": len(rows),
        "by_origin": {"pypi": len(pypi), "debian": len(debian)},
        "pypi_dists": len({r["id"].split("/")[0] for r in pypi}),
        "debian_skipped_symlinked": symlinked,
        "bytes": sum(r["bytes"] for r in rows),
        "identical_files_sha256": len(rows) - len({r["sha256"] for r in rows}),
        "corpus_sha256": hashlib.sha256(corpus.read_bytes()).hexdigest(),
        "site_packages": str(args.site_packages),
        "doc_root": str(args.doc_root),
    }
    (args.out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    print(json.dumps(manifest, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
