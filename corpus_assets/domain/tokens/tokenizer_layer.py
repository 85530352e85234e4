"""The ``tokenizer`` layer of a release: its frozen tokenizer, named by its digest.

Loaded from a tokenizer.json, or trained (byte-level BPE) on the texts of the release's kept
*training-split* records only, so tokenizer learning never sees validation or test data.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Optional


from corpus_assets.domain.storage.layer_store import LayerStore, LayerVersion
from corpus_assets.domain.tokens.tokenizer import FrozenTokenizer, TokenizerSpec, load_tokenizer, train_bpe
from corpus_assets.domain.layers.registry import CURATED_RECORDS, TOKENIZER, layer

TOKENIZER_LAYER_CODE_VERSION = "release-layers-1"

TOKENIZER_TABLES = layer(TOKENIZER).table_specs()


def training_texts(store: LayerStore, splits: LayerVersion, train_split: str = "train") -> Callable[[], list[str]]:
    """Texts of the kept records assigned to ``train_split`` (in record-id order), read lazily."""

    def texts() -> list[str]:
        rows = [r for r in splits.read_table("assignments").to_pylist() if r["kept"] and r["split"] == train_split]
        wanted: dict[str, set[str]] = {}
        for r in rows:
            wanted.setdefault(r["snapshot"], set()).add(r["record_id"])
        found: dict[str, str] = {}
        for snap, ids in sorted(wanted.items()):
            cur = store.require_current(CURATED_RECORDS, snap)
            for b in cur.iter_batches("records", columns=["record_id", "text"]):
                for rid, text in zip(b.column(0).to_pylist(), b.column(1).to_pylist()):
                    if rid in ids:
                        found[rid] = text
        return [found[r] for r in sorted(found)]

    return texts


def build_tokenizer(
    store: LayerStore,
    release: str,
    spec: TokenizerSpec,
    *,
    splits: LayerVersion,
    base_dir: Optional[Path] = None,
) -> tuple[LayerVersion, FrozenTokenizer]:
    if spec.path is not None:
        frozen = load_tokenizer(spec, base_dir=base_dir)
        origin = {"loaded_from": str(spec.path)}
    else:
        texts = training_texts(store, splits)()
        if not texts:
            raise ValueError(f"release {release!r}: the training split is empty; nothing to train a tokenizer on")
        frozen = train_bpe(texts, spec)
        origin = {"trained_on": "train split", "training_records": len(texts), "splits_version": splits.content_digest}
    build = {"code_version": TOKENIZER_LAYER_CODE_VERSION, "tokenizer_digest": frozen.digest, **origin}
    with store.new_version(TOKENIZER, release, TOKENIZER_TABLES, build) as w:
        w.write("tokenizer", [{"digest": frozen.digest, "tokenizer_json": frozen.to_json()}])
        version = w.commit(extra_manifest={"tokenizer_digest": frozen.digest, "vocab_size": frozen.vocab_size,
                                           "eos_id": frozen.eos_id, **origin,
                                           "tokenizer_spec": spec.model_dump(mode="json")})
    return version, frozen
