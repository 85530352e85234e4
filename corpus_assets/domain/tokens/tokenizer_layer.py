"""The ``tokenizer`` layer of a release: its frozen tokenizer, named by its digest.

Loaded from a tokenizer.json, trained (byte-level BPE) on the texts of the release's kept
*training-split* records only, so tokenizer learning never sees validation or test data, or
taken from a published build (``from_build``). With ``freeze: true`` a release trains once: later
builds keep the stored version (same digest, so cached token views still match) while the
training settings are unchanged, and retrain — saying why — when they change. Each version's
manifest says where its tokenizer came from (``provenance``); ``tokenizer_info`` turns that into
the release manifest's ``tokenizer`` section.

Details: docs/tokens.md#tokenizer-layer
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Optional

import pyarrow.compute as pc
from pydantic import ValidationError

from corpus_assets.domain.core.arrow_columns import sorted_groups
from corpus_assets.domain.core.data_root import DataRoot
from corpus_assets.domain.core.errors import CorpusError
from corpus_assets.domain.storage.layer_store import LayerStore, LayerVersion
from corpus_assets.domain.tokens.tokenizer import (
    TRAINING_SETTINGS,
    FrozenTokenizer,
    TokenizerSpec,
    load_tokenizer,
    thaw_tokenizer,
    train_bpe,
)
from corpus_assets.domain.layers.registry import CURATED_RECORDS, TOKENIZER, layer

TOKENIZER_LAYER_CODE_VERSION = "release-layers-1"

TOKENIZER_TABLES = layer(TOKENIZER).table_specs()

# provenance["how"] of a stored version; a release manifest adds "frozen" (trained by an earlier build)
LOADED, TRAINED, FROM_BUILD, FROZEN = "loaded", "trained", "from_build", "frozen"


class TokenizerSourceError(CorpusError, ValueError):
    """The tokenizer a spec points at (``from_build``, or the frozen one) is missing or does not verify."""


@dataclass(frozen=True)
class TokenizerBuild:
    version: LayerVersion
    tokenizer: FrozenTokenizer
    how: str  # loaded | trained | frozen (the stored trained version reused) | from_build
    note: str  # one line for the log: what was done, and why


@dataclass(frozen=True)
class TrainingTexts:
    """The texts of the kept records assigned to the training split, streamed snapshot by snapshot
    (never all in memory: the BPE trainer keeps word counts, not texts). BPE training depends on
    the texts, not their order (checked: a shuffled corpus gives the same digest), so streaming in
    file order trains the tokenizer a record-id-ordered list did."""

    store: LayerStore
    wanted: dict  # snapshot -> Arrow array of its training record ids
    count: int

    def __iter__(self) -> Iterator[str]:
        for snap in sorted(self.wanted):
            ids = self.wanted[snap]
            cur = self.store.require_current(CURATED_RECORDS, snap)
            # which rows are wanted: one lookup over the snapshot's ids (not a hash of ``ids`` per batch)
            wanted = pc.is_in(cur.read_table("records", columns=["record_id"]).column(0), value_set=ids).combine_chunks()
            seen = start = 0
            for b in cur.iter_batches("records", columns=["text"]):
                mine = b.filter(wanted.slice(start, b.num_rows))
                start += b.num_rows
                seen += mine.num_rows
                yield from mine.column(0).to_pylist()
            if seen != len(ids):
                raise ValueError(f"tokenizer training: {len(ids) - seen} training record(s) of {snap} have no curated text "
                                 "(curated_records changed after splits?); rebuild the release")


def training_texts(store: LayerStore, splits: LayerVersion, train_split: str = "train") -> TrainingTexts:
    """The kept records of ``splits`` assigned to ``train_split``, as texts to stream."""
    t = splits.read_table("assignments", columns=["record_id", "snapshot", "kept", "split"])
    t = t.filter(pc.and_(pc.fill_null(t.column("kept"), False), pc.fill_null(pc.equal(t.column("split"), train_split), False)))
    wanted = {snap: g.column("record_id").combine_chunks() for snap, g in sorted_groups(t, "snapshot").items()}
    return TrainingTexts(store, wanted, t.num_rows)


def stored_tokenizer(version: LayerVersion, *, expected_digest: Optional[str] = None) -> FrozenTokenizer:
    """The tokenizer a ``tokenizer`` version holds, re-frozen with the spec it was frozen with and
    checked against the digest its row, its manifest (and ``expected_digest``, when given) record;
    a ``TokenizerSourceError`` naming the version otherwise."""
    where = f"tokenizer/{version.partition} version {version.version}"
    rows = version.read_table("tokenizer").to_pylist()
    if len(rows) != 1:
        raise TokenizerSourceError(f"{where}: holds {len(rows)} tokenizer rows, expected 1")
    recorded = {rows[0]["digest"], version.manifest.get("tokenizer_digest")} | ({expected_digest} if expected_digest else set())
    if len(recorded) != 1:
        raise TokenizerSourceError(f"{where}: the recorded digests disagree ({', '.join(sorted(map(str, recorded)))})")
    try:
        spec = TokenizerSpec.model_validate(version.manifest["tokenizer_spec"])
        return thaw_tokenizer(rows[0]["tokenizer_json"], spec, expected_digest=rows[0]["digest"])
    except (KeyError, ValidationError, ValueError) as exc:
        raise TokenizerSourceError(f"{where}: does not verify: {exc}") from None


def _provenance(version: LayerVersion) -> dict:
    """``provenance`` of a stored version (versions written before it existed: from the old keys)."""
    m = version.manifest
    if "provenance" in m:
        return dict(m["provenance"])
    if m.get("loaded_from"):
        return {"how": LOADED, "loaded_from": m["loaded_from"]}
    return {"how": TRAINED, "release": version.partition, "splits_version": m.get("splits_version"),
            "training_records": m.get("training_records")}


def _settings_change(current: LayerVersion, spec: TokenizerSpec) -> Optional[str]:
    """Why the current version cannot stand for ``spec``'s trained tokenizer, or None if it can."""
    prov = _provenance(current)
    if prov["how"] != TRAINED:
        made = f"loaded from {prov.get('loaded_from')}" if prov["how"] == LOADED else f"taken from build {prov.get('from_build')}"
        return f"the stored tokenizer was {made}, not trained by this release"
    try:
        stored = TokenizerSpec.model_validate(current.manifest["tokenizer_spec"]).training_settings()
    except (KeyError, ValidationError) as exc:
        return f"the stored tokenizer's settings cannot be read ({exc})"
    wanted = spec.training_settings()
    changed = [f"{k}: {json.dumps(stored[k], sort_keys=True)} -> {json.dumps(wanted[k], sort_keys=True)}"
               for k in TRAINING_SETTINGS if stored[k] != wanted[k]]
    return "training settings changed: " + "; ".join(changed) if changed else None


