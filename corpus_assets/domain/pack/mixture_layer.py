"""The ``mixture_plan`` layer of a release: the ordered sampling plan of its training split.

One unit per kept training record from ``token_views``, keyed by source (or, with ``key: tag``,
by domain tag), with its *packable* token count (the single view, or a preference record's
``chosen`` view). Without a ``mixture`` section the plan is the natural distribution read once.
Tables: ``plan`` (the draws) and ``sources`` (target vs realized shares, epochs, weights).

Units, defaults and tables: docs/packing.md#mixture-plan-layer
"""

from __future__ import annotations

from typing import Optional, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from corpus_assets.domain.core.arrow_columns import sorted_groups
from corpus_assets.domain.storage.layer_store import LayerStore, LayerVersion
from corpus_assets.domain.pack.mixture import MIXTURE_PLAN_SCHEMA, MixtureSpec, SourceUnits, build_plan, mixture_spec_version
from corpus_assets.domain.layers.decisions import DECISIONS_TABLE, decisions_from_columns
from corpus_assets.domain.layers.registry import MIXTURE_PLAN, MIXTURE_SOURCES_SCHEMA, layer

# 2: the per-source ``sources`` table; 3: the decisions table; 4: narrow tables in 65536-row groups
MIXTURE_LAYER_VERSION = "mixture-layer-4"
MIXTURE_TABLES = layer(MIXTURE_PLAN).table_specs()


def sources_table(report: dict) -> pa.Table:
    """The ``sources`` table of a plan report (sorted by source name)."""
    rows = []
    for name, r in sorted(report.get("sources", {}).items()):
        rows.append({
            "source": name, "key": report.get("key"), "unit": report.get("unit"),
            **{f: r.get(f) for f in MIXTURE_SOURCES_SCHEMA.names if f not in ("source", "key", "unit", "epoch_limit")},
            "epoch_limit": report.get("epoch_limit"),
        })
    return pa.Table.from_pylist(rows, schema=MIXTURE_SOURCES_SCHEMA)


def packable_views(views: pa.Table | pa.RecordBatch) -> pa.Table | pa.RecordBatch:
    """One row per record: the view packing uses (the only view, or ``chosen`` of a preference
    pair). Works on a whole table or on one batch of it."""
    return views.filter(packable_mask(views.column("variant")))


def packable_mask(variant) -> pa.Array:
    """Per view, whether packing uses it: no variant, or the ``chosen`` one of a preference pair."""
    return pc.fill_null(pc.equal(variant, "chosen"), True)


def default_spec(n_train_records: int) -> MixtureSpec:
    return MixtureSpec(unit="documents", alpha=1.0, budget=max(n_train_records, 1), replacement=False)


_VIEW_COLUMNS = ["record_id", "variant", "split", "source_id", "snapshot", "domain", "n_tokens"]


def training_units(
    views: pa.Table, train_split: str, key: str, declared: Sequence[str] = ()
) -> dict[str, SourceUnits]:
    """{source or tag: SourceUnits} of the training split's packable views (rows of token_views'
    ``views`` table with ``_VIEW_COLUMNS``). Every name in
    ``declared`` (the sources the release spec names) and every source/tag with views in any
    split is present, empty when it has no training record — so a weight on it is reported as a
    zero-size source, not as an unknown one."""
    col = "source_id" if key == "source" else "domain"
    names = set(pc.unique(views.column(col)).to_pylist())
    if key == "source":
        names |= set(declared)
    t = packable_views(views.filter(pc.fill_null(pc.equal(views.column("split"), train_split), False)))
    # one sort by (source, record id), then a slice per source: columns, no dict per record
    found = {name: SourceUnits(g.column("record_id"), np.asarray(g.column("n_tokens").to_numpy(), dtype=np.int64))
             for name, g in sorted_groups(t.select(["record_id", col, "n_tokens"]), col, ["record_id"]).items()}
    empty = SourceUnits([], np.zeros(0, np.int64))
    return {name: found.get(name, empty) for name in sorted(names, key=lambda k: (k is not None, k))}


