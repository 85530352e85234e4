"""The ``dedup_clusters`` layer of a release: exact and near-duplicate clusters over its snapshots.

A release:
1. selects its snapshots (release spec) and the copies it sees (``release_view``: each source
   as of its latest selected snapshot, sources allowing the release's uses); every copy left
   out gets a decision with its reason;
2. exact dedup over dedup keys, collisions ruled out by comparing normalized bytes, every alias
   kept (``aliases`` table), representative by the stable total order
   (governance eligibility, quality, source priority, resolved path before a symlinked copy,
   the source's primary locale before other locales, record id: ``representative_order_key``);
3. near dedup among the exact representatives: LSH band by band, candidates verified by real
   Jaccard over shingle sets, Algorithm 18.1 in the same total order (``sharded_near_dedup`` on
   the release engine);
4. leakage groups = connected components of verified near edges, exact aliases joining their
   representative's group.

Inputs are columns, never a Python object per record (``release_inputs``): the light columns in
memory, signatures of the exact representatives in an on-disk matrix, texts read only for
records whose dedup key is shared and for LSH candidates. Scratch files live in a locked
``.tmp-scratch-*`` directory of the release's partition, removed when the build ends.
"""

from __future__ import annotations

import json
import re
import shutil
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Iterator, Mapping, Optional

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pydantic import BaseModel, ConfigDict, Field

from corpus_assets.domain.core.compute import Engine
from corpus_assets.domain.core.hashing import canonical_digest, dedup_normal_form
from corpus_assets.domain.core.progress import SUBPHASE_QUIET_S, Progress
from corpus_assets.domain.dedup.band_key_cache import BAND_KEYS_TABLE, band_key_rows, band_keys_record, known_band_keys
from corpus_assets.domain.dedup.exact import exact_arrays, split_by_bytes
from corpus_assets.domain.dedup.lsh import LshPolicy
from corpus_assets.domain.dedup.minhash import MinHashPolicy, minhash_policy_version
from corpus_assets.domain.dedup.release_inputs import ReleaseInputs, load_release_inputs, order_rank, write_signature_rows
from corpus_assets.domain.dedup.pair_memo import PairMemo, key_words, verdict_table, write_memo
from corpus_assets.domain.dedup.release_view import STAGE_OF, SUPERSEDED, release_view
from corpus_assets.domain.dedup.sharded import SignatureFile, sharded_near_dedup
from corpus_assets.domain.dedup.text_verifier import TextPairVerifier
from corpus_assets.domain.layers.decisions import DECISIONS_TABLE, decisions_from_columns
from corpus_assets.domain.layers.registry import BAND_KEYS_SCHEMA, CLUSTERS_SCHEMA, DEDUP_CLUSTERS, layer
from corpus_assets.domain.storage.dir_locks import new_staging_dir, unlock
from corpus_assets.domain.storage.layer_store import LayerStore, LayerVersion

# 2: the decisions table; 3: the release view (snapshot rule, uses); 4: path preferences in the order;
# 5: narrow tables in 65536-row groups, the band_keys table
DEDUP_CODE_VERSION = "dedup-5"


class ReleaseDedupPolicy(BaseModel):
    """The ``dedup`` section of a release spec."""

    model_config = ConfigDict(extra="forbid")
    exact: bool = True
    lsh: LshPolicy = Field(default_factory=LshPolicy)  # lsh.threshold is also tau of Algorithm 18.1
    shards: int = Field(
        default=1, ge=1, le=4096,
        description="LSH bucket shards near dedup splits its work into (an execution setting: the clusters "
                    "are the same for every value, so it is in neither the dedup build spec nor the build id)")

    def build_record(self) -> dict:
        """What decides the clusters: the policy without its execution settings (``shards``)."""
        return self.model_dump(mode="json", exclude={"shards"})


DEDUP_TABLES = layer(DEDUP_CLUSTERS).table_specs()
VERDICTS_TABLE = "pair_verdicts"


@dataclass
class DedupSummary:
    version: LayerVersion
    snapshots: list[str]
    records: int
    superseded: int
    exact: dict
    near_removed: int
    candidates: int
    lsh: dict
    cluster_sizes: dict[int, int] = field(default_factory=dict)
    largest: list[tuple[str, int]] = field(default_factory=list)
    memo_hits: int = 0  # candidate pairs whose Jaccard came from the previous build's pair_verdicts


