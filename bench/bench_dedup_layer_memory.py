#!/usr/bin/env python3
"""Peak memory of build_dedup (the dedup_clusters layer) before and after its columnar, streaming inputs.

build_dedup used to load every record of the release into Python dicts (text, signature bytes,
governance JSON, normal form, order-key tuple) before LSH ran; it now keeps Arrow/numpy columns of
the light fields, writes the exact representatives' signatures to a memory-mapped file and reads
texts only for shared dedup keys and LSH candidates (domain/dedup/release_inputs.py).

Data (synthetic, made here): ``--records`` curated records spread over 4 sources (one snapshot
each), texts of 150-400 words drawn from a 5,000-word vocabulary; 10% exact copies (case and
whitespace changed) and 10% near copies (3 words changed) of earlier records, some across sources.
The snapshot layers (canonical decisions, curated_records, minhash_signatures) are written through
the project's LayerStore (tests/dedup_layers_fixture.py).

Sides, each in a fresh process with the system allocator (SIDE_ENV) on the same layers:
  baseline   build_dedup as of commit 9f61c01 (tests/dedup_baseline_9f61c01.py)
  ours       build_dedup now (engine in process, dedup.shards 1)
Memory = peak anonymous resident memory (RssAnon, sampled every 5 ms) above what the process
holds after its imports; both sides must commit the same dedup_clusters tables (checked: every
table's files but ``pair_verdicts``, which the baseline predates).

Run:  nice -n 5 .venv/bin/python bench/bench_dedup_layer_memory.py [--records 200000]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PROJECT))
sys.path.insert(0, str(PROJECT / "tests"))

from bench_packed_shards_memory import AnonPeak, run_side as run_side_process  # noqa: E402

SOURCES = ("alpha", "beta", "gamma", "delta")
T0 = datetime(2026, 12, 1, tzinfo=timezone.utc)


def _snapshots() -> list[str]:
    from corpus_assets.domain.core.keys import snapshot_key

    return [snapshot_key(s, T0 + timedelta(minutes=i)) for i, s in enumerate(SOURCES)]


def _minhash():
    from corpus_assets.domain.dedup.signatures_layer import load_dedup_file

    return load_dedup_file(PROJECT / "dedup.yaml").minhash


def make_release(home: Path, records: int, seed: int = 7) -> None:
    import numpy as np

    from dedup_layers_fixture import record_row, write_snapshot
    from corpus_assets.domain.storage.layer_store import LayerStore

    rng = np.random.default_rng(seed)
    vocab = np.array([f"w{i:04d}{'abcdefghij'[i % 10] * (1 + i % 5)}" for i in range(5000)])
    store = LayerStore(home)
    per = -(-records // len(SOURCES))
    originals: list[str] = []  # a sample of earlier texts to copy from (bounded)

    def texts(n: int):
        for _ in range(n):
            u = rng.random()
            if originals and u < 0.1:
                t = originals[rng.integers(len(originals))]
                yield "  " + t.upper() if rng.random() < 0.5 else t.replace(" ", "\n", 3)
            elif originals and u < 0.2:
                words = originals[rng.integers(len(originals))].split(" ")
                for k in rng.integers(0, len(words), 3):
                    words[k] = str(vocab[rng.integers(len(vocab))])
                yield " ".join(words)
            else:
                t = " ".join(vocab[rng.integers(0, len(vocab), rng.integers(150, 401))].tolist())
                if len(originals) < 2000:
                    originals.append(t)
                elif rng.random() < 0.01:
                    originals[rng.integers(len(originals))] = t
                yield t

    for s, snap in zip(SOURCES, _snapshots()):
        def batches():
            done = 0
            while done < per:
                n = min(4096, per - done)
                yield [record_row(f"{s}:doc/{done + i:07d}.txt", s, snap, t) for i, t in enumerate(texts(n))]
                done += n
        write_snapshot(store, snap, batches(), _minhash())


def side(home: str, which: str) -> None:
    """Run one side in this (fresh) process and print a JSON line."""
    from corpus_assets.domain.storage.layer_store import LayerStore

    if which == "baseline":
        import dedup_baseline_9f61c01 as mod
    else:
        from corpus_assets.domain.dedup import clusters_layer as mod
    import importlib

    for lib in ("polars", "pyarrow.parquet", "pyarrow.compute"):  # start-up for both sides, not work
        importlib.import_module(lib)

    store = LayerStore(home)
    minhash = _minhash()
    policy = mod.ReleaseDedupPolicy()
    anon_base = AnonPeak.now()
    sampler = AnonPeak()
    t0 = time.perf_counter()
    s = mod.build_dedup(store, "bench", _snapshots(), policy, minhash, {"alpha": 1, "beta": 2})
    seconds = time.perf_counter() - t0
    # every table but pair_verdicts, which the baseline predates (tests/unit/test_dedup_streaming.py
    # compares the same way)
    tables = {k: [f["sha256"] for f in t["files"]] for k, t in sorted(s.version.manifest["tables"].items())
              if k != "pair_verdicts"}
    print(json.dumps({"side": which, "seconds": seconds, "anon_base_mb": anon_base, "anon_peak_mb": sampler.stop(),
                      "version": hashlib.sha256(json.dumps(tables).encode()).hexdigest()[:16], "records": s.records, "exact": s.exact["duplicates_removed"],
                      "near": s.near_removed, "candidates": s.candidates}))


def run_side(home: Path, which: str) -> dict:
    return run_side_process(home, which, script=__file__)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--side", choices=["baseline", "ours"])
    ap.add_argument("--home")
    args = ap.parse_args()
    if args.side:
        side(args.home, args.side)
        return
    with tempfile.TemporaryDirectory(prefix="bench-dedup-layer-") as tmp:
        home = Path(tmp)
        t0 = time.perf_counter()
        make_release(home, args.records)
        text_mb = sum(f.stat().st_size for f in (home / "layers" / "curated_records").rglob("*.parquet")) / 1e6
        print(f"release: {args.records} records in {len(SOURCES)} snapshots ({text_mb:.0f} MB of curated Parquet), "
              f"layers made in {time.perf_counter() - t0:.1f} s")
        base = run_side(home, "baseline")
        ours = run_side(home, "ours")
        if base["version"] != ours["version"]:
            raise SystemExit(f"the sides built different dedup_clusters tables (pair_verdicts aside): {base['version']} vs {ours['version']}")
        b = base["anon_peak_mb"] - base["anon_base_mb"]
        o = ours["anon_peak_mb"] - ours["anon_base_mb"]
        print(f"clusters: {ours['records']} records, {ours['exact']} exact and {ours['near']} near duplicates removed, "
              f"{ours['candidates']} candidate pairs; both sides committed version {ours['version']}")
        print(f"baseline (9f61c01, Python dicts): anonymous memory +{b:.0f} MB over start-up, {base['seconds']:.1f} s")
        print(f"ours (columnar, streaming):       anonymous memory +{o:.0f} MB over start-up, {ours['seconds']:.1f} s")
        print(f"ratio ours / baseline: memory {o / b:.3f}, time {ours['seconds'] / base['seconds']:.3f}")


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
