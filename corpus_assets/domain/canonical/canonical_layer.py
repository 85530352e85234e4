"""Build the canonical layer of one snapshot from its raw version, in bounded streaming batches.

Tables of a canonical version:
- ``records``     accepted typed records (public)
- ``decisions``   one row per raw item, in the decision record every stage writes
                  (``layers/decisions.py``): outcome, action, reason code, policy version (no content)
- ``quarantine``  items that could not be interpreted, with reason and detail (owner-only)
- ``references``  private task references, kept out of every public table (owner-only)

Decisions are written in raw item order, so the version's bytes depend on the inputs and the
policy only — not on the batch size or on timing.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Callable, Optional


from corpus_assets.domain.canonical.canonicalize import canonicalize_item, policy_version
from corpus_assets.domain.ingest.capture import iter_raw_items
from corpus_assets.domain.core.hashing import sha256_bytes
from corpus_assets.domain.storage.layer_store import LayerStore, LayerVersion
from corpus_assets.domain.core.reasons import OUTCOME_OF, Outcome, Reason
from corpus_assets.domain.canonical.records import record_to_row
from corpus_assets.domain.layers.decisions import action_for, decision
from corpus_assets.domain.layers.registry import CANONICAL_RECORDS, layer

CANONICAL_CODE_VERSION = "canonical-3"  # 2: decisions in the shared decision record; 3: language-ID floor, symlinked files grouped by their resolved path

CANONICAL_TABLES = layer(CANONICAL_RECORDS).table_specs()


@dataclass
class CanonicalSummary:
    version: LayerVersion
    policy_version: str
    items: int
    outcomes: dict[str, int]
    reasons: dict[tuple[str, str], int]
    langs: dict[str, int]
    schemas: dict[str, int]


def build_canonical(
    store: LayerStore,
    source,
    snapshot: str,
    policy,
    *,
    raw_version: LayerVersion,
    batch_size: int = 256,
    log: Optional[Callable[[str], None]] = None,
    tombstones=None,
) -> CanonicalSummary:
    """Canonicalize every raw item of the snapshot. ``tombstones`` (a ``tombstones.TombstoneSet``):
    a record whose id, text digest, item URI or source was tombstoned by a deletion request is not
    kept — its decision is ``deleted`` / ``deletion.tombstoned`` naming the request (the record id
    is kept so ``purge.purge_snapshot`` can stub the raw item afterwards); so is an item that is no
    record whose URI, source or bytes (``TombstoneSet.raw_digests``) were tombstoned."""
    policy_id = policy_version(policy)
    build_spec = {
        "code_version": CANONICAL_CODE_VERSION,
        "policy_version": policy_id,
        "policy": policy.model_dump(mode="json"),
        "source": source.model_dump(mode="json"),
        "raw_version": raw_version.content_digest,
    }
    outcomes: dict[str, int] = {}
    reasons: dict[tuple[str, str], int] = {}
    langs: dict[str, int] = {}
    schemas: dict[str, int] = {}
    n = 0
    seen_ids: set[str] = set()  # record ids are unique within a snapshot; later repeats are quarantined
    started = last_log = time.monotonic()
    with store.new_version(CANONICAL_RECORDS, snapshot, CANONICAL_TABLES, build_spec) as w:
        buf: dict[str, list] = {name: [] for name in CANONICAL_TABLES}

        def flush() -> None:
            for name, rows in buf.items():
                if rows:
                    w.write(name, rows)
                    rows.clear()

        for index, item in iter_raw_items(raw_version, batch_size):
            record_id_deleted = None
            out = canonicalize_item(item, index, source, snapshot, policy)
            if out.record is None and item.content is not None and tombstones is not None and len(tombstones):
                # an item that is no record (unparseable, quarantined, rejected) re-captured after a
                # deletion: refused by its URI, source or bytes, so the purge stubs it
                hit = tombstones.is_tombstoned(
                    uri=item.uri, source_id=source.id,
                    raw_sha256=sha256_bytes(item.content) if tombstones.raw_digests else None)
                if hit is not None:
                    out.outcome = OUTCOME_OF[Reason.DELETION_TOMBSTONED]
                    out.reason = Reason.DELETION_TOMBSTONED
                    out.detail = f"deletion request {hit}"
                    out.private_reference = None
            if out.record is not None:
                if out.record.record_id in seen_ids:
                    out.outcome = OUTCOME_OF[Reason.DUPLICATE_RECORD_ID]
                    out.reason = Reason.DUPLICATE_RECORD_ID
                    out.detail = "record id already used by an earlier item of this snapshot"
                    out.record, out.private_reference = None, None
                else:
                    seen_ids.add(out.record.record_id)
                    hit = tombstones.is_tombstoned(
                        record_id=out.record.record_id, text_sha256=out.record.text_sha256, uri=item.uri,
                        source_id=source.id, raw_sha256=out.record.raw_sha256,
                    ) if tombstones is not None and len(tombstones) else None
                    if hit is not None:
                        out.outcome = OUTCOME_OF[Reason.DELETION_TOMBSTONED]
                        out.reason = Reason.DELETION_TOMBSTONED
                        out.detail = f"deletion request {hit}"
                        record_id_deleted = out.record.record_id
                        out.record, out.private_reference = None, None
            outcome, reason = out.outcome.value, out.reason.value
            record_id = out.record.record_id if out.record is not None else None
            if out.outcome is Outcome.DELETED:
                record_id = record_id_deleted
            row = record_to_row(out.record) if out.outcome is Outcome.ACCEPTED else None
            buf["decisions"].append(decision(
                stage="canonicalize", action=action_for(outcome), reason=reason, detail=out.detail,
                policy_version=policy_id, item_index=index, item_id=item.item_id, source_id=source.id,
                snapshot=snapshot, record_id=record_id,
                **({"schema_type": row["schema_type"], "domain": row["domain"], "lang": row["lang"],
                    "chars_out": row["char_count"]} if row is not None else {}),
            ))
            if row is not None:
                row["item_id"] = item.item_id
                buf["records"].append(row)
                langs[row["lang"]] = langs.get(row["lang"], 0) + 1
                schemas[row["schema_type"]] = schemas.get(row["schema_type"], 0) + 1
                if out.private_reference is not None:
                    buf["references"].append(
                        {"record_id": record_id, "reference_json": json.dumps(out.private_reference, sort_keys=True, ensure_ascii=False)}
                    )
            elif out.outcome is Outcome.QUARANTINED:
                buf["quarantine"].append(
                    {
                        "item_index": index,
                        "item_id": item.item_id,
                        "uri": item.uri,
                        "reason": reason,
                        "detail": out.detail,
                        "raw_sha256": None if item.content is None else sha256_bytes(item.content),
                    }
                )
            outcomes[outcome] = outcomes.get(outcome, 0) + 1
            reasons[(outcome, reason)] = reasons.get((outcome, reason), 0) + 1
            n += 1
            if n % batch_size == 0:
                flush()
                now = time.monotonic()
                if log and now - last_log >= 10:
                    log(f"canonicalize {snapshot}: {n} items ({n / (now - started):.1f} items/s), outcomes {outcomes}")
                    last_log = now
        flush()
        version = w.commit(
            extra_manifest={
                "items_in": n,
                "outcomes": dict(sorted(outcomes.items())),
                "policy_version": policy_id,
            }
        )
    if log:
        log(f"canonicalize {snapshot}: {n} items in {time.monotonic() - started:.1f}s: {outcomes}")
    return CanonicalSummary(version, policy_id, n, outcomes, reasons, langs, schemas)