def build_tokenizer(
    store: LayerStore,
    release: str,
    spec: TokenizerSpec,
    *,
    splits: LayerVersion,
    base_dir: Optional[Path] = None,
    releases_root: Optional[Path] = None,
    before_training: Optional[Callable[[], None]] = None,
) -> TokenizerBuild:
    """Make (or keep) the release's tokenizer version. ``releases_root`` (default: the data
    root's ``releases/``) is where ``from_build`` finds the named build. ``before_training`` is
    called when a tokenizer is about to be trained (the only long case), e.g. to say so."""
    if spec.from_build is not None:
        return _from_build(store, release, spec, Path(releases_root) if releases_root is not None else store.root.releases)
    if spec.path is not None:
        frozen = load_tokenizer(spec, base_dir=base_dir)
        version = _write(store, release, spec.model_dump(mode="json"), frozen,
                         {"how": LOADED, "loaded_from": str(spec.path)}, {"loaded_from": str(spec.path)})
        return TokenizerBuild(version, frozen, LOADED, f"loaded {spec.path}")
    retrain_reason = None
    current = store.current(TOKENIZER, release) if spec.freeze else None
    if current is not None:
        retrain_reason = _settings_change(current, spec)
        if retrain_reason is None:
            try:
                frozen = stored_tokenizer(current)
            except TokenizerSourceError as exc:
                raise TokenizerSourceError(f"release {release!r}: the frozen tokenizer does not verify, so it is not "
                                           f"replaced silently ({exc}); restore it, or remove 'freeze' to retrain") from None
            prov = _provenance(current)
            return TokenizerBuild(current, frozen, FROZEN if prov.get("splits_version") != splits.content_digest else TRAINED,
                                  f"frozen: reusing version {current.version} (digest {frozen.digest[:16]}, trained on splits "
                                  f"{str(prov.get('splits_version'))[:16]}, {prov.get('training_records')} records); not retrained")
    if before_training is not None:
        before_training()
    texts = training_texts(store, splits)
    if not texts.count:
        raise ValueError(f"release {release!r}: the training split is empty; nothing to train a tokenizer on")
    frozen = train_bpe(iter(texts), spec)
    legacy = {"trained_on": "train split", "training_records": texts.count, "splits_version": splits.content_digest}
    prov = {"how": TRAINED, "release": release, "splits_version": splits.content_digest, "training_records": texts.count,
            "freeze": spec.freeze}
    note = f"trained on {texts.count} training records"
    if retrain_reason is not None:
        prov["retrained_because"] = retrain_reason
        prov["replaces"] = {"tokenizer_digest": current.manifest.get("tokenizer_digest"), "version": current.content_digest}
        note += f"; the frozen tokenizer {current.version} was replaced: {retrain_reason}"
    elif spec.freeze:
        note += "; frozen: later builds reuse it while the training settings are unchanged"
    return TokenizerBuild(_write(store, release, spec.model_dump(mode="json"), frozen, prov, legacy), frozen, TRAINED, note)


