"""Release-level splits and tokenizer, built from dedup clusters and curated records.

- ``splits``: every record of the release gets a leakage group (declared group joined with the
  near-duplicate components of ``dedup_clusters``) and a split from the salted group hash.
  No release has been published yet (publishing comes with the releases issue), so there is
  no earlier assignment to keep; ``previous`` is wired for when there is.
- ``tokenizer``: loaded from a tokenizer.json, or trained (byte-level BPE) on the texts of the
  release's kept *training-split* records only, so tokenizer learning never sees validation or
  test data. Frozen and named by its digest.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Optional

import pyarrow as pa

from corpus_assets.domain.layer_store import LayerStore, LayerVersion, TableSpec
from corpus_assets.domain.splits import SplitPolicy, assign, leakage_groups, split_policy_version, unit_interval
from corpus_assets.domain.tokenizer import FrozenTokenizer, TokenizerSpec, load_tokenizer, train_bpe

DEDUP_ASSET = "dedup_clusters"
CURATED_ASSET = "curated_records"
SPLITS_ASSET = "splits"
TOKENIZER_ASSET = "tokenizer"
RELEASE_LAYERS_CODE_VERSION = "release-layers-1"

ASSIGNMENTS_SCHEMA = pa.schema(
    [
        ("record_id", pa.string()),
        ("source_id", pa.string()),
        ("snapshot", pa.string()),
        ("kept", pa.bool_()),  # representative after dedup (what training uses)
        ("group_key", pa.string()),
        ("u", pa.float64()),
        ("split", pa.string()),  # null when quarantined by a split conflict
    ]
)
SPLITS_TABLES = {"assignments": TableSpec(ASSIGNMENTS_SCHEMA)}
TOKENIZER_TABLES = {"tokenizer": TableSpec(pa.schema([("digest", pa.string()), ("tokenizer_json", pa.large_string())]))}


def build_splits(
    store: LayerStore,
    release: str,
    policy: SplitPolicy,
    *,
    dedup: LayerVersion,
    previous: Optional[dict[str, str]] = None,
) -> tuple[LayerVersion, dict]:
    clusters = dedup.read_table("clusters").to_pylist()
    # declared groups come from the curated records of each snapshot the release used
    declared: dict[str, str] = {}
    for snap in sorted({c["snapshot"] for c in clusters}):
        cur = store.require_current(CURATED_ASSET, snap)
        for b in cur.iter_batches("records", columns=["record_id", "group_id"]):
            declared.update(zip(b.column(0).to_pylist(), b.column(1).to_pylist()))
    ids = [c["record_id"] for c in clusters]
    keys = leakage_groups(ids, [declared.get(i) for i in ids], [c["group_id"] for c in clusters])
    result = assign(ids, keys, policy, previous=previous)
    rows = [
        {
            "record_id": c["record_id"],
            "source_id": c["source_id"],
            "snapshot": c["snapshot"],
            "kept": c["kind"] == "representative",
            "group_key": k,
            "u": unit_interval(k, policy.salt),
            "split": result.split.get(c["record_id"]),
        }
        for c, k in zip(clusters, keys)
    ]
    report = result.report()
    spec = {
        "code_version": RELEASE_LAYERS_CODE_VERSION,
        "policy_version": split_policy_version(policy),
        "dedup_version": dedup.content_digest,
    }
    with store.new_version(SPLITS_ASSET, release, SPLITS_TABLES, spec) as w:
        w.write("assignments", rows)
        version = w.commit(extra_manifest={"report": {k: v for k, v in report.items() if k != "quarantined"},
                                           "quarantined": len(result.quarantined)})
    return version, report


def training_texts(store: LayerStore, splits: LayerVersion, train_split: str = "train") -> Callable[[], list[str]]:
    """Texts of the kept records assigned to ``train_split`` (in record-id order), read lazily."""

    def texts() -> list[str]:
        rows = [r for r in splits.read_table("assignments").to_pylist() if r["kept"] and r["split"] == train_split]
        wanted: dict[str, set[str]] = {}
        for r in rows:
            wanted.setdefault(r["snapshot"], set()).add(r["record_id"])
        found: dict[str, str] = {}
        for snap, ids in sorted(wanted.items()):
            cur = store.require_current(CURATED_ASSET, snap)
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
    build = {"code_version": RELEASE_LAYERS_CODE_VERSION, "tokenizer_digest": frozen.digest, **origin}
    with store.new_version(TOKENIZER_ASSET, release, TOKENIZER_TABLES, build) as w:
        w.write("tokenizer", [{"digest": frozen.digest, "tokenizer_json": frozen.to_json()}])
        version = w.commit(extra_manifest={"tokenizer_digest": frozen.digest, "vocab_size": frozen.vocab_size,
                                           "eos_id": frozen.eos_id, **origin,
                                           "tokenizer_spec": spec.model_dump(mode="json")})
    return version, frozen
