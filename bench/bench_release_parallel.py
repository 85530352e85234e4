#!/usr/bin/env python3
"""Parallel token views and packing (issue 18): the same release's ``token_views`` and
``packed_shards`` steps on the release engine with 2 workers vs 1.

Release (real text, made with the project's code, nothing downloaded): every ``*.py`` file of the
running Python's standard library cut into documents at blank-line triples (as
``bench_packing.py`` does), ``--copies`` times (copy k > 0 starts with the line ``# copy k``, so
every record has its own digest), as curated records of one snapshot; splits by record index
(90 % train, 5 % validation, 5 % test); a byte-level BPE (vocab 8192) trained with ``train_bpe``
on the first 3000 documents, stored as the release's ``tokenizer`` layer; a mixture plan drawing
``--draws`` x the training records with replacement; packing atomic, in order (Algorithm 18.2),
``seq_len`` 2048, over-length samples split, shards of 2^20 positions (512 blocks).

Sides (one process, same set-up; each side on its own copy of the data root):
  1 worker   ``Engine(workers=1)``: Dask's synchronous scheduler in this process
  2 workers  ``Engine(workers=2)``: a LocalCluster of 2 single-threaded worker processes, started
             and warmed up (imports) before timing
Each side times ``build_token_views`` (``reuse=False``: every record is tokenized) and
``build_packed_shards`` called directly over a ``LayerStore``; the mixture plan is built between
them (not timed, identical on both sides). Tokenizers' own Rust threads are pinned before anything
is imported: ``RAYON_NUM_THREADS=1``, ``TOKENIZERS_PARALLELISM=false`` (the worker processes
inherit the environment; the bench asks them and prints what they report). Arrow's CPU pool (Parquet
decoding and encoding) is pinned the same way: Dask's nanny starts every worker process with
``OMP_NUM_THREADS=1``, which Arrow reads for its pool size, so each worker decodes with one thread;
the 1-worker side runs its tasks in this process, whose pool would otherwise have a thread per core
(2 here) and make "1 worker" use both cores while Parquet is decoded. ``--arrow-threads N`` sets
this process's pool to N threads on both sides (default 1, as the workers have; 0 leaves Arrow's
default, what a user switching ``CORPUS_RELEASE_WORKERS`` from 1 to 2 sees). The outputs are
compared file by file (sha256 of every file of the token_views version, every shard file and the
packed_shards version). Prints seconds per step and side, the speedup (1 worker / 2 workers) and
the load average before and after each side.

With ``--rounds R`` the sides alternate R times (each on a fresh copy) and the best time per side
and step is reported (the machine may be shared); every run's files must be identical.

Run:  nice -n 5 .venv/bin/python bench/bench_release_parallel.py [--copies 2] [--draws 3] [--rounds 1] [--arrow-threads 1] [--workdir DIR]
"""

from __future__ import annotations

import os

os.environ["RAYON_NUM_THREADS"] = "1"
os.environ["TOKENIZERS_PARALLELISM"] = "false"

import argparse  # noqa: E402
import hashlib  # noqa: E402
import shutil  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _common import cpu_model  # noqa: E402
from bench_packing import stdlib_documents  # noqa: E402

RELEASE = "bench"
SNAPSHOT = "stdlib.20260101T000000"
SPLITS = ["train", "validation", "test"]


def _tree(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and not p.name.startswith(".")}


def _load() -> str:
    return "/".join(f"{x:.2f}" for x in os.getloadavg())