def _write(store: LayerStore, release: str, spec_json: dict, frozen: FrozenTokenizer, provenance: dict,
           legacy: dict) -> LayerVersion:
    build = {"code_version": TOKENIZER_LAYER_CODE_VERSION, "tokenizer_digest": frozen.digest, **legacy}
    if provenance["how"] == FROM_BUILD:
        build["from_build"] = provenance["from_build"]
    with store.new_version(TOKENIZER, release, TOKENIZER_TABLES, build) as w:
        w.write("tokenizer", [{"digest": frozen.digest, "tokenizer_json": frozen.to_json()}])
        # (same content as a stored version, e.g. a rebuild that trained the same tokenizer: that
        # version, with its manifest, stays; the layer store never rewrites a version)
        return w.commit(extra_manifest={"tokenizer_digest": frozen.digest, "vocab_size": frozen.vocab_size,
                                        "eos_id": frozen.eos_id, **legacy, "provenance": provenance,
                                        "tokenizer_spec": spec_json})


def _read_build_file(store: LayerStore, releases_root: Path, release: str, build_id: str, name: str) -> Optional[bytes]:
    local = releases_root / release / build_id / name
    if local.is_file():
        return local.read_bytes()
    if store.remote is not None:
        return store.remote.read_bytes(f"{DataRoot.release_key(release, build_id)}/{name}")
    return None