def build_mixture_plan(
    store: LayerStore,
    release: str,
    spec: Optional[MixtureSpec],
    *,
    token_views: LayerVersion,
    train_split: str = "train",
    declared_sources: Sequence[str] = (),
) -> tuple[LayerVersion, dict]:
    views = token_views.read_table("views", columns=_VIEW_COLUMNS)  # once, for the units and the decisions
    units = training_units(views, train_split, spec.key if spec is not None else "source", declared_sources)
    if not any(u.n_records for u in units.values()):
        # An evaluation-only release (or a tiny one): nothing to sample. Validation and test are
        # still packed; the empty plan is reported, not hidden.
        if spec is None:
            spec = default_spec(0)
        table = MIXTURE_PLAN_SCHEMA.empty_table()
        report = {"spec_version": mixture_spec_version(spec), "unit": spec.unit, "key": spec.key, "budget": spec.budget,
                  "draws": 0, "tokens": 0, "phases": [], "sources": {},
                  "warnings": [f"the {train_split!r} split has no records: the plan is empty"]}
    else:
        if spec is None:
            spec = default_spec(sum(u.n_records for u in units.values()))
            units = {k: u for k, u in units.items() if u.n_records}
        plan = build_plan(spec, units)
        table = plan.to_table()
        report = plan.report()
    build = {
        "code_version": MIXTURE_LAYER_VERSION,
        "spec": spec.model_dump(mode="json"),
        "spec_version": mixture_spec_version(spec),
        "token_views_version": token_views.content_digest,
        "train_split": train_split,
    }
    with store.new_version(MIXTURE_PLAN, release, MIXTURE_TABLES, build) as w:
        w.write("plan", table)
        w.write("sources", sources_table(report))
        w.write(DECISIONS_TABLE, _decisions(views, table, train_split, build["spec_version"]))
        version = w.commit(extra_manifest={"report": report})
    return version, report


def _decisions(views: pa.Table, plan: pa.Table, train_split: str, policy_version: str) -> pa.Table:
    """How often each record with views is read: a training record as often as the plan draws it
    (never: rejected, ``mixture.not_drawn``), a validation or test record once, in natural order.
    tokens_in = its packable tokens, tokens_out = tokens_in x reads (what packing is given)."""
    views = packable_views(views.select(_VIEW_COLUMNS))
    train = pc.fill_null(pc.equal(views.column("split"), train_split), False)
    if plan.num_rows:  # draws per record, looked up in Arrow (no dict per record)
        drawn = pc.value_counts(plan.column("record_id"))
        at = pc.index_in(views.column("record_id"), value_set=drawn.field("values"))
        draws = pc.fill_null(pc.take(drawn.field("counts"), at), 0)
    else:
        draws = pa.repeat(pa.scalar(0, pa.int64()), views.num_rows)
    reads = pc.if_else(train, pc.cast(draws, pa.int64()), pa.scalar(1, pa.int64()))
    read = pc.greater(reads, 0)
    times = pc.if_else(pc.equal(reads, 1), " time", " times")
    detail = pc.if_else(train, pc.if_else(read, pc.binary_join_element_wise("drawn ", pc.cast(reads, pa.string()), times, ""),
                                          "not drawn by the plan"),
                        "not mixed: read once in natural order")
    tokens = pc.cast(views.column("n_tokens"), pa.int64())
    return decisions_from_columns(
        views.num_rows, stage="mixture", record_id=views.column("record_id"), source_id=views.column("source_id"),
        snapshot=views.column("snapshot"), split=views.column("split"), domain=views.column("domain"),
        action=pc.if_else(read, "accept", "reject"), reason=pc.if_else(read, "ok", "mixture.not_drawn"),
        detail=detail, policy_version=policy_version, tokens_in=tokens, tokens_out=pc.multiply(tokens, reads),
    )