def _eligible(governance_json: str) -> bool:
    gov = json.loads(governance_json)
    return bool(gov.get("license")) and bool(gov.get("rights_evidence"))


def via_symlink(record_id: str, group_id: Optional[str]) -> bool:
    """A local file captured through a symlink: canonicalization gives it the group of the file's
    own (resolved) path, ``doc:<source>:<resolved path>``, not ``doc:<record id>``."""
    return bool(group_id) and group_id.startswith("doc:") and group_id != "doc:" + record_id


_PATH_PARTS_RE = re.compile(r"[/.]")


def in_locale(record_id: str, source_id: str, locale: Optional[str]) -> bool:
    """Whether the record's path (its id after ``<source>:``) names ``locale``: a folder or a dotted
    part equal to it, or one of its regional forms either way (``en`` matches ``en-US/``,
    ``en_GB``, ``index.html.en``; ``en-US`` matches ``en/``). No locale declared: every path is in it."""
    if not locale:
        return True
    want = locale.lower().replace("_", "-")
    for part in _PATH_PARTS_RE.split(record_id[len(source_id) + 1:].lower()):
        part = part.replace("_", "-")
        if part and (part == want or part.startswith(want + "-") or want.startswith(part + "-")):
            return True
    return False


def representative_order_key(
    row: Mapping, source_priority: Mapping[str, int], primary_locales: Mapping[str, str] = {}
) -> tuple:
    """The stable total order of Algorithm 18.1 (smaller first): governance eligibility, quality
    (not scored yet: 0), source priority, a resolved path before a copy reached through a symlink,
    the source's primary locale before other paths, record id (unique: the order is total)."""
    rid, src = row["record_id"], row["source_id"]
    return (
        0 if _eligible(row["governance_json"]) else 1,
        0,
        source_priority.get(src, 1_000_000),
        1 if via_symlink(rid, row.get("group_id")) else 0,
        0 if in_locale(rid, src, primary_locales.get(src)) else 1,
        rid,
    )




CHUNK = 65536  # output rows built and written at a time
# normalized text split by bytes at once (one key bucket; polars' grouping holds about 3x that);
# the UTF-8 size is bounded by 4 bytes a character, so ASCII buckets hold about a quarter of it
EXACT_TEXT_BUDGET = 128 << 20
EXACT_MAX_BUCKETS = 256  # open spill files at once
KINDS = pa.array(["representative", "exact", "near"], pa.string())
_REP, _EXACT, _NEAR = 0, 1, 2
_ACTIONS = pa.array(["accept", "reject", "reject"], pa.string())
_REASONS = pa.array(["ok", "dedup.exact_duplicate", "dedup.near_duplicate"], pa.string())
_DETAIL_PREFIX = pa.array(["", "exact copy of ", "near duplicate of "], pa.string())


@contextmanager
def _scratch(store: LayerStore, release: str) -> Iterator[Path]:
    """A locked scratch directory in the release's partition of ``dedup_clusters`` (the store's
    cleanup removes it if this process dies), deleted afterwards."""
    parent = store.partition_dir(DEDUP_CLUSTERS, release)
    parent.mkdir(parents=True, exist_ok=True)
    tmp, fd = new_staging_dir(parent, prefix=".tmp-scratch-")
    try:
        yield tmp
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        unlock(fd)


def _normal_forms(inputs: ReleaseInputs, indices: np.ndarray,
                  progress: Optional[Progress] = None) -> Iterator[tuple[np.ndarray, list[str]]]:
    """Dedup normal forms of the given records, a row group of texts at a time."""
    domain = inputs.records.column("domain")
    for idx, rows in inputs.read_rows(indices, "curated", ["text"], progress):
        doms = domain.take(pa.array(idx)).cast(pa.string()).to_pylist()
        yield idx, [dedup_normal_form(t, d) for t, d in zip(rows.column("text").to_pylist(), doms)]


