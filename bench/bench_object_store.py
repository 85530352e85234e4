#!/usr/bin/env python3
"""What an object-store data root costs: committing and reading a layer version with
``CORPUS_HOME`` on S3 (moto's server on 127.0.0.1, started here) vs a local data root, and vs the
transport floor (boto3 ``upload_file`` / ``download_file`` of the same Parquet files).

Data (synthetic, made here): one layer version of ``--rows`` rows of ~``--row-bytes`` bytes of
random text (incompressible-ish) plus an int column, written by the project's LayerStore; the
version's Parquet files are what gets moved.

Sides (same process, alternating, best of ``--rounds``):
  commit   local        ``new_version`` + write + ``commit`` into a local data root
           s3           the same with ``remote=ObjectStore(s3://...)`` (upload, seal, pointer)
           floor        boto3 ``upload_file`` of the same files (no seal, no pointer, no checks)
  read     local        ``current()`` + read every table of the version
           s3 (cold)    the same from an empty cache (download, sha256 check, rename, read)
           floor        boto3 ``download_file`` of the same files
Printed: seconds, MB/s, and the ratio of each s3 side to local and to the floor. Loopback S3 has
no network latency: the figures are the protocol's own overhead, a lower bound for a real store.

Run:  .venv/bin/python bench/bench_object_store.py [--rows 200000] [--row-bytes 400] [--rounds 3]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import uuid
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PROJECT))
sys.path.insert(0, str(PROJECT / "bench"))

from _common import moto_server  # noqa: E402


def _table(rows: int, row_bytes: int):
    import numpy as np
    import pyarrow as pa

    rng = np.random.default_rng(3)
    alphabet = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789", dtype=np.uint8)
    raw = alphabet[rng.integers(0, alphabet.size, size=rows * row_bytes)].tobytes()
    offsets = np.arange(0, (rows + 1) * row_bytes, row_bytes, dtype=np.int64)
    text = pa.LargeStringArray.from_buffers(rows, pa.py_buffer(offsets.tobytes()), pa.py_buffer(raw))
    return pa.table({"id": pa.array(np.arange(rows, dtype=np.int64)), "text": text.cast(pa.string())})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--row-bytes", type=int, default=400)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    with moto_server() as endpoint:
        run(args, endpoint)


def run(args, endpoint: str) -> None:
    import boto3

    from corpus_assets.domain.storage.layer_store import LayerStore, TableSpec
    from corpus_assets.domain.storage.object_store import ObjectStore

    client = boto3.client("s3", endpoint_url=endpoint)
    bucket = f"bench-{uuid.uuid4().hex[:8]}"
    client.create_bucket(Bucket=bucket)
    table = _table(args.rows, args.row_bytes)
    spec = {"rows": TableSpec(table.schema)}
    results: dict[str, list[float]] = {}
    size = 0
    with tempfile.TemporaryDirectory(prefix="bench-os-") as tmp:
        tmp = Path(tmp)
        for r in range(args.rounds):
            part = f"r{r}"  # a new partition per round: nothing is reused between rounds
            sides = [("local", None), ("s3", ObjectStore(f"s3://{bucket}/round{r}"))]
            if r % 2:
                sides.reverse()
            for name, remote in sides:
                home = tmp / f"{name}-{r}"
                store = LayerStore(home, remote=remote)
                t0 = time.perf_counter()
                with store.new_version("bench", part, spec, {"round": r}) as w:
                    w.write("rows", table)
                    v = w.commit()
                results.setdefault(f"commit {name}", []).append(time.perf_counter() - t0)
                files = [p for p in (v.root / "rows").glob("*.parquet")]
                size = sum(p.stat().st_size for p in files)
                if name == "s3":
                    t0 = time.perf_counter()
                    for p in files:
                        client.upload_file(str(p), bucket, f"floor{r}/{p.name}")
                    results.setdefault("commit floor", []).append(time.perf_counter() - t0)
                    cold = LayerStore(tmp / f"cold-{r}", remote=remote)
                    t0 = time.perf_counter()
                    got = cold.require_current("bench", part).read_table("rows")
                    results.setdefault("read s3 (cold cache)", []).append(time.perf_counter() - t0)
                    assert got.num_rows == args.rows
                    t0 = time.perf_counter()
                    for p in files:
                        client.download_file(bucket, f"floor{r}/{p.name}", str(tmp / f"floor-{r}-{p.name}"))
                    results.setdefault("read floor", []).append(time.perf_counter() - t0)
                else:
                    t0 = time.perf_counter()
                    got = LayerStore(home).require_current("bench", part).read_table("rows")
                    results.setdefault("read local", []).append(time.perf_counter() - t0)
                    assert got.num_rows == args.rows
    best = {k: min(v) for k, v in results.items()}
    mb = size / 1e6
    print(f"layer version: {args.rows} rows, {table.nbytes / 1e6:.0f} MB in Arrow, {mb:.0f} MB of Parquet; "
          f"S3 = moto on 127.0.0.1; best of {args.rounds} rounds")
    for k in ("commit local", "commit s3", "commit floor", "read local", "read s3 (cold cache)", "read floor"):
        print(f"  {k:<22} {best[k]:7.2f} s  {mb / best[k]:8.1f} MB/s")
    print(f"commit: s3 / local {best['commit s3'] / best['commit local']:.2f}x time; "
          f"upload share over the floor: {(best['commit s3'] - best['commit local']) / best['commit floor']:.2f}x")
    print(f"read:   s3 cold / local {best['read s3 (cold cache)'] / best['read local']:.2f}x time; "
          f"download share over the floor: {(best['read s3 (cold cache)'] - best['read local']) / best['read floor']:.2f}x")


if __name__ == "__main__":
    main()
