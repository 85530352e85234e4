#!/usr/bin/env python3
"""Token views overhead (issue 5): ``token_views(records, tok, policy)`` vs bare ``encode_batch``.

Texts: the main text (``corpus_assets.domain.canonical.extraction.extract_html``) of the Debian
documentation pages under ``bench/data/root`` (``bench/fetch_debian_docs.sh``), in
``_common.discover_pages`` order, empty extractions skipped, the first ``--docs`` of them. Each
text becomes a document ``Record`` (``record_sha256`` filled in, as canonical records have it).

Tokenizer: the GPT-2 ``tokenizer.json`` at ``/tmp/gpt2/tokenizer.json`` if it exists (made by
``scripts/gpt2_tokenizer_from_whisper.py``), else a byte-level BPE (vocab 8192) trained with
``train_bpe`` on the first 500 texts.

Sides (same texts, same order, same process, pinned to one core, ``RAYON_NUM_THREADS=1``):
  bare         ``tok.tokenizer.encode_batch(texts, add_special_tokens=False)``
  token_views  ``token_views(records, tok, TokenViewPolicy())`` — rendering, cache keys, one
               ``encode_batch`` of all segments, then ids / loss mask / offsets as numpy arrays
               plus one EOS per document.
One warm-up call per side, then ``--rounds`` alternating rounds; per side the best round is
reported, and the ratio token_views / bare throughput (target >= 0.8).

Run:  .venv/bin/python bench/bench_token_views.py [--docs 3000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("RAYON_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _common import DEFAULT_ROOT, cpu_model, discover_pages, pin_to_one_core  # noqa: E402

GPT2 = Path("/tmp/gpt2/tokenizer.json")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--docs", type=int, default=3000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--root", type=Path, default=DEFAULT_ROOT)
    ap.add_argument("--core", type=int, default=0)
    args = ap.parse_args()
    pinned = pin_to_one_core(args.core)

    import numpy as np
    import tokenizers

    from corpus_assets.domain.canonical.extraction import extract_html
    from corpus_assets.domain.canonical.records import SCHEMA_VERSIONS, DocumentPayload, Record, record_digest
    from corpus_assets.domain.ingest.sources_config import Governance
    from corpus_assets.domain.tokens.token_views import TokenView, TokenViewPolicy, token_views
    from corpus_assets.domain.tokens.tokenizer import BpeTrainSpec, TokenizerSpec, load_tokenizer, train_bpe

    texts: list[str] = []
    for rel in discover_pages(args.root):
        try:
            _, text = extract_html((args.root / rel).read_bytes())
        except Exception:
            continue
        if text and text.strip():
            texts.append(text)
        if len(texts) >= args.docs:
            break
    if not texts:
        sys.exit(f"no pages under {args.root}; run bench/fetch_debian_docs.sh first")

    gov = Governance(license="various", rights_evidence="bench only")
    records = []
    for i, text in enumerate(texts):
        r = Record(
            record_id=f"bench:{i}", source_id="bench", snapshot="bench.20260101T000000", item_id=str(i),
            schema_type="document", schema_version=SCHEMA_VERSIONS["document"], adapter="bench",
            adapter_version="1", domain="prose", group_id=f"g{i}", governance=gov,
            payload=DocumentPayload(text=text),
        )
        r.record_sha256 = record_digest(r)
        records.append(r)

    if GPT2.exists():
        tok = load_tokenizer(TokenizerSpec(path=GPT2))
        tok_name = f"GPT-2 ({GPT2})"
    else:
        tok = train_bpe(texts[:500], TokenizerSpec(train=BpeTrainSpec(vocab_size=8192)))
        tok_name = "byte-level BPE 8192 trained on 500 texts"
    policy = TokenViewPolicy()
    chars = sum(len(t) for t in texts)

    def bare():
        return tok.tokenizer.encode_batch(texts, add_special_tokens=False)

    def views():
        return token_views(records, tok, policy)

    encs = bare()
    n_tokens = sum(len(e.ids) for e in encs)
    vs = views()
    assert all(isinstance(v, TokenView) for v in vs) and len(vs) == len(records)
    assert sum(len(v) for v in vs) == n_tokens + len(records)  # same tokens + exactly one EOS each
    assert all(np.array_equal(v.input_ids[:-1], e.ids) for v, e in zip(vs[:50], encs[:50]))
    assert all(v.offsets[:-1].tolist() == [list(o) for o in e.offsets] for v, e in zip(vs[:50], encs[:50]))
    del encs, vs

    times: dict[str, list[float]] = {"bare": [], "token_views": []}
    for _ in range(args.rounds):
        for name, fn in (("bare", bare), ("token_views", views)):
            t0 = time.perf_counter()
            out = fn()
            times[name].append(time.perf_counter() - t0)
            del out

    print(f"cpu: {cpu_model()}, {pinned}; tokenizers {tokenizers.__version__}, numpy {np.__version__}")
    print(f"tokenizer: {tok_name}")
    print(f"docs: {len(texts)}, chars: {chars}, tokens (bare): {n_tokens}")
    best = {k: min(v) for k, v in times.items()}
    for name in ("bare", "token_views"):
        t = best[name]
        print(
            f"{name:12s} best {t:.3f} s  {len(texts) / t:8.1f} docs/s  {n_tokens / t / 1e6:.3f} Mtok/s  "
            f"(rounds: {', '.join(f'{x:.3f}' for x in times[name])})"
        )
    ratios = [b / v for b, v in zip(times["bare"], times["token_views"])]
    ratio = best["bare"] / best["token_views"]
    verdict = "met" if ratio >= 0.8 else "NOT met"
    print(f"ratio token_views / bare throughput: {ratio:.3f}x (per round: {', '.join(f'{r:.3f}' for r in ratios)}); target >= 0.8x: {verdict}")


if __name__ == "__main__":
    main()