def _split_exact(inputs: ReleaseInputs, cand: np.ndarray, rank: np.ndarray, scratch: Path,
                 log: Optional[Callable[[str], None]], label: str) -> tuple[np.ndarray, np.ndarray]:
    """Representatives of the records whose dedup key is shared, by their normalized bytes. The
    texts are spilled to key-bucket Parquet files so one bucket's texts are in memory at a time."""
    chars = int(inputs.column("char_count")[cand].sum())
    buckets = min(EXACT_MAX_BUCKETS, max(1, -(-chars * 4 // EXACT_TEXT_BUDGET)))
    keys = inputs.records.column("dedup_key").take(pa.array(cand))
    bucket = (pl.from_arrow(keys).hash(seed=0) % buckets).to_numpy().astype(np.int64)
    schema = pa.schema([("idx", pa.int64()), ("key", pa.string()), ("rank", pa.int64()), ("normal", pa.large_string())])
    paths = [scratch / f"exact-{b:04d}.parquet" for b in range(buckets)]
    writers = [pq.ParquetWriter(p, schema, compression="lz4") for p in paths]
    progress = Progress(log, f"{label}: texts of shared dedup keys read", total=int(cand.size),
                        quiet_below=SUBPHASE_QUIET_S) if log else None
    try:
        for idx, forms in _normal_forms(inputs, cand, progress):
            at = np.searchsorted(cand, idx)
            b = bucket[at]
            t = pa.table({"idx": pa.array(idx, pa.int64()), "key": keys.take(pa.array(at)).combine_chunks(),
                          "rank": pa.array(rank[idx]), "normal": pa.array(forms, pa.large_string())}, schema=schema)
            for k in np.unique(b).tolist():
                writers[k].write_table(t.filter(pa.array(b == k)))
    finally:
        for w in writers:
            w.close()
    if progress is not None:
        progress.finish()
    out_idx, out_rep = [], []
    for p in paths:
        i, r = split_by_bytes(pq.read_table(p))
        out_idx.append(i)
        out_rep.append(r)
        p.unlink()
    idx, rep = np.concatenate(out_idx), np.concatenate(out_rep)
    if idx.size != cand.size:
        raise RuntimeError(f"{label}: {cand.size - idx.size} texts of shared dedup keys were not found")
    return idx, rep


EXACT_MEMO = "exact_memo"  # manifest key: the curated versions whose byte classes the build's aliases hold


def _known_classes(previous: Optional[LayerVersion], inputs: ReleaseInputs, cand: np.ndarray) -> np.ndarray:
    """Per record of ``cand`` (records whose dedup key is shared): its byte class in the previous
    build, as an int label (the previous exact representative), or -1 when it must be read.

    A copy is known when the previous build had the same record id from the same snapshot, under
    the same dedup key, and that snapshot's curated records are the same version (content digest,
    recorded under ``exact_memo``): its normalized bytes are then the ones the previous build
    compared, and records of one key with one label held equal bytes, with different labels
    different bytes (the aliases' exact representatives). A build with exact dedup off, another
    dedup code version or no ``exact_memo`` knows nothing."""
    unknown = np.full(cand.size, -1, dtype=np.int64)
    if previous is None or not cand.size:
        return unknown
    spec = previous.manifest.get("build_spec", {})
    if spec.get("code_version") != DEDUP_CODE_VERSION or not (spec.get("policy") or {}).get("exact", False):
        return unknown
    prev_curated = (previous.manifest.get(EXACT_MEMO) or {}).get("curated") or {}
    same = [v.partition for v in inputs.curated if prev_curated.get(v.partition) == v.content_digest]
    if not same:
        return unknown
    cur = inputs.rows_of(cand, same, ("record_id", "snapshot", "dedup_key"))
    if not cur.height:
        return unknown
    clusters = pl.from_arrow(previous.read_table("clusters", columns=["record_id", "snapshot"]))
    aliases = pl.from_arrow(previous.read_table("aliases", columns=["dedup_key", "representative_id", "record_id"]))
    prev = clusters.join(aliases, on="record_id", how="inner")
    hit = cur.join(prev, on=["record_id", "snapshot", "dedup_key"], how="inner")
    if not hit.height:
        return unknown
    labels = hit.get_column("representative_id").cast(pl.Categorical).to_physical().cast(pl.Int64).to_numpy()
    unknown[hit.get_column("at").to_numpy()] = labels
    return unknown


def _split_known(inputs: ReleaseInputs, cand: np.ndarray, rank: np.ndarray, labels: np.ndarray,
                 read: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray, int]:
    """:func:`split_by_bytes`'s ``(idx, rep)`` for ``cand``, reading only what the previous build's
    byte classes (``labels``, -1: unknown) do not settle: in a key with an unknown record, that
    record and the first-ranked record of each known class of the key. Every other record takes
    the representative of its class's first-ranked record; a key whose records are all known
    needs no text. Returns ``(idx, rep, texts read)``."""
    keys = inputs.records.column("dedup_key").take(pa.array(cand)).combine_chunks().cast(pa.string())
    df = pl.DataFrame({"at": np.arange(cand.size, dtype=np.int64), "key": keys, "rank": rank[cand], "label": labels})
    partial_keys = df.filter(pl.col("label") < 0).get_column("key").unique()
    df = df.with_columns(pl.col("key").is_in(partial_keys.implode()).alias("partial"))
    lead = (df.filter(pl.col("label") >= 0).sort("rank").group_by(["key", "label"], maintain_order=True)
            .agg(pl.col("at").first().alias("lead")))
    df = df.join(lead, on=["key", "label"], how="left").sort("at")
    at = df.get_column("at").to_numpy()
    label = df.get_column("label").to_numpy()
    partial = df.get_column("partial").to_numpy()
    lead_at = df.get_column("lead").fill_null(-1).to_numpy()
    to_read = partial & ((label < 0) | (lead_at == at))
    rep = np.empty(cand.size, dtype=np.int64)
    known_whole = ~partial
    rep[known_whole] = cand[lead_at[known_whole]]
    if to_read.any():
        idx_r, rep_r = read(cand[to_read])
        rep_of = dict(zip(idx_r.tolist(), rep_r.tolist()))
        read_at = np.flatnonzero(to_read)
        rep[read_at] = [rep_of[int(i)] for i in cand[read_at]]
        follow = np.flatnonzero(partial & ~to_read)  # known, not the first of its class: its class's rep
        rep[follow] = [rep_of[int(i)] for i in cand[lead_at[follow]]]
    return cand, rep, int(to_read.sum())


def build_dedup(
    store: LayerStore,
    release: str,
    snapshots: list[str],
    policy: ReleaseDedupPolicy,
    minhash: MinHashPolicy,
    source_priority: dict[str, int],
    *,
    rule: str = "latest",
    incremental_sources: Iterable[str] = (),
    allowed_uses: Optional[Mapping[str, Iterable[str]]] = None,
    uses: Iterable[str] = (),
    log: Optional[Callable[[str], None]] = None,
    primary_locales: Optional[Mapping[str, str]] = None,
    engine: Optional[Engine] = None,
    shards: Optional[int] = None,
    previous: Optional[LayerVersion] = None,
) -> DedupSummary:
    """Cluster the copies the release sees (``release_view``: each source as of its latest selected
    snapshot under rule ``latest``; ``union`` keeps every record id's newest accepted copy).
    ``primary_locales``: source -> locale its representatives should be in (local_dir's
    ``primary_locale``). ``engine`` runs the near-dedup tasks (default: in process) in ``shards``
    bucket shards (default ``policy.shards``); neither changes a byte of the result. ``previous``:
    the release's current dedup version, whose ``pair_verdicts`` spare this build the texts and the
    verification of candidate pairs it already verified (``pair_memo``; the result is the same)."""
    primary_locales = dict(sorted((primary_locales or {}).items()))
    engine = engine or Engine()
    shards = policy.shards if shards is None else shards
    label = f"dedup {release}"
    started = time.monotonic()
    view = release_view(store, snapshots, rule=rule, incremental_sources=incremental_sources,
                        allowed_uses=allowed_uses, uses=uses)
    superseded = [e for e in view.excluded if e.reason == SUPERSEDED]
    if log and view.excluded:
        log(f"{label}: {len(view.excluded)} copies left out by the snapshot rule {rule!r} and the release's uses: "
            + ", ".join(f"{r} {n}" for r, n in sorted(view.counts.items())))
    with _scratch(store, release) as scratch:
        inputs = load_release_inputs(store, snapshots, view, log=log, label=label)
        n = inputs.n
        records = inputs.records
        rank = order_rank(pl.from_arrow(records.select(["record_id", "source_id", "eligible", "group_id"])),
                          source_priority, primary_locales)
        texts_read = {}

        def split_shared(cand: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            known = _known_classes(previous, inputs, cand)
            idx, rep, texts_read["read"] = _split_known(
                inputs, cand, rank, known, lambda rows: _split_exact(inputs, rows, rank, scratch, log, label))
            texts_read["shared"], texts_read["known"] = int(cand.size), int((known >= 0).sum())
            return idx, rep

        ex = exact_arrays(pl.from_arrow(records.column("dedup_key")), rank, split_shared, enabled=policy.exact)
        exact_rep = ex.representative
        reps = np.flatnonzero(exact_rep == np.arange(n))
        if log:
            shared = (f" ({texts_read['shared']} share a dedup key: {texts_read['known']} in byte classes the previous "
                      f"build verified, {texts_read['read']} texts read)" if texts_read else "")
            log(f"{label}: {n} records from {len(snapshots)} snapshots; {reps.size} after exact dedup{shared}")

        # near dedup among exact representatives: signature rows = reps in record-index order
        lsh = policy.lsh if policy.lsh.num_perm == minhash.num_perm else policy.lsh.model_copy(update={"num_perm": minhash.num_perm})
        bands, band_rows = lsh.params()
        # band keys the previous build made from the same signatures: their rows' signatures are
        # not read (unless a bucket cap needs them for pivots)
        known_keys, known = known_band_keys(previous, inputs, reps, bands, band_rows, scratch,
                                            needs_signatures=lsh.bucket_cap is not None)
        complete = known_keys.signatures_complete
        progress = Progress(log, f"{label}: signatures of exact representatives", total=int(reps.size - known.sum()),
                            quiet_below=SUBPHASE_QUIET_S) if log else None
        sig_path = scratch / "signatures.npy"
        # the near-dedup tasks read the file: from this machine's page cache unless the cluster is remote
        write_signature_rows(inputs, reps, sig_path, minhash.num_perm, progress,
                             flush=engine.kind not in ("synchronous", "local"),
                             only=None if complete else np.flatnonzero(~known))
        if progress is not None:
            progress.finish()
        del known
        order = np.argsort(rank[reps], kind="stable").astype(np.int64)

        def rep_normal_forms(rows: np.ndarray) -> Iterator[tuple[np.ndarray, list[str]]]:
            fetched = Progress(log, f"{label}: texts of LSH candidates read", total=int(rows.size),
                               quiet_below=SUBPHASE_QUIET_S) if log else None
            for idx, forms in _normal_forms(inputs, reps[rows], fetched):
                yield np.searchsorted(reps, idx), forms
            if fetched is not None:
                fetched.finish()

        row_keys = key_words(records.column("dedup_key").take(pa.array(reps)))
        # how many pairs it spared is in the near-dedup candidates line
        memo = _previous_memo(previous, row_keys, minhash, scratch / "memo")
        # this build's band keys, for the next: spilled in row order, written with the version
        keys_spill = scratch / "band-keys.arrow"
        with pa.ipc.new_file(str(keys_spill), BAND_KEYS_SCHEMA) as spill:
            result = sharded_near_dedup(
                SignatureFile(str(sig_path)), order, lsh, TextPairVerifier(rep_normal_forms, minhash),
                workdir=scratch / "near", shards=shards, engine=engine, log=log, memo=memo, verdicts=True,
                known_keys=known_keys,
                on_row_keys=lambda lo, hi, keys: spill.write_table(band_key_rows(inputs, reps[lo:hi], keys)))
        verdicts = verdict_table(row_keys, *result.verdicts)
        del row_keys

        # final representative, kind and leakage group per record
        final_rep = np.arange(n, dtype=np.int64)
        final_j = np.ones(n, dtype=np.float64)
        kind = np.full(n, _REP, dtype=np.int8)
        group = np.arange(n, dtype=np.int64)
        near_rep = reps[np.asarray(result.representative, dtype=np.int64)]
        final_rep[reps] = near_rep
        final_j[reps] = np.asarray(result.rep_jaccard, dtype=np.float64)
        kind[reps[near_rep != reps]] = _NEAR
        group[reps] = reps[np.asarray(result.component, dtype=np.int64)]
        dup = np.flatnonzero(exact_rep != np.arange(n))
        e = exact_rep[dup]
        final_rep[dup] = final_rep[e]
        final_j[dup] = np.where(final_rep[e] == e, 1.0, final_j[e])
        kind[dup] = _EXACT
        group[dup] = group[e]

        ids = records.column("record_id").combine_chunks()
        sizes = np.bincount(final_rep, minlength=n)
        size_hist = {int(s): int(c) for s, c in zip(*np.unique(sizes[sizes > 0], return_counts=True))}
        big = np.flatnonzero(sizes > 1)
        big = big[np.lexsort((big, -sizes[big]))][:10]  # record-index order is record-id order
        largest = [(ids[int(i)].as_py(), int(sizes[i])) for i in big]
        kept = int((kind == _REP).sum())

        build_spec = {
            "code_version": DEDUP_CODE_VERSION,
            "snapshots": sorted(snapshots),
            "signatures": inputs.signature_digests,
            "policy": policy.build_record(),
            "snapshot_rule": rule,
            "uses": list(view.uses),
            "lsh": result.policy,
            "minhash_policy": minhash_policy_version(minhash),
            # what decides representatives besides the records themselves
            "representative_order": {"source_priority": dict(sorted(source_priority.items())),
                                     "primary_locales": primary_locales},
        }
        policy_version = canonical_digest(build_spec)[:16]
        with store.new_version(DEDUP_CLUSTERS, release, DEDUP_TABLES, build_spec) as w:
            _write_clusters(w, records, ids, final_rep, final_j, kind, group)
            _write_aliases(w, records, ids, exact_rep, ex.alias_order)
            _write_edges(w, ids, reps, result.edges, result.edge_jaccard)
            w.write("superseded", pa.table({"record_id": [e.record_id for e in superseded],
                                            "snapshot": [e.snapshot for e in superseded],
                                            "superseded_by": [e.superseded_by for e in superseded]},
                                           schema=DEDUP_TABLES["superseded"].schema))
            _write_decisions(w, records, ids, kind, final_rep, final_j, view.excluded, inputs.left_out, policy_version)
            w.write(VERDICTS_TABLE, verdicts)
            with pa.ipc.open_file(pa.memory_map(str(keys_spill))) as spilled:
                for i in range(spilled.num_record_batches):
                    w.write(BAND_KEYS_TABLE, spilled.get_batch(i))
            version = w.commit(
                extra_manifest={
                    VERDICTS_TABLE: {"shingling": minhash_policy_version(minhash), "pairs": verdicts.num_rows},
                    BAND_KEYS_TABLE: band_keys_record(bands, band_rows),
                    EXACT_MEMO: {"curated": {v.partition: v.content_digest for v in inputs.curated}},
                    "records": n,
                    "exact": ex.summary,
                    "near_removed": result.removed,
                    "candidates": result.candidates,
                    "kept": kept,
                    "left_out": dict(sorted(view.counts.items())),
                    "policy_digest": policy_version,
                }
            )
    if log:
        log(f"{label}: done in {time.monotonic() - started:.1f}s; exact removed {ex.summary['duplicates_removed']}, "
            f"near removed {result.removed}, {result.candidates} candidate pairs")
    return DedupSummary(
        version, sorted(snapshots), n, len(superseded), ex.summary, result.removed, result.candidates,
        {**result.policy, "stats": asdict(result.stats)},
        dict(sorted(size_hist.items())), largest, memo_hits=result.memo_hits,
    )


def _previous_memo(previous: Optional[LayerVersion], row_keys: np.ndarray, minhash: MinHashPolicy,
                   workdir: Path) -> Optional[PairMemo]:
    """The previous build's verdicts as a memo for these signature rows, if it kept them under the
    same shingling (a version written before ``pair_verdicts`` existed has none)."""
    if previous is None or VERDICTS_TABLE not in previous.manifest.get("tables", {}):
        return None
    if (previous.manifest.get(VERDICTS_TABLE) or {}).get("shingling") != minhash_policy_version(minhash):
        return None
    return write_memo(previous.read_table(VERDICTS_TABLE), row_keys, workdir)


def _chunks(n: int) -> Iterator[tuple[int, int]]:
    for lo in range(0, n, CHUNK):
        yield lo, min(n, lo + CHUNK)


def _str(col, lo: int, hi: int) -> pa.Array:
    return col.slice(lo, hi - lo).combine_chunks().cast(pa.string())


def _write_clusters(w, records: pa.Table, ids: pa.Array, final_rep, final_j, kind, group) -> None:
    for lo, hi in _chunks(records.num_rows):
        w.write("clusters", pa.table({
            "record_id": ids.slice(lo, hi - lo),
            "source_id": _str(records.column("source_id"), lo, hi),
            "snapshot": _str(records.column("snapshot"), lo, hi),
            "representative_id": ids.take(pa.array(final_rep[lo:hi])),
            "kind": KINDS.take(pa.array(kind[lo:hi])),
            "jaccard": pa.array(final_j[lo:hi], pa.float64()),
            "group_id": ids.take(pa.array(group[lo:hi])),
        }, schema=CLUSTERS_SCHEMA))


def _write_aliases(w, records: pa.Table, ids: pa.Array, exact_rep: np.ndarray, alias_order: np.ndarray) -> None:
    """:func:`exact.alias_rows` order: groups by (key, representative's rank), members by rank."""
    keys, sources = records.column("dedup_key"), records.column("source_id")
    for lo, hi in _chunks(alias_order.size):
        a = alias_order[lo:hi]
        at = pa.array(a)
        w.write("aliases", pa.table({
            "dedup_key": keys.take(at).combine_chunks().cast(pa.string()),
            "representative_id": ids.take(pa.array(exact_rep[a])),
            "record_id": ids.take(at),
            "source_id": sources.take(at).combine_chunks().cast(pa.string()),
            "is_representative": pa.array(exact_rep[a] == a),
        }, schema=DEDUP_TABLES["aliases"].schema))


def _write_edges(w, ids: pa.Array, reps: np.ndarray, edges: np.ndarray, edge_j: np.ndarray) -> None:
    edges = np.asarray(edges, dtype=np.int64).reshape(-1, 2)
    schema = DEDUP_TABLES["edges"].schema
    if not edges.shape[0]:
        w.write("edges", schema.empty_table())
    for lo, hi in _chunks(edges.shape[0]):
        w.write("edges", pa.table({
            "record_id": ids.take(pa.array(reps[edges[lo:hi, 0]])),
            "neighbour_id": ids.take(pa.array(reps[edges[lo:hi, 1]])),
            "jaccard": pa.array(np.asarray(edge_j[lo:hi], dtype=np.float64)),
        }, schema=schema))


def _write_decisions(w, records: pa.Table, ids: pa.Array, kind: np.ndarray, final_rep: np.ndarray,
                     final_j: np.ndarray, excluded: list, left_out: pa.Table, policy_version: str) -> None:
    """The dedup stage's decision per input copy: every accepted copy of the release's snapshots,
    the copies it clusters in record-id order, then the copies the release view leaves out."""
    for lo, hi in _chunks(records.num_rows):
        k = pa.array(kind[lo:hi])
        chars = records.column("char_count").slice(lo, hi - lo).combine_chunks()
        rep_ids = pc.if_else(pa.array(kind[lo:hi] == _REP), pa.scalar("", pa.string()), ids.take(pa.array(final_rep[lo:hi])))
        near = np.flatnonzero(kind[lo:hi] == _NEAR)
        suffix = [""] * (hi - lo)
        for i, j in zip(near.tolist(), final_j[lo:hi][near].tolist()):
            suffix[i] = f" (J={j:.3f})"
        w.write(DECISIONS_TABLE, decisions_from_columns(
            hi - lo,
            stage="dedup",
            record_id=ids.slice(lo, hi - lo),
            source_id=_str(records.column("source_id"), lo, hi),
            snapshot=_str(records.column("snapshot"), lo, hi),
            schema_type=_str(records.column("schema_type"), lo, hi),
            domain=_str(records.column("domain"), lo, hi),
            lang=_str(records.column("lang"), lo, hi),
            action=_ACTIONS.take(k),
            reason=_REASONS.take(k),
            detail=pc.binary_join_element_wise(_DETAIL_PREFIX.take(k), rep_ids, pa.array(suffix, pa.string()), ""),
            policy_version=policy_version,
            chars_in=chars,
            chars_out=pc.if_else(pa.array(kind[lo:hi] == _REP), chars, pa.scalar(0, chars.type)),
        ))
    for lo, hi in _chunks(len(excluded)):
        part = excluded[lo:hi]
        w.write(DECISIONS_TABLE, decisions_from_columns(
            hi - lo,
            stage=[STAGE_OF[e.reason] for e in part],
            record_id=[e.record_id for e in part],
            source_id=_str(left_out.column("source_id"), lo, hi),
            snapshot=_str(left_out.column("snapshot"), lo, hi),
            schema_type=_str(left_out.column("schema_type"), lo, hi),
            domain=_str(left_out.column("domain"), lo, hi),
            lang=_str(left_out.column("lang"), lo, hi),
            action="reject",
            reason=[e.reason for e in part],
            detail=[e.detail for e in part],
            policy_version=policy_version,
            chars_in=left_out.column("char_count").slice(lo, hi - lo).combine_chunks(),
            chars_out=0,
        ))
