#!/usr/bin/env python3
"""Peak memory of the packed_shards layer vs the size of the release's token views.

packed_shards used to read the release's whole ``token_views`` table into memory before packing;
it now spools the views once, batch by batch, into flat memory-mapped files per split
(``domain/pack/view_spool.py``) and gathers each chunk of the mixture plan from the maps. This
benchmark checks the claim that its resident memory no longer grows with the views.

Data (synthetic, made here): a ``token_views`` layer version of ``--records`` records of
``--tokens`` tokens each (random ids below 50,000, alternate loss masks, offsets), all in the
training split, and a ``mixture_plan`` that draws every record once in a shuffled order —
written with the project's LayerStore into a temporary data root.

Sides, each in a fresh process with the system allocator (see SIDE_ENV); memory = peak
anonymous resident memory (``RssAnon``, sampled every 5 ms) above what the interpreter and
imports hold before the work:
  baseline   ``token_views.read_table("views", ...)`` of the packing columns: what packed_shards
             held before it packed a single block
  ours       ``build_packed_shards`` end to end (spool, pack, write shards, commit the layer)
Printed: both peaks and their ratio; run with a larger ``--records`` to see that ours stays flat
while the baseline grows with the views.

Run:  .venv/bin/python bench/bench_packed_shards_memory.py [--records 20000] [--tokens 1000]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PROJECT))

SEQ_LEN = 2048
SHARD_POSITIONS = SEQ_LEN * 256


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class AnonPeak:
    """Peak anonymous resident memory (``RssAnon``: heap, Arrow and numpy buffers), sampled every
    5 ms. ``ru_maxrss`` also counts file pages mapped into the process (the spooled views' memory
    maps), which the kernel can drop at any time; RssAnon is what must fit in RAM."""

    def __init__(self) -> None:
        import threading

        self.peak = self.now()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    @staticmethod
    def now() -> float:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("RssAnon:"):
                    return int(line.split()[1]) / 1024
        return 0.0

    def _run(self) -> None:
        while not self._stop.wait(0.005):
            self.peak = max(self.peak, self.now())

    def stop(self) -> float:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self.now())
        return self.peak


def make_release(home: Path, records: int, tokens: int) -> None:
    import numpy as np
    import pyarrow as pa

    from corpus_assets.domain.storage.layer_store import LayerStore
    from corpus_assets.domain.pack.mixture_layer import MIXTURE_TABLES
    from corpus_assets.domain.layers.registry import MIXTURE_PLAN
    from corpus_assets.domain.layers.registry import TOKEN_VIEWS, VIEWS_SCHEMA
    from corpus_assets.domain.tokens.token_views_layer import TOKEN_VIEWS_TABLES

    store = LayerStore(home)
    rng = np.random.default_rng(7)
    batch = 1000
    with store.new_version(TOKEN_VIEWS, "bench", TOKEN_VIEWS_TABLES, {"bench": True}) as w:
        for lo in range(0, records, batch):
            n = min(batch, records - lo)
            ids = rng.integers(1, 50_000, size=n * tokens, dtype=np.int32)
            mask = np.tile(np.array([0, 1], np.uint8), n * tokens // 2 + 1)[: n * tokens]
            offs = np.repeat(np.arange(n * tokens, dtype=np.int32), 2)
            off_t = pa.array(np.arange(0, (n + 1) * tokens, tokens, dtype=np.int32))
            off_o = pa.array(np.arange(0, (n + 1) * 2 * tokens, 2 * tokens, dtype=np.int32))
            rid = [f"src:{i:08d}" for i in range(lo, lo + n)]
            t = pa.table({
                "record_id": rid, "variant": pa.nulls(n, pa.string()), "split": ["train"] * n,
                "source_id": ["src"] * n, "snapshot": ["src.20260101T000000"] * n, "domain": ["prose"] * n,
                "cache_key": rid, "n_tokens": pa.array([tokens] * n, pa.int32()),
                "label_tokens": pa.array([tokens // 2] * n, pa.int32()),
                "input_ids": pa.ListArray.from_arrays(off_t, pa.array(ids)),
                "loss_mask": pa.ListArray.from_arrays(off_t, pa.array(mask)),
                "offsets": pa.ListArray.from_arrays(off_o, pa.array(offs)),
                "segments_json": ["[]"] * n,
            }).cast(VIEWS_SCHEMA)
            w.write("views", t)
        w.commit()
    order = rng.permutation(records)
    with store.new_version(MIXTURE_PLAN, "bench", MIXTURE_TABLES, {"spec": {"key": "source"}}) as w:
        w.write("plan", pa.table({
            "position": pa.array(np.arange(records, dtype=np.int64)),
            "record_id": [f"src:{i:08d}" for i in order], "source": ["src"] * records,
            "repeat": pa.array(np.zeros(records, np.int64)), "phase": pa.array(np.zeros(records, np.int32)),
            "n_tokens": pa.array(np.full(records, tokens, np.int64)),
        }))
        w.commit()


def side(home: str, which: str) -> None:
    """Run one side in this (fresh) process and print a JSON line."""
    from corpus_assets.domain.storage.layer_store import LayerStore
    from corpus_assets.domain.pack.packing import PackingPolicy
    from corpus_assets.domain.pack.shards_layer import ShardSpec, build_packed_shards

    store = LayerStore(home)
    views = store.require_current("token_views", "bench")
    plan = store.require_current("mixture_plan", "bench")
    base = _rss_mb()
    anon_base = AnonPeak.now()
    sampler = AnonPeak()
    t0 = time.perf_counter()
    if which == "baseline":
        table = views.read_table("views", columns=["record_id", "variant", "split", "source_id", "domain", "n_tokens",
                                                   "input_ids", "loss_mask", "offsets"])
        held = table.nbytes
    else:
        _version, report = build_packed_shards(
            store, "bench", PackingPolicy(seq_len=SEQ_LEN, mode="stream", boundary="mask", tail="pad"),
            ShardSpec(positions=SHARD_POSITIONS), token_views=views, mixture_plan=plan,
            tokenizer_digest="0" * 64, vocab_size=50_000, split_names=["train", "validation", "test"])
        held = report["splits"]["train"]["blocks"]
    seconds = time.perf_counter() - t0
    print(json.dumps({"side": which, "seconds": seconds, "base_mb": base, "peak_mb": _rss_mb(),
                      "anon_base_mb": anon_base, "anon_peak_mb": sampler.stop(), "held": held}))


# Both sides allocate through the C library with a fixed mmap threshold, so memory a side frees
# goes back to the system and the peak is what was live: Arrow's default mimalloc pool and glibc's
# adaptive threshold keep freed buffers resident (measured: +265 MB still resident after the
# spool phase with nothing allocated, vs +37 MB this way), which would measure the allocators.
SIDE_ENV = {"ARROW_DEFAULT_MEMORY_POOL": "system", "MALLOC_MMAP_THRESHOLD_": "131072"}


def run_side(home: Path, which: str, script: str = __file__) -> dict:
    """Run ``script --side which --home home`` in its own process (``SIDE_ENV`` set) and return
    the JSON its last line prints (the memory benchmarks' sides)."""
    out = subprocess.run([sys.executable, script, "--side", which, "--home", str(home)],
                         check=True, capture_output=True, text=True, cwd=PROJECT, env={**os.environ, **SIDE_ENV})
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=20_000)
    ap.add_argument("--tokens", type=int, default=1000)
    ap.add_argument("--side", choices=["baseline", "ours"])
    ap.add_argument("--home")
    args = ap.parse_args()
    if args.side:
        side(args.home, args.side)
        return
    with tempfile.TemporaryDirectory(prefix="bench-packed-") as tmp:
        home = Path(tmp)
        t0 = time.perf_counter()
        make_release(home, args.records, args.tokens)
        total = args.records * args.tokens
        parquet = sum(f.stat().st_size for f in (home / "layers" / "token_views").rglob("*.parquet"))
        print(f"token views: {args.records} records x {args.tokens} tokens = {total / 1e6:.1f} M tokens "
              f"({parquet / 1e6:.0f} MB of Parquet), made in {time.perf_counter() - t0:.1f} s")
        base = run_side(home, "baseline")
        ours = run_side(home, "ours")
        b = base["anon_peak_mb"] - base["anon_base_mb"]
        o = ours["anon_peak_mb"] - ours["anon_base_mb"]
        print(f"baseline (read the views table whole): anonymous memory +{b:.0f} MB over start-up "
              f"(max RSS {base['peak_mb']:.0f} MB); the table holds {base['held'] / 1e6:.0f} MB in Arrow ({base['seconds']:.1f} s)")
        print(f"ours (build_packed_shards end to end): anonymous memory +{o:.0f} MB over start-up "
              f"(max RSS {ours['peak_mb']:.0f} MB, with the mapped spool files); {ours['held']} blocks of {SEQ_LEN} "
              f"written in {ours['seconds']:.1f} s ({total / ours['seconds'] / 1e6:.1f} M tokens/s)")
        print(f"ratio ours / baseline (anonymous memory above start-up): {o / b:.3f}")


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