def build_world(home: Path, copies: int) -> dict:
    from corpus_assets.domain.canonical.records import SCHEMA_VERSIONS, DocumentPayload, Record, record_digest, record_to_row
    from corpus_assets.domain.curate.curated_layer import CURATED_TABLES
    from corpus_assets.domain.ingest.sources_config import Governance
    from corpus_assets.domain.layers.registry import CURATED_RECORDS, SPLITS as SPLITS_LAYER, TOKENIZER
    from corpus_assets.domain.storage.layer_store import LayerStore
    from corpus_assets.domain.tokens.splits_layer import SPLITS_TABLES
    from corpus_assets.domain.tokens.tokenizer import BpeTrainSpec, TokenizerSpec, train_bpe
    from corpus_assets.domain.tokens.tokenizer_layer import TOKENIZER_TABLES

    texts = stdlib_documents()
    store = LayerStore(home)
    gov = Governance(license="PSF-2.0", rights_evidence="bench only")
    assignments = []
    chars = 0
    with store.new_version(CURATED_RECORDS, SNAPSHOT, CURATED_TABLES, {"bench": "stdlib", "copies": copies}) as w:
        i = 0
        for k in range(copies):
            batch = []
            for text in texts:
                body = text if k == 0 else f"# copy {k}\n{text}"
                r = Record(record_id=f"stdlib:{i:07d}", source_id="stdlib", snapshot=SNAPSHOT, item_id=str(i),
                           schema_type="document", schema_version=SCHEMA_VERSIONS["document"], adapter="bench",
                           adapter_version="1", domain="code", group_id=f"g{i}", governance=gov,
                           payload=DocumentPayload(text=body))
                r.record_sha256 = record_digest(r)
                batch.append(record_to_row(r))
                split = SPLITS[0] if i % 20 >= 2 else SPLITS[1 + i % 20]
                assignments.append({"record_id": r.record_id, "source_id": "stdlib", "snapshot": SNAPSHOT, "kept": True,
                                    "group_key": r.group_id, "u": 0.5, "split": split})
                chars += len(body)
                i += 1
            w.write("records", batch)
        w.commit()
    with store.new_version(SPLITS_LAYER, RELEASE, SPLITS_TABLES, {"bench": "splits"}) as w:
        w.write("assignments", assignments)
        w.commit()
    spec = TokenizerSpec(train=BpeTrainSpec(vocab_size=8192), special_tokens=["<|endoftext|>", "<|bos|>"])
    frozen = train_bpe(texts[:3000], spec)
    with store.new_version(TOKENIZER, RELEASE, TOKENIZER_TABLES, {"tokenizer_digest": frozen.digest}) as w:
        w.write("tokenizer", [{"digest": frozen.digest, "tokenizer_json": frozen.to_json()}])
        w.commit(extra_manifest={"tokenizer_digest": frozen.digest, "vocab_size": frozen.vocab_size,
                                 "eos_id": frozen.eos_id, "tokenizer_spec": spec.model_dump(mode="json")})
    return {"records": len(assignments), "chars": chars, "train": sum(a["split"] == "train" for a in assignments),
            "vocab_size": frozen.vocab_size, "tokenizer_digest": frozen.digest}


def _arrow_threads(_=None) -> int:
    import pyarrow as pa

    return pa.cpu_count()


