#!/usr/bin/env python3
"""Which builds a deletion reaches, at the size of a large build: ``TombstonedIds.hits`` over one
build's ``lineage/records.parquet`` of ``--records`` record ids (the call ``builds_reached`` makes
per published or superseded build, for every deletion request).

Baseline: what ``builds_reached`` did before 2026-12-08 — the whole ``record_id`` column as a
Python set, then ``TombstoneSet.is_tombstoned`` asked for every id. Same file, same tombstones
(100 record ids, half of them in the build, and one withdrawn source that is not), same answer
(checked). Each side runs in its own process, so its peak RSS (``ru_maxrss``) is its own; printed:
wall time, peak RSS, and the ratios.

Run:  .venv/bin/python bench/bench_deletion_reach.py [--records 5000000] [--rounds 2]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PROJECT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT))


def write_lineage(path: Path, records: int) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    with pq.ParquetWriter(path, pa.schema([("record_id", pa.string())])) as w:
        step = 1_000_000
        for start in range(0, records, step):
            ids = [f"web.{(start + i) % 97}:{start + i:012d}" for i in range(min(step, records - start))]
            w.write_table(pa.table({"record_id": pa.array(ids, pa.string())}))


def tombstones(records: int):
    from corpus_assets.domain.deletion.tombstones import TombstoneSet

    inside = {f"web.{i % 97}:{i:012d}": "del-1" for i in range(0, records, max(1, records // 50))}
    outside = {f"web.{i}:x{i}": "del-1" for i in range(100 - len(inside))}
    return TombstoneSet(generation=1, record_ids={**inside, **outside}, sources={"books": "del-2"},
                        request_ids=("del-1", "del-2"))


def side(name: str, path: str, records: int) -> None:
    """One measured call in this process; prints a JSON line."""
    import pyarrow.parquet as pq

    from corpus_assets.domain.deletion.builds import TombstonedIds

    tombs = tombstones(records)
    t = time.perf_counter()
    if name == "before":
        ids = set(pq.read_table(path, columns=["record_id"]).column(0).to_pylist())
        hits = {}
        for rid in ids:
            req = tombs.is_tombstoned(record_id=rid)
            if req is not None:
                hits[rid] = req
    else:
        hits = TombstonedIds(tombs).hits([path])
    wall = time.perf_counter() - t
    print(json.dumps({"side": name, "wall": wall, "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                      "hits": sorted(hits.items())}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=5_000_000)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--side", help=argparse.SUPPRESS)
    ap.add_argument("--path", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.side:
        side(args.side, args.path, args.records)
        return
    with tempfile.TemporaryDirectory(prefix="bench_deletion_reach-") as tmp:
        path = Path(tmp) / "records.parquet"
        write_lineage(path, args.records)
        print(f"lineage: {args.records:,} record ids, {path.stat().st_size / 1e6:.1f} MB")
        best: dict[str, dict] = {}
        answers = set()
        for r in range(args.rounds):
            for name in ("before", "now"):
                out = subprocess.run([sys.executable, __file__, "--side", name, "--path", str(path),
                                      "--records", str(args.records)], check=True, capture_output=True, text=True)
                res = json.loads(out.stdout.strip().splitlines()[-1])
                answers.add(json.dumps(res.pop("hits")))
                print(f"  round {r + 1} {name:<6} {res['wall']:.2f} s, peak RSS {res['rss_mb']:.0f} MB")
                if name not in best or res["wall"] < best[name]["wall"]:
                    best[name] = res
        if len(answers) != 1:
            raise SystemExit("the two sides found different builds' records")
        b, n = best["before"], best["now"]
        print(f"now / before: time {n['wall'] / b['wall']:.3f}x ({n['wall']:.2f} s vs {b['wall']:.2f} s), "
              f"peak RSS {n['rss_mb'] / b['rss_mb']:.3f}x ({n['rss_mb']:.0f} MB vs {b['rss_mb']:.0f} MB); "
              f"same {len(json.loads(answers.pop()))} hits")


if __name__ == "__main__":
    main()
