#!/usr/bin/env python3
"""Streaming reader throughput and memory (shards + ``ShardStreamReader``) vs sequential memmap reads.

Data: ``--blocks`` synthetic blocks (default 30,000) of ``T = --seq-len`` (2048) random token ids
(vocab 50,257 -> uint16), loss mask, segment ids and spans, written with ``write_shards`` into
shards of ``--blocks-per-shard`` blocks (default 1,000 -> 30 shards) under a temporary directory
(~430 MB at the defaults; removed at the end unless ``--keep``). Every file is read once before
timing, so both sides read from the page cache.

Sides (one epoch each, batch size ``--batch-size``; each side in its own fresh process, pinned to
one core; ``--rounds`` alternating rounds, best round per side):
  baseline        sequential ``np.memmap`` reads of the same blocks, shard by shard in manifest
                  order, no shuffle: one contiguous slice copy per array per batch (tokens,
                  loss_mask, segment_ids) — the cost floor of getting the bytes into batches.
  reader          ``ShardStreamReader(buffer_size=--buffer, seed=0, verify=False)``: shard
                  shuffle + buffer shuffle + per-block copies + resumable state.
  reader+verify   the same with ``verify=True`` (sha256 of every shard file before first use),
                  reported separately because hashing is a one-off cost per shard per process.
The ratio printed is reader / baseline throughput.

Memory (separate untimed pass per side, same process kind): tracemalloc peak of Python/numpy
allocations during the epoch, peak RssAnon (anonymous memory, sampled every 64 batches) growth
over the value before the epoch, and ru_maxrss growth. The memory maps' resident file pages show
up in RssFile/ru_maxrss for both sides alike (clean page cache the kernel can drop), not in
RssAnon. Also printed: the size of the buffer's references and of a JSON ``state_dict()``
versus what a buffer of token copies would hold.

Run:  .venv/bin/python bench/bench_reader.py [--blocks 30000] [--buffer 10000] [--batch-size 8]
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _common import cpu_model, pin_to_one_core  # noqa: E402

VOCAB = 50_257


def rss_kb(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


# --- data ---------------------------------------------------------------------------------------


def make_shards(out: Path, n_blocks: int, seq_len: int, per_shard: int) -> dict:
    import numpy as np
    import pyarrow as pa

    from corpus_assets.domain.pack.shards import write_shard_manifest, write_shards

    rng = np.random.default_rng(0)
    metas = []
    chunk = per_shard * 5  # write in chunks so the generator never holds the whole set
    for lo in range(0, n_blocks, chunk):
        n = min(chunk, n_blocks - lo)
        tokens = rng.integers(0, VOCAB, (n, seq_len), dtype=np.uint16)
        seg = np.repeat(np.arange(1, 9, dtype=np.int32), seq_len // 8)[None, :].repeat(n, 0)
        loss = np.ones((n, seq_len), dtype=np.uint8)
        b = np.repeat(np.arange(n, dtype=np.int64), 8)
        st = np.tile(np.arange(0, seq_len, seq_len // 8), n)
        spans = pa.table({"block": b, "start": st, "end": st + seq_len // 8,
                          "source": pa.array(np.where(b % 3 == 0, "code", "web"))})
        metas += write_shards(out, "bench", tokens=tokens, loss_mask=loss, segment_ids=seg, spans=spans,
                              seq_len=seq_len, shard_positions=per_shard * seq_len, tokenizer_digest="bench",
                              vocab_size=VOCAB, first_shard_index=len(metas))
    write_shard_manifest(out, metas)
    return {"shards": len(metas), "bytes": sum(f["bytes"] for m in metas for f in m["files"].values())}


def warm_page_cache(out: Path) -> None:
    for p in sorted(out.iterdir()):
        with open(p, "rb") as f:
            while f.read(1 << 24):
                pass


# --- sides (run in a child process) -------------------------------------------------------------


def side_baseline(out: Path, args, on_batch) -> tuple[int, int]:
    import numpy as np

    from corpus_assets.domain.pack.shards import load_shard_manifest

    batches = tokens = 0
    for m in load_shard_manifest(out)["shards"]:
        shape = (m["blocks"], m["seq_len"])
        tok = np.memmap(out / m["files"]["bin"]["path"], dtype=m["dtype"], mode="r", shape=shape)
        lm = np.memmap(out / m["files"]["loss_mask"]["path"], dtype=np.uint8, mode="r", shape=shape)
        seg = np.memmap(out / m["files"]["segment_ids"]["path"], dtype=m["sidecar_dtypes"]["segment_ids"], mode="r",
                        shape=shape)
        for i in range(0, m["blocks"], args.batch_size):
            b = (np.array(tok[i : i + args.batch_size]), np.array(lm[i : i + args.batch_size]),
                 np.array(seg[i : i + args.batch_size]))
            batches += 1
            tokens += b[0].size
            on_batch(batches, None)
        del tok, lm, seg
    return batches, tokens


def side_reader(out: Path, args, on_batch, verify: bool) -> tuple[int, int]:
    from corpus_assets.domain.pack.shard_reader import ShardStreamReader, shards_from_manifest

    r = ShardStreamReader(shards_from_manifest(out), batch_size=args.batch_size, buffer_size=args.buffer,
                          seed=0, epochs=1, verify=verify)
    batches = tokens = 0
    for b in r:
        batches += 1
        tokens += b.tokens.size
        on_batch(batches, r)
    r.close()
    return batches, tokens


def run_child(args) -> None:
    pin_to_one_core(args.core)
    out = Path(args.dir)
    side = args.child
    fn = side_baseline if side == "baseline" else (lambda o, a, cb: side_reader(o, a, cb, verify=side == "reader+verify"))
    import corpus_assets.domain.pack.shard_reader  # noqa: F401  (imports outside the measurement)
    import numpy  # noqa: F401

    result: dict = {"side": side}
    peak = {"anon": rss_kb("RssAnon"), "buffer_refs_bytes": 0, "state_json_bytes": 0, "max_buffer": 0}
    anon0, maxrss0 = rss_kb("RssAnon"), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

    def on_batch_mem(i: int, reader) -> None:
        if i % 64 == 0:
            peak["anon"] = max(peak["anon"], rss_kb("RssAnon"))
            if reader is not None and reader.buffer_len() > peak["max_buffer"]:
                peak["max_buffer"] = reader.buffer_len()
                buf = reader._buffer
                peak["buffer_refs_bytes"] = sys.getsizeof(buf) + sum(
                    sys.getsizeof(t) + sys.getsizeof(t[0]) + sys.getsizeof(t[1]) for t in buf
                )
                peak["state_json_bytes"] = len(json.dumps(reader.state_dict()))

    if args.measure == "time":
        t0 = time.perf_counter()
        batches, tokens = fn(out, args, lambda i, r: None)
        result["seconds"] = time.perf_counter() - t0
        result.update(batches=batches, tokens=tokens)
    else:
        tracemalloc.start()
        batches, tokens = fn(out, args, on_batch_mem)
        _, tm_peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        result.update(
            tracemalloc_peak_bytes=tm_peak,
            rss_anon_growth_kb=peak["anon"] - anon0,
            maxrss_growth_kb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - maxrss0,
            rss_file_kb=rss_kb("RssFile"),
            buffer_refs_bytes=peak["buffer_refs_bytes"],
            max_buffer=peak["max_buffer"],
            state_json_bytes=peak["state_json_bytes"],
        )
    print(json.dumps(result))


def child(args, side: str, measure: str) -> dict:
    cmd = [sys.executable, __file__, "--child", side, "--measure", measure, "--dir", args.dir,
           "--batch-size", str(args.batch_size), "--buffer", str(args.buffer), "--core", str(args.core)]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


# --- main ---------------------------------------------------------------------------------------


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--blocks", type=int, default=30_000)
    ap.add_argument("--seq-len", type=int, default=2048)
    ap.add_argument("--blocks-per-shard", type=int, default=1_000)
    ap.add_argument("--buffer", type=int, default=10_000)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--core", type=int, default=0)
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--dir", default=None)
    ap.add_argument("--child", default=None)
    ap.add_argument("--measure", default="time")
    args = ap.parse_args()
    if args.child:
        run_child(args)
        return

    tmp = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="bench_reader_"))
    args.dir = str(tmp)
    try:
        t0 = time.perf_counter()
        info = make_shards(tmp, args.blocks, args.seq_len, args.blocks_per_shard)
        t_write = time.perf_counter() - t0
        warm_page_cache(tmp)
        print(f"cpu: {cpu_model()}; python {sys.version.split()[0]}; one core per side")
        print(f"data: {args.blocks} blocks x T={args.seq_len} (uint16), {info['shards']} shards of "
              f"{args.blocks_per_shard} blocks, {info['bytes'] / 1e6:.0f} MB on disk; written in {t_write:.1f} s "
              f"({info['bytes'] / 1e6 / t_write:.0f} MB/s incl. sha256)")
        print(f"reader: buffer {args.buffer} blocks, batch {args.batch_size}, seed 0, 1 epoch")
        sides = ["baseline", "reader", "reader+verify"]
        rounds = [[child(args, s, "time") for s in sides] for _ in range(args.rounds)]
        best = {s: min((r for rr in rounds for r in rr if r["side"] == s), key=lambda r: r["seconds"]) for s in sides}
        base = best["baseline"]
        print(f"\n{'side':<15}{'seconds':>9}{'batches/s':>12}{'Mtokens/s':>12}{'vs baseline':>13}")
        for s in sides:
            r = best[s]
            bps, tps = r["batches"] / r["seconds"], r["tokens"] / r["seconds"]
            ratio = base["seconds"] / r["seconds"]
            print(f"{s:<15}{r['seconds']:>9.2f}{bps:>12.0f}{tps / 1e6:>12.1f}{ratio:>12.3f}x")
            assert r["tokens"] == base["tokens"], "sides read different amounts"
        mem = {s: child(args, s, "memory") for s in ("baseline", "reader")}
        print(f"\n{'memory (1 epoch)':<18}{'tracemalloc peak':>18}{'RssAnon growth':>16}{'ru_maxrss growth':>18}{'RssFile end':>13}")
        for s, r in mem.items():
            print(f"{s:<18}{r['tracemalloc_peak_bytes'] / 1e6:>15.2f} MB{r['rss_anon_growth_kb'] / 1e3:>13.1f} MB"
                  f"{r['maxrss_growth_kb'] / 1e3:>15.1f} MB{r['rss_file_kb'] / 1e3:>10.0f} MB")
        r = mem["reader"]
        copies = args.buffer * args.seq_len * (2 + 1 + 4)
        print(f"\nreader buffer: {r['max_buffer']} block references = {r['buffer_refs_bytes'] / 1e6:.2f} MB "
              f"(a buffer of token/mask/segment copies would hold {copies / 1e6:.0f} MB); "
              f"state_dict as JSON at full buffer: {r['state_json_bytes'] / 1e3:.0f} kB")
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            print(f"kept {tmp}")


if __name__ == "__main__":
    main()