def run_side(home: Path, workers: int, world: dict, draws: int, arrow_threads: int) -> dict:
    from corpus_assets.domain.core.compute import Engine
    from corpus_assets.domain.layers.registry import SPLITS as SPLITS_LAYER, TOKENIZER, TOKEN_VIEWS
    from corpus_assets.domain.pack.mixture import MixtureSpec
    from corpus_assets.domain.pack.mixture_layer import build_mixture_plan
    from corpus_assets.domain.pack.packing import PackingPolicy
    from corpus_assets.domain.pack.shards_layer import ShardSpec, build_packed_shards
    from corpus_assets.domain.storage.layer_store import LayerStore
    from corpus_assets.domain.tokens.token_views import TokenViewPolicy
    from corpus_assets.domain.tokens.token_views_layer import build_token_views

    engine = Engine(workers=workers)
    pinned = [os.environ.get("RAYON_NUM_THREADS"), os.environ.get("TOKENIZERS_PARALLELISM")]
    # imports (distributed, the task modules) and the cluster's start-up happen before timing, on both sides
    engine.describe()
    engine.map(exec, ["import corpus_assets.domain.tokens.token_views_tasks, corpus_assets.domain.pack.pack_tasks"]
               * (4 * workers), name="warm-up")
    if workers > 1:
        pinned = sorted(set(zip(engine.map(os.getenv, ["RAYON_NUM_THREADS"] * 4 * workers, name="env"),
                                engine.map(os.getenv, ["TOKENIZERS_PARALLELISM"] * 4 * workers, name="env"))))
    import pyarrow as pa

    pa.set_cpu_count(arrow_threads or os.cpu_count() or 1)  # this process's pool (the 1-worker side's tasks run here)
    arrow = sorted(set(engine.map(_arrow_threads, range(4 * workers), name="arrow"))) if workers > 1 else [pa.cpu_count()]
    store = LayerStore(home)
    load0 = _load()
    t0 = time.perf_counter()
    views, vreport = build_token_views(store, RELEASE, TokenViewPolicy(), splits=store.require_current(SPLITS_LAYER, RELEASE),
                                       tokenizer=store.require_current(TOKENIZER, RELEASE), reuse=False, engine=engine)
    t_views = time.perf_counter() - t0
    spec = MixtureSpec(unit="documents", alpha=1.0, budget=draws * world["train"], replacement=True, seed=0)
    build_mixture_plan(store, RELEASE, spec, token_views=views, train_split="train")
    policy = PackingPolicy(seq_len=2048, mode="atomic", fit="in_order", overlength="split", boundary="mask")
    t1 = time.perf_counter()
    shards, sreport = build_packed_shards(
        store, RELEASE, policy, ShardSpec(positions=1 << 20), token_views=store.require_current(TOKEN_VIEWS, RELEASE),
        mixture_plan=store.require_current("mixture_plan", RELEASE), tokenizer_digest=world["tokenizer_digest"],
        vocab_size=world["vocab_size"], split_names=SPLITS, engine=engine)
    t_pack = time.perf_counter() - t1
    load1 = _load()
    return {
        "workers": workers, "engine": engine.describe(), "pinned": pinned, "arrow": arrow, "views_s": t_views, "pack_s": t_pack,
        "load": f"{load0} -> {load1}", "tokens": vreport["tokens"], "views": vreport["views"],
        "packed_tokens": sum(s.get("input_tokens", 0) for s in sreport["splits"].values()),
        "blocks": sum(s.get("blocks", 0) for s in sreport["splits"].values()),
        "shards": sum(s.get("shards", 0) for s in sreport["splits"].values()),
        "views_digest": views.content_digest, "shards_digest": shards.content_digest,
        "views_tree": _tree(views.root), "shard_files": _tree(home / "shards"), "layer_tree": _tree(shards.root),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--copies", type=int, default=2, help="copies of the stdlib documents (records)")
    ap.add_argument("--draws", type=int, default=3, help="mixture draws per training record")
    ap.add_argument("--workdir", type=Path, default=None)
    ap.add_argument("--rounds", type=int, default=1, help="alternating rounds (1 worker, then 2); best per side reported")
    ap.add_argument("--arrow-threads", type=int, default=1,
                    help="Arrow CPU pool of this process on both sides (default 1, as Dask gives each worker; 0: Arrow's default)")
    args = ap.parse_args()

    import numpy as np
    import tokenizers

    work = Path(args.workdir or tempfile.mkdtemp(prefix="bench-release-parallel-"))
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    world = build_world(work / "world", args.copies)
    print(f"set-up {time.perf_counter() - t0:.1f}s: {world['records']} records, {world['chars'] / 1e6:.1f} M chars, "
          f"{world['train']} in train", flush=True)
    runs: dict[int, list[dict]] = {1: [], 2: []}
    for r in range(args.rounds):
        for workers in (1, 2):
            home = work / f"home-{workers}"
            shutil.rmtree(home, ignore_errors=True)
            shutil.copytree(work / "world", home)
            s = run_side(home, workers, world, args.draws, args.arrow_threads)
            runs[workers].append(s)
            print(f"round {r}, {workers} worker(s): token_views {s['views_s']:.1f}s, packed_shards {s['pack_s']:.1f}s "
                  f"(load {s['load']}; tokenizer threads {s['pinned']}; Arrow threads {s['arrow']})", flush=True)
    best = {w: {k: min(x[k] for x in rs) for k in ("views_s", "pack_s")} for w, rs in runs.items()}
    a, b = dict(runs[1][-1], **best[1]), dict(runs[2][-1], **best[2])
    ref = runs[1][0]
    for s in runs[1] + runs[2]:  # every run of either side wrote the same files
        if (s["views_tree"], s["shard_files"], s["layer_tree"]) != (ref["views_tree"], ref["shard_files"], ref["layer_tree"]):
            a["views_tree"] = None
    same = {
        "token_views files": a["views_tree"] == b["views_tree"] and a["views_digest"] == b["views_digest"],
        "shard files": a["shard_files"] == b["shard_files"],
        "packed_shards files": a["layer_tree"] == b["layer_tree"] and a["shards_digest"] == b["shards_digest"],
    }
    print()
    print(f"cpu: {cpu_model()}, {os.cpu_count()} cores; tokenizers {tokenizers.__version__}, numpy {np.__version__}")
    print(f"release: {world['records']} records, {a['views']} views, {a['tokens'] / 1e6:.2f} M view tokens; "
          f"packed {a['packed_tokens'] / 1e6:.2f} M tokens into {a['blocks']} blocks, {a['shards']} shards")
    print(f"best of {args.rounds} round(s) per side")
    print(f"{'step':<16}{'1 worker s':>12}{'2 workers s':>13}{'speedup':>9}")
    for step, key in (("token_views", "views_s"), ("packed_shards", "pack_s")):
        print(f"{step:<16}{a[key]:>12.1f}{b[key]:>13.1f}{a[key] / b[key]:>8.2f}x")
    ta = min(x["views_s"] + x["pack_s"] for x in runs[1])
    tb = min(x["views_s"] + x["pack_s"] for x in runs[2])
    print(f"{'both':<16}{ta:>12.1f}{tb:>13.1f}{ta / tb:>8.2f}x")
    print("identical outputs: " + ", ".join(f"{k} {'yes' if v else 'NO'}" for k, v in same.items()))
    print(f"files compared: {len(a['views_tree'])} token_views, {len(a['shard_files'])} shard, "
          f"{len(a['layer_tree'])} packed_shards")
    if not args.workdir:
        shutil.rmtree(work, ignore_errors=True)
    if not all(same.values()):
        sys.exit("outputs differ between 1 and 2 workers")


if __name__ == "__main__":
    main()
