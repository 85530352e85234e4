"""The ``minhash_signatures`` layer of a snapshot: one MinHash signature per curated record.

Signatures are computed once per snapshot partition (a new snapshot costs only its own
signatures) from each curated record's dedup normal form (case- and whitespace-folded for prose,
untouched for code) with the project's MinHash policy (``dedup.yaml``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Optional

import numpy as np
import pyarrow as pa
from pydantic import BaseModel, ConfigDict, Field

from corpus_assets.domain.core.config_files import read_yaml, validate
from corpus_assets.domain.core.hashing import dedup_normal_form
from corpus_assets.domain.core.progress import Progress
from corpus_assets.domain.dedup.minhash import MinHashPolicy, minhash_policy_version, signatures
from corpus_assets.domain.storage.layer_store import LayerStore, LayerVersion
from corpus_assets.domain.layers.registry import MINHASH_SIGNATURES, SIGNATURES_SCHEMA, layer



class DedupFile(BaseModel):
    """``dedup.yaml``: the project MinHash policy (signatures are cached per snapshot with it)."""

    model_config = ConfigDict(extra="forbid")
    minhash: MinHashPolicy = Field(default_factory=MinHashPolicy)


def load_dedup_file(path: Path | str) -> DedupFile:
    return validate(DedupFile, read_yaml(path) or {}, str(path))


SIGNATURES_TABLES = layer(MINHASH_SIGNATURES).table_specs()

def build_signatures(
    store: LayerStore, snapshot: str, policy: MinHashPolicy, *, curated: LayerVersion, batch_size: int = 2048,
    log: Optional[Callable[[str], None]] = None,
) -> LayerVersion:
    build_spec = {"minhash_policy": minhash_policy_version(policy), "curated_version": curated.content_digest}
    progress = Progress(log, f"minhash_signatures[{snapshot}]", total=curated.row_count("records")) if log else None
    done = 0
    with store.new_version(MINHASH_SIGNATURES, snapshot, SIGNATURES_TABLES, build_spec) as w:
        cols = ["record_id", "source_id", "snapshot", "domain", "dedup_key", "text"]
        for batch in curated.iter_batches("records", batch_size=batch_size, columns=cols):
            done += batch.num_rows
            if progress is not None:
                progress.update(done)
            d = batch.to_pydict()
            forms = [dedup_normal_form(t, dom) for t, dom in zip(d["text"], d["domain"])]
            sigs = signatures(forms, policy)
            w.write(
                "signatures",
                pa.table(
                    {
                        "record_id": d["record_id"],
                        "source_id": d["source_id"],
                        "snapshot": d["snapshot"],
                        "domain": d["domain"],
                        "dedup_key": d["dedup_key"],
                        "signature": pa.array([row.tobytes() for row in sigs], pa.binary()),
                    },
                    schema=SIGNATURES_SCHEMA,
                ),
            )
        if progress is not None:
            progress.finish()
        return w.commit(
            extra_manifest={
                "minhash_policy_version": minhash_policy_version(policy),
                "signature_dtype": str(np.dtype(sigs.dtype)) if curated.row_count("records") else None,
                "num_perm": policy.num_perm,
            }
        )
