#!/usr/bin/env python3
"""Sequence packing throughput (issue 6): ``iter_packed`` in stream and atomic mode vs a bare
``np.concatenate`` + reshape of the same token arrays.

Token views (real, made with the project's code): every ``*.py`` file of the running Python's
standard library (``sysconfig.get_paths()["stdlib"]``, ``site-packages`` excluded, sorted by
relative path) is cut at top-level blank-line pairs (``"\\n\\n\\n"``, PEP 8's separation of
top-level definitions) into documents; empty pieces are skipped. A byte-level BPE (vocab 8192) is
trained with ``train_bpe`` on the first 3000 documents; ``iter_token_view_batches`` makes the
document views (one EOS each, offsets, loss mask). The list of views is repeated (same arrays,
record ids suffixed ``#r<k>``) until it holds at least ``--min-tokens`` tokens. Present on every
machine with CPython; nothing is downloaded.

Sides (same views, same order, same process, pinned to one core after the set-up):
  baseline   ``np.concatenate([v.input_ids for v in views])[: n*T].reshape(n, T)`` — the memory
             bandwidth floor of just copying the tokens into blocks
  stream     ``iter_packed(views, PackingPolicy(seq_len=T, mode="stream", boundary="none", tail="drop"))``
  stream+mask  the same with ``boundary="mask"``
  atomic     ``PackingPolicy(seq_len=T, mode="atomic", fit="in_order", boundary="mask", overlength="split")``
  atomic+bos ``boundary="bos"`` (BOS id = the tokenizer's EOS id + 1 slot: a reserved special)
  best_fit   ``fit="best_fit", open_blocks=64``
Each packer side consumes every chunk ``iter_packed`` yields (tokens, masks, segment and position
ids, the spans table, stats) and drops it, i.e. the bounded-memory path a release writer uses.
One warm-up per side, then ``--rounds`` alternating rounds; per side the best round is reported as
input tokens/s and as the ratio to the baseline's rate. Targets: stream >= 20 M tokens/s,
atomic >= 5 M tokens/s.

Run:  .venv/bin/python bench/bench_packing.py [--seq-len 2048] [--min-tokens 20000000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import sys
import sysconfig
import time
from pathlib import Path

os.environ.setdefault("TOKENIZERS_PARALLELISM", "true")

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _common import cpu_model, pin_to_one_core  # noqa: E402


def stdlib_documents() -> list[str]:
    root = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(
        (p for p in root.rglob("*.py") if "site-packages" not in p.parts and p.is_file()),
        key=lambda p: p.relative_to(root).as_posix(),
    )
    docs: list[str] = []
    for p in files:
        try:
            text = p.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        docs.extend(piece for piece in text.split("\n\n\n") if piece.strip())
    return docs


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seq-len", type=int, default=2048)
    ap.add_argument("--min-tokens", type=int, default=20_000_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--chunk-tokens", type=int, default=1 << 20)
    ap.add_argument("--core", type=int, default=0)
    args = ap.parse_args()

    import numpy as np

    from corpus_assets.domain.pack import packing
    from corpus_assets.domain.pack.packing import PackingPolicy, coverage_check, iter_packed, pack
    from corpus_assets.domain.canonical.records import SCHEMA_VERSIONS, DocumentPayload, Record, record_digest
    from corpus_assets.domain.ingest.sources_config import Governance
    from corpus_assets.domain.tokens.token_views import TokenView, iter_token_view_batches
    from corpus_assets.domain.tokens.tokenizer import BpeTrainSpec, TokenizerSpec, train_bpe

    t0 = time.perf_counter()
    texts = stdlib_documents()
    gov = Governance(license="PSF-2.0", rights_evidence="bench only")
    records = []
    for i, text in enumerate(texts):
        r = Record(
            record_id=f"stdlib:{i}", source_id="stdlib", snapshot="stdlib.20260101T000000", item_id=str(i),
            schema_type="document", schema_version=SCHEMA_VERSIONS["document"], adapter="bench",
            adapter_version="1", domain="code", group_id=f"g{i}", governance=gov,
            payload=DocumentPayload(text=text),
        )
        r.record_sha256 = record_digest(r)
        records.append(r)
    tok = train_bpe(texts[:3000], TokenizerSpec(train=BpeTrainSpec(vocab_size=8192),
                                                special_tokens=["<|endoftext|>", "<|bos|>"]))  # fmt: skip
    bos_id = tok.tokenizer.token_to_id("<|bos|>")
    base_views: list[TokenView] = []
    for batch in iter_token_view_batches(records, tok):
        base_views.extend(v for v in batch if isinstance(v, TokenView))
    base_tokens = sum(len(v) for v in base_views)
    views = list(base_views)
    k = 1
    while sum(len(v) for v in views) < args.min_tokens:
        views.extend(
            TokenView(f"{v.record_id}#r{k}", v.variant, v.input_ids, v.loss_mask, v.offsets, v.segments)
            for v in base_views
        )
        k += 1
    n_tokens = sum(len(v) for v in views)
    lengths = np.array([len(v) for v in views])
    setup = time.perf_counter() - t0
    pinned = pin_to_one_core(args.core)

    T = args.seq_len
    policies = {
        "stream": PackingPolicy(seq_len=T, mode="stream", boundary="none", tail="drop"),
        "stream+mask": PackingPolicy(seq_len=T, mode="stream", boundary="mask", tail="drop"),
        "atomic": PackingPolicy(seq_len=T, mode="atomic", fit="in_order", boundary="mask", overlength="split"),
        "atomic+bos": PackingPolicy(seq_len=T, mode="atomic", fit="in_order", boundary="bos", overlength="split"),
        "best_fit": PackingPolicy(seq_len=T, mode="atomic", fit="best_fit", open_blocks=64, boundary="mask",
                                  overlength="split"),
    }  # fmt: skip

    def baseline():
        flat = np.concatenate([v.input_ids for v in views])
        n = flat.shape[0] // T
        return flat[: n * T].reshape(n, T)

    def packer(pol):
        def run():
            blocks = 0
            for part in iter_packed(views, pol, bos_id=bos_id, chunk_tokens=args.chunk_tokens):
                blocks += len(part)
            return blocks

        return run

    sides = {"baseline": baseline, **{name: packer(pol) for name, pol in policies.items()}}

    # correctness of what is being timed (on the first 2M tokens): coverage + accounting
    head = views[: int(np.searchsorted(np.cumsum(lengths), 2_000_000)) + 1]
    for name, pol in policies.items():
        pb = pack(head, pol, bos_id=bos_id)
        ok, detail = coverage_check(pb)
        st = pb.stats
        assert ok, (name, detail)
        assert st.input_tokens == st.content_tokens + st.dropped_tokens + st.truncated_tokens + st.quarantined_tokens
    full_stats = {}
    for name, pol in policies.items():  # warm-up (numba kernel compile/load) + stats on everything
        st = None
        for part in iter_packed(views, pol, bos_id=bos_id, chunk_tokens=args.chunk_tokens):
            st = part.stats if st is None else st + part.stats
        full_stats[name] = st
    baseline()

    times: dict[str, list[float]] = {name: [] for name in sides}
    for _ in range(args.rounds):
        for name, fn in sides.items():
            t = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t)

    print(f"cpu: {cpu_model()}, {pinned}; numpy {np.__version__}, numba kernel: {packing._numba_on()}")
    print(
        f"data: {len(base_views)} stdlib documents -> {base_tokens} tokens (BPE 8192), repeated x{k} -> "
        f"{len(views)} views, {n_tokens} tokens; median view {int(np.median(lengths))} tokens, "
        f"{int((lengths > T).sum())} views > T; set-up {setup:.1f} s"
    )
    print(f"seq_len T = {T}, chunk_tokens = {args.chunk_tokens}, best of {args.rounds} rounds")
    best = {name: min(ts) for name, ts in times.items()}
    base_rate = n_tokens / best["baseline"]
    for name in sides:
        rate = n_tokens / best[name]
        line = f"{name:12s} best {best[name]:7.3f} s  {rate / 1e6:8.1f} Mtok/s  ratio to baseline {rate / base_rate:6.3f}"
        if name in full_stats:
            st = full_stats[name]
            line += (
                f"  | blocks {st.blocks}, util {st.utilization:.4f}, labels {st.label_rate:.4f}, "
                f"loss {st.data_loss_rate:.2e}"
            )
        line += f"  (rounds: {', '.join(f'{x:.3f}' for x in times[name])})"
        print(line)
    s_rate = n_tokens / best["stream"]
    a_rate = n_tokens / best["atomic"]
    print(
        f"targets: stream >= 20 Mtok/s: {'met' if s_rate >= 20e6 else 'NOT met'} ({s_rate / 1e6:.1f}); "
        f"atomic >= 5 Mtok/s: {'met' if a_rate >= 5e6 else 'NOT met'} ({a_rate / 1e6:.1f}; "
        f"best_fit {n_tokens / best['best_fit'] / 1e6:.1f}, atomic+bos {n_tokens / best['atomic+bos'] / 1e6:.1f})"
    )


if __name__ == "__main__":
    main()