def _from_build(store: LayerStore, release: str, spec: TokenizerSpec, releases_root: Path) -> TokenizerBuild:
    src_release, build_id = spec.build_ref()
    what = f"tokenizer.from_build {spec.from_build}"
    raw = _read_build_file(store, releases_root, src_release, build_id, "manifest.json")
    if raw is None:
        raise TokenizerSourceError(f"{what}: release {src_release!r} has no published build {build_id} "
                                   f"(no {releases_root / src_release / build_id / 'manifest.json'})")
    revoked = _read_build_file(store, releases_root, src_release, build_id, "REVOKED.json")
    if revoked is not None:
        note = json.loads(revoked)
        raise TokenizerSourceError(f"{what}: that build was revoked after deletion request(s) "
                                   f"{', '.join(note.get('request_ids', []))}; its successor is "
                                   f"{note.get('successor_build_id')}")
    manifest = json.loads(raw)
    digest = manifest.get("tokenizer", {}).get("digest")
    content = manifest.get("layer_versions", {}).get(TOKENIZER)
    if not digest or not content:
        raise TokenizerSourceError(f"{what}: the build's manifest names no tokenizer digest or tokenizer layer version")
    try:
        source = store.open_version(TOKENIZER, src_release, content[:16])
    except FileNotFoundError:
        raise TokenizerSourceError(f"{what}: the tokenizer version {content[:16]} that build was made with is no longer "
                                   f"stored under layers/{TOKENIZER}/{src_release}/ (dropped after a deletion, or by "
                                   "retention), so it cannot be verified and is not used") from None
    if source.content_digest != content:
        raise TokenizerSourceError(f"{what}: stored tokenizer version {source.version} has content digest "
                                   f"{source.content_digest}, the build recorded {content}")
    try:
        frozen = stored_tokenizer(source, expected_digest=digest)
    except TokenizerSourceError as exc:
        raise TokenizerSourceError(f"{what}: {exc}") from None
    prov = {"how": FROM_BUILD, "from_build": spec.from_build, "release": src_release, "build_id": build_id,
            "tokenizer_version": content, "source": _provenance(source)}
    version = _write(store, release, source.manifest["tokenizer_spec"], frozen, prov, {})
    return TokenizerBuild(version, frozen, FROM_BUILD,
                          f"taken from build {src_release}@{build_id[:16]} (tokenizer version {source.version}, digest "
                          f"{frozen.digest[:16]}, verified)")


def tokenizer_info(version: LayerVersion, splits_version: str) -> dict[str, Any]:
    """The release manifest's ``tokenizer`` section for a build made of ``version`` and the splits
    version ``splits_version``: digest, vocabulary size, origin (one line) and provenance — where
    the token ids come from (``how``: loaded / trained on this build's training split / frozen,
    i.e. trained by an earlier build of the release on the splits version named / from_build)."""
    m = version.manifest
    prov = _provenance(version)
    out: dict[str, Any] = {"how": prov["how"], "tokenizer_version": version.content_digest}
    origin = prov
    if prov["how"] == FROM_BUILD:
        out.update(from_build=prov["from_build"], tokenizer_version=prov["tokenizer_version"])
        origin = prov.get("source", {})
    if origin.get("how") == LOADED:
        out["loaded_from"] = origin.get("loaded_from")
    elif origin.get("how") == TRAINED:
        out.update(release=origin.get("release"), trained_on_splits_version=origin.get("splits_version"),
                   training_records=origin.get("training_records"))
        if prov["how"] == TRAINED and origin.get("splits_version") != splits_version:
            out["how"] = FROZEN  # trained by an earlier build: this build's splits are not what it learnt from
    if prov.get("retrained_because") and out["how"] == TRAINED:
        out["retrained_because"] = prov["retrained_because"]
    return {"digest": m["tokenizer_digest"], "vocab_size": m["vocab_size"], "origin": _origin_line(out),
            "provenance": {k: v for k, v in out.items() if v is not None}}


def _origin_line(p: Mapping[str, Any]) -> str:
    learnt = (f"loaded from {p.get('loaded_from')}" if p.get("loaded_from") is not None else
              f"trained on the train split of release {p.get('release')} (splits {str(p.get('trained_on_splits_version'))[:16]}, "
              f"{p.get('training_records')} records)")
    if p["how"] == FROM_BUILD:
        return f"from build {p['from_build']}: {learnt}"
    if p["how"] == FROZEN:
        return f"frozen: {learnt} by an earlier build"
    if p["how"] == TRAINED:
        return (f"trained on this build's train split ({p.get('training_records')} records)"
                + (f"; retrained: {p['retrained_because']}" if p.get("retrained_because") else ""))
    return learnt
