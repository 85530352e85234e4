#!/usr/bin/env python3
"""What a release's history costs every run: ``registry.reconcile`` over a releases root that
keeps every build (builds are never deleted; a release rebuilt hourly has 8,760 a year), in its
steady state (every build registered, nothing to change). It runs at the start of every
``release_manifest`` step and of every ``deletion_requests`` sensor tick.

Baseline: the same call with ``audit=True``, which reads every build's sealed manifest — what every
call did before 2026-12-07 (``corpus releases --audit`` still does). Measured: the default call,
which reads only CURRENT's manifest, the ``REVOKED.json`` probe of each build not yet revoked and
the directory listing.

Builds: one real build published with ``publish_release`` (Algorithm 18.3: ``--shards`` shard
files, so its manifest lists that many artifacts with their digests, the bulk of a real
manifest), then copied as sealed build directories (manifest only; the registry never reads
shards) under new build ids with their own content digests, into two releases. Per history size:
one call registers them all (untimed), then ``--repeat`` steady calls of each kind, alternating.

``--bucket``: the same in an object-store data root, moto's S3 server on 127.0.0.1 (started here;
the builds' manifests and CURRENT uploaded with boto3), where every read is a request.

Run:  .venv/bin/python bench/bench_release_history.py [--builds 100,1000,8760] [--shards 250] [--repeat 3] [--bucket]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

PROJECT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT))
sys.path.insert(0, str(PROJECT / "bench"))

from _common import moto_server  # noqa: E402

from corpus_assets.domain.release.publish import publish_release  # noqa: E402
from corpus_assets.domain.release.registry import reconcile  # noqa: E402
from corpus_assets.domain.storage.catalog import Catalog  # noqa: E402


def template_manifest(work: Path, shards: int) -> dict:
    """The manifest of a real publish of ``shards`` small shard files."""

    def stage(tmp: Path) -> None:
        (tmp / "shards" / "train").mkdir(parents=True)
        for i in range(shards):
            (tmp / "shards" / "train" / f"train-{i:05d}.bin").write_bytes(i.to_bytes(4, "little") * 64)

    r = publish_release(work / "template", "tpl", "0" * 64, stage,
                        lambda _t, _a: {"release": "tpl", "created_at": "2026-12-07T00:00:00+00:00"}, signing_key=None)
    return json.loads((r.path / "manifest.json").read_bytes())


def history(template: dict, n: int, put) -> int:
    """``n`` sealed builds over two releases, CURRENT naming each release's last, written with
    ``put(relative key, bytes)``; returns the bytes of manifests written."""
    written = 0
    for r, count in (("hourly", n - n // 2), ("daily", n // 2)):
        bid = None
        for i in range(count):
            bid = hashlib.sha256(f"{r}/{i}".encode()).hexdigest()
            raw = json.dumps(dict(template, release=r, build_id=bid,
                                  content_digest=hashlib.sha256(f"content {r}/{i}".encode()).hexdigest()),
                             indent=2, sort_keys=True).encode()
            put(f"{r}/{bid}/manifest.json", raw)
            written += len(raw)
        if bid is not None:
            put(f"{r}/CURRENT", (bid + "\n").encode())
    return written


def local_put(root: Path):
    def put(key: str, data: bytes) -> None:
        path = root / key
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return put


def bucket_put(client, bucket: str, prefix: str):
    def put(key: str, data: bytes) -> None:
        client.put_object(Bucket=bucket, Key=f"{prefix}/releases/{key}", Body=data)
    return put


def timed(cat: Catalog, root: Path, remote, audit: bool) -> tuple[float, int]:
    t = time.perf_counter()
    res = reconcile(cat, root, remote=remote, audit=audit)
    wall = time.perf_counter() - t
    if res.changes or res.problems:
        raise RuntimeError(f"a steady call changed or found something: {res.lines()[:3]}")
    return wall, res.manifests_read


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--builds", default="100,1000,8760", help="history sizes (builds over two releases), comma-separated")
    ap.add_argument("--shards", type=int, default=250, help="shard files in the published template build")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--bucket", action="store_true", help="an object-store data root (moto's S3 server on 127.0.0.1)")
    args = ap.parse_args()
    if args.bucket:
        with moto_server() as endpoint:
            run(args, endpoint)
    else:
        run(args, None)


def run(args, endpoint) -> None:
    with tempfile.TemporaryDirectory(prefix="bench_release_history-") as tmp:
        work = Path(tmp)
        template = template_manifest(work, args.shards)
        print(f"data root: {'S3 (moto on 127.0.0.1)' if endpoint else 'local'}; template manifest: "
              f"{len(template['artifacts'])} artifacts, {len(json.dumps(template, indent=2).encode()) / 1024:.0f} KiB")
        print(f"{'builds':>7} {'manifests MB':>12} {'audit (before) s':>17} {'default s':>10} {'ratio':>7} "
              f"{'read audit/default':>19}")
        per_build = []
        for n in (int(x) for x in args.builds.split(",")):
            root = work / f"h{n}" / "releases"
            remote = None
            if endpoint is None:
                size = history(template, n, local_put(root))
            else:
                import boto3

                from corpus_assets.domain.storage.object_store import ObjectStore

                client = boto3.client("s3", endpoint_url=endpoint)
                bucket = f"history-{n}"
                client.create_bucket(Bucket=bucket)
                size = history(template, n, bucket_put(client, bucket, "data"))
                remote = ObjectStore(f"s3://{bucket}/data")
            cat = Catalog.at(work / f"h{n}" / "catalog.duckdb")
            first = reconcile(cat, root, remote=remote)
            assert len(first.changes) >= n and not first.problems, first.lines()[:3]
            audit, fast = [], []
            for _ in range(args.repeat):
                audit.append(timed(cat, root, remote, True))
                fast.append(timed(cat, root, remote, False))
            a, f = statistics.median(w for w, _ in audit), statistics.median(w for w, _ in fast)
            per_build.append((n, f))
            print(f"{n:>7,} {size / 1e6:>12.1f} {a:>17.3f} {f:>10.3f} {f / a:>7.3f} {audit[0][1]:>9,} / {fast[0][1]:,}")
            shutil.rmtree(root.parent)
        if len(per_build) > 1:
            (n0, f0), (n1, f1) = per_build[0], per_build[-1]
            print(f"default call: {(f1 - f0) / (n1 - n0) * 1e6:.1f} us per build of history "
                  f"({n0:,} -> {n1:,} builds: {f0:.3f} -> {f1:.3f} s)")


if __name__ == "__main__":
    main()
