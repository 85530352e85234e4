"""The dedup layer's columnar, streaming inputs (issue 18): the same tables as before, byte for byte.

``tests/dedup_baseline_9f61c01.py`` is ``build_dedup`` as it was when it loaded every record into
Python dicts; on a small varied release (exact and near copies across sources, a dedup-key
collision, symlinked copies, locales, ineligible governance, empty texts, code, superseded, absent
and refused copies, a source whose uses do not cover the release) both give the same files. The
columnar order equals ``representative_order_key`` (the reference definition) on varied rows.
"""

from __future__ import annotations

import json
import re
import sys
from collections import Counter
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import dedup_baseline_9f61c01 as baseline  # noqa: E402
from dedup_layers_fixture import GOV_MISSING, GOV_OK, record_row, write_snapshot  # noqa: E402

from corpus_assets.domain.core.compute import Engine  # noqa: E402
from corpus_assets.domain.core.keys import snapshot_key  # noqa: E402
from corpus_assets.domain.dedup.clusters_layer import (  # noqa: E402
    DEDUP_TABLES, ReleaseDedupPolicy, build_dedup, representative_order_key,
)
from corpus_assets.domain.dedup.minhash import MinHashPolicy, exact_jaccard, text_shingle_hashes  # noqa: E402
from corpus_assets.domain.core.hashing import dedup_normal_form  # noqa: E402
from corpus_assets.domain.dedup.release_inputs import eligible_column, order_rank  # noqa: E402
from corpus_assets.domain.dedup.text_verifier import ShingleSets, TextPairVerifier  # noqa: E402
from corpus_assets.domain.layers.registry import DEDUP_CLUSTERS  # noqa: E402
from corpus_assets.domain.storage.layer_store import LayerStore  # noqa: E402

T0 = datetime(2026, 11, 29, 14, 0, tzinfo=timezone.utc)
MINHASH = MinHashPolicy(num_perm=64)
GC = ("The garbage collector in CPython complements reference counting by finding reference cycles. Objects that "
      "refer to each other in a loop never reach a reference count of zero, so the cycle detector periodically walks "
      "the container objects of each generation and frees whatever is unreachable from outside the group.")
VENV = ("A virtual environment isolates the packages of one project from every other project on the same machine. It "
        "holds its own interpreter link, its own site packages folder and its own scripts, so installing a library for "
        "one application never changes what another application imports.")
CACHE = ("This document supplements the mod_cache, mod_cache_disk, mod_file_cache and htcacheclean reference "
         "documentation. It describes how to use the caching features of the server to accelerate web and proxy "
         "serving, while avoiding common problems and misconfigurations of the cache.")
CODE = "def f(x):\n    return x + 1\n\n\ndef g(y):\n    return f(y) * 2\n"
ITER = ("Iterators are lazy. The itertools module builds new iterators out of old ones without materializing anything: "
        "chain glues sequences end to end, islice takes a window, groupby collects runs of equal keys.")


def _near(text: str, k: int) -> str:
    """The text with word ``k`` changed: a near copy (Jaccard of 5-word shingles well above 0.5)."""
    words = text.split(" ")
    words[k] = words[k].upper() + "X"
    return " ".join(words)


def _release(store: LayerStore) -> dict:
    """Snapshots of four sources; returns build_dedup's keyword arguments for them."""
    a_old, a_new = snapshot_key("site_a", T0), snapshot_key("site_a", T0 + timedelta(hours=1))
    b, web, priv = (snapshot_key(s, T0 + timedelta(minutes=5)) for s in ("site_b", "web", "private"))
    write_snapshot(store, a_old, [[
        record_row("site_a:old.html", "site_a", a_old, ITER),  # superseded by the copy in a_new
        record_row("site_a:gone.html", "site_a", a_old, "Only the older snapshot has this page at all."),
        record_row("site_a:refused.html", "site_a", a_old, "Refused when the newer snapshot was canonicalized."),
    ]], MINHASH)
    write_snapshot(store, a_new, [[
        record_row("site_a:old.html", "site_a", a_new, ITER + " Updated."),
        record_row("site_a:en/gc.html", "site_a", a_new, GC),
        record_row("site_a:da/gc.html", "site_a", a_new, GC, group_id="doc:site_a:en/gc.html"),  # symlink to en/
        record_row("site_a:de/gc.html", "site_a", a_new, "  " + GC.upper() + "  "),  # same normal form
        record_row("site_a:cache.html.en", "site_a", a_new, CACHE),
        record_row("site_a:cache.html.fr", "site_a", a_new, _near(CACHE, 3)),
        record_row("site_a:en_GB/cache.html", "site_a", a_new, _near(CACHE, 7)),
        record_row("site_a:code.py", "site_a", a_new, CODE, domain="code", lang="und"),
        record_row("site_a:empty-1", "site_a", a_new, ""),
        record_row("site_a:empty-2", "site_a", a_new, ""),
        # a forged dedup-key collision: different texts under one key stay apart
        dict(record_row("site_a:collide-1", "site_a", a_new, "First text of the colliding pair, about caching."),
             dedup_key="f" * 64),
        dict(record_row("site_a:collide-2", "site_a", a_new, "Second text, nothing like the first one at all."),
             dedup_key="f" * 64),
    ]], MINHASH, refused={"site_a:refused.html": "quality.too_short"})
    write_snapshot(store, b, [[
        record_row("site_b:gc", "site_b", b, GC),  # site_b has the better priority: its copy wins
        record_row("site_b:gc-unlicensed", "site_b", b, GC, governance_json=GOV_MISSING),
        record_row("site_b:venv", "site_b", b, VENV),
        record_row("site_b:venv-near", "site_b", b, _near(VENV, 10)),
        record_row("site_b:code.py", "site_b", b, CODE.replace("\n", "\r\n"), domain="code", lang="und"),
        record_row("site_b:empty", "site_b", b, "", governance_json=GOV_MISSING),
    ]], MINHASH)
    write_snapshot(store, web, [[
        record_row("web:venv", "web", web, _near(VENV, 20)),
        record_row("web:gc", "web", web, GC, governance_json=GOV_MISSING),
        record_row("web:x", "web", web, "A page only the crawl has, about something else entirely, for the record."),
    ]], MINHASH)
    write_snapshot(store, priv, [[record_row("private:gc", "private", priv, GC)]], MINHASH)
    return dict(
        snapshots=[a_old, a_new, b, web, priv],
        source_priority={"site_b": 1, "site_a": 2},
        allowed_uses={"private": ["evaluation"], "site_a": ["pretraining"]},
        uses=["pretraining"],
        primary_locales={"site_a": "en"},
    )


def _files(version) -> dict:
    return {name: [(f["path"], f["sha256"]) for f in t["files"]] for name, t in version.manifest["tables"].items()}


@pytest.mark.parametrize("exact,tiny", [(True, False), (False, False), (True, True)])
def test_streaming_build_gives_the_tables_the_dict_build_gave(tmp_path, monkeypatch, exact, tiny):
    if tiny:  # output written 3 rows at a time, shared-key texts spilled to one bucket per ~16 characters
        from corpus_assets.domain.dedup import clusters_layer

        monkeypatch.setattr(clusters_layer, "CHUNK", 3)
        monkeypatch.setattr(clusters_layer, "EXACT_TEXT_BUDGET", 64)
    home_old, home_new = tmp_path / "old", tmp_path / "new"
    kwargs = _release(LayerStore(home_old))
    _release(LayerStore(home_new))
    policy = ReleaseDedupPolicy(exact=exact, lsh={"threshold": 0.5, "num_perm": 64, "bands": 16, "rows": 4})
    old = baseline.build_dedup(LayerStore(home_old), "r1", kwargs["snapshots"],
                               baseline.ReleaseDedupPolicy(**policy.build_record()), MINHASH, **kwargs_less(kwargs))
    lines: list[str] = []
    new = build_dedup(LayerStore(home_new), "r1", kwargs["snapshots"], policy.model_copy(update={"shards": 3}),
                      MINHASH, **kwargs_less(kwargs), log=lines.append)
    # every table file byte for byte, and the manifest (build spec, counts, policy digest), but the
    # pair_verdicts the baseline never kept (checked against real Jaccard below)
    assert _without_verdicts(_files(new.version)) == _without_verdicts(_files(old.version))
    assert _manifest_without_verdicts(new.version) == _manifest_without_verdicts(old.version)
    _assert_verdicts_are_real_jaccard(new.version, LayerStore(home_new), kwargs["snapshots"])
    _assert_band_keys_are_the_signatures_keys(new.version, LayerStore(home_new), policy.lsh)
    assert (new.records, new.superseded, new.exact, new.near_removed, new.candidates, new.cluster_sizes, new.largest) == (
        old.records, old.superseded, old.exact, old.near_removed, old.candidates, old.cluster_sizes, old.largest)
    assert new.lsh == old.lsh

    # and the facts the release relies on, read from the new tables
    clusters = {r["record_id"]: r for r in new.version.read_table("clusters").to_pylist()}
    assert "private:gc" not in clusters and "site_a:gone.html" not in clusters
    assert clusters["site_a:old.html"]["snapshot"].startswith("site_a.20261129T15")  # the newer copy
    assert not any(p.name.startswith(".tmp-scratch-") for p in LayerStore(home_new).partition_dir(DEDUP_CLUSTERS, "r1").iterdir())
    if exact:
        assert clusters["site_b:gc"]["kind"] == "representative"
        for rid in ("site_a:en/gc.html", "site_a:da/gc.html", "site_a:de/gc.html", "site_b:gc-unlicensed", "web:gc"):
            assert (clusters[rid]["kind"], clusters[rid]["representative_id"]) == ("exact", "site_b:gc")
        assert clusters["site_a:collide-2"]["kind"] == "representative" == clusters["site_a:collide-1"]["kind"]
        assert clusters["site_a:empty-1"]["kind"] == "representative" and clusters["site_a:empty-2"]["kind"] == "exact"
        assert clusters["site_a:cache.html.en"]["kind"] == "representative"
        assert clusters["site_a:cache.html.fr"]["kind"] == "near"
        assert clusters["site_a:cache.html.fr"]["representative_id"] == "site_a:cache.html.en"
        # CRLF is unified in code's normal form; site_b's priority wins
        assert (clusters["site_a:code.py"]["kind"], clusters["site_a:code.py"]["representative_id"]) == ("exact", "site_b:code.py")
    decisions = new.version.read_table("decisions")
    assert decisions.num_rows == len(clusters) + sum(new.version.manifest["left_out"].values())
    assert any("whose texts are read" in line for line in lines)


def _without_verdicts(files: dict) -> dict:
    return {k: v for k, v in files.items() if k not in ("pair_verdicts", "band_keys")}


def _manifest_without_verdicts(version) -> dict:
    """The manifest but what the baseline never kept: the pair verdicts, the band keys and the
    exact memo's curated versions."""
    m = {k: v for k, v in version.manifest.items()
         if k not in ("pair_verdicts", "band_keys", "exact_memo", "content_digest", "version")}
    m["tables"] = _without_verdicts(m["tables"])
    return m


def _texts_by_key(store: LayerStore, snapshots: list[str]) -> dict:
    """128-bit key words -> the normal forms of the curated records with that dedup key, and
    record id -> key words."""
    from corpus_assets.domain.dedup.pair_memo import key_words
    from corpus_assets.domain.layers.registry import CURATED_RECORDS

    out: dict = {}
    ids: dict = {}
    for snap in snapshots:
        t = store.require_current(CURATED_RECORDS, snap).read_table("records", ["record_id", "dedup_key", "text", "domain"])
        for rid, (k0, k1), text, domain in zip(t.column("record_id").to_pylist(), key_words(t.column("dedup_key")).tolist(),
                                               t.column("text").to_pylist(), t.column("domain").to_pylist()):
            out.setdefault((k0, k1), set()).add(dedup_normal_form(text, domain))
            ids[rid] = (k0, k1)
    return out, ids


def _assert_band_keys_are_the_signatures_keys(version, store: LayerStore, lsh) -> None:
    """Every band_keys row: one exact representative (the representatives of the clusters table
    not removed as exact copies), keyed by lsh.band_keys from its stored signature."""
    from corpus_assets.domain.dedup.lsh import band_keys
    from corpus_assets.domain.layers.registry import MINHASH_SIGNATURES

    bands, rows = lsh.params()
    assert version.manifest["band_keys"] == {"bands": bands, "rows": rows, "code_version": lsh.record()["code_version"]}
    got = version.read_table("band_keys").to_pylist()
    clusters = version.read_table("clusters").to_pylist()
    assert [(r["snapshot"], r["record_id"]) for r in got] == [
        (c["snapshot"], c["record_id"]) for c in clusters if c["kind"] != "exact"]
    for r in got:
        sigs = store.current(MINHASH_SIGNATURES, r["snapshot"])
        (row,) = [x for x in sigs.read_table("signatures").to_pylist() if x["record_id"] == r["record_id"]]
        dtype = np.dtype(sigs.manifest.get("signature_dtype") or "uint64")
        want = band_keys(np.frombuffer(row["signature"], dtype=dtype)[None, :], bands, rows)[0]
        assert np.frombuffer(r["keys"], dtype="<u8").tolist() == want.tolist(), r["record_id"]


def _assert_verdicts_are_real_jaccard(version, store: LayerStore, snapshots: list[str]) -> None:
    """Every pair_verdicts row: the real Jaccard of the two records with those keys, keys ordered,
    rows sorted and distinct; every verified edge between records of unshared keys is there."""
    v = version.read_table("pair_verdicts").to_pylist()
    by_key, key_of = _texts_by_key(store, snapshots)
    rows = [((r["a0"], r["a1"]), (r["b0"], r["b1"])) for r in v]
    assert rows == sorted(set(rows)) and all(a <= b for a, b in rows)
    for r, (a, b) in zip(v, rows):
        (fa,), (fb,) = by_key[a], by_key[b]  # one normal form per key (a forged collision never enters)
        want = exact_jaccard(text_shingle_hashes(fa, MINHASH), text_shingle_hashes(fb, MINHASH))
        assert r["jaccard"] == want
    assert version.manifest["pair_verdicts"]["pairs"] == len(v)
    clustered = version.read_table("clusters", ["record_id"]).column("record_id").to_pylist()
    shared = {k for k, n in Counter(key_of[r] for r in clustered).items() if n > 1}
    found = dict(zip(rows, (r["jaccard"] for r in v)))
    edges = version.read_table("edges").to_pylist()
    for e in edges:
        a, b = sorted((key_of[e["record_id"]], key_of[e["neighbour_id"]]))
        if a not in shared and b not in shared:
            assert found[(a, b)] == e["jaccard"]
    assert len(v) > 0


def _candidate_texts_read(lines: list[str]) -> int:
    """How many records' texts a build read for LSH candidates (their shingle sets), from its log."""
    (line,) = [x for x in lines if "whose texts are read" in x]
    return int(re.search(r"naming (\d+) records, whose texts are read", line).group(1))


def kwargs_less(kwargs: dict) -> dict:
    return {k: v for k, v in kwargs.items() if k != "snapshots"}


def test_shards_and_workers_never_enter_the_build_spec(tmp_path):
    kwargs = _release(LayerStore(tmp_path))
    store = LayerStore(tmp_path)
    one = build_dedup(store, "r1", kwargs["snapshots"], ReleaseDedupPolicy(), MINHASH, **kwargs_less(kwargs))
    many = build_dedup(store, "r1", kwargs["snapshots"], ReleaseDedupPolicy(shards=16), MINHASH,
                       **kwargs_less(kwargs), engine=Engine(workers=1))
    assert "shards" not in one.version.manifest["build_spec"]["policy"]
    assert many.version.manifest == one.version.manifest and many.version.version == one.version.version


# ------------------------------------------------------------------------------------------------
# the columnar order is the reference order


def test_columnar_order_equals_representative_order_key():
    gov_ok, gov_no = GOV_OK, GOV_MISSING
    gov_empty_list = json.dumps({"license": "MIT", "rights_evidence": []})
    rows = []
    paths = ["en/a.html", "da/a.html", "a.html.en", "a.html.fr", "en_GB/a.html", "EN-us/b.html", "x/y/z", "en-US",
             "fr/en.txt", "de.html", "énglish/a", "en", ""]
    for k, path in enumerate(paths):
        for src in ("site_a", "site_b", "web", "loc_us"):
            rid = f"{src}:{path}" if path else f"{src}:"
            group = None if k % 3 == 0 else (f"doc:{src}:en/{path}" if k % 3 == 1 else f"doc:{rid}")
            gov = (gov_ok, gov_no, gov_empty_list)[(k + len(src)) % 3]
            rows.append({"record_id": rid, "source_id": src, "governance_json": gov, "group_id": group})
    priority = {"site_a": 2, "site_b": 1, "loc_us": 5}
    locales = {"site_a": "en", "loc_us": "en-US", "web": ""}
    expected = sorted(range(len(rows)), key=lambda i: representative_order_key(rows[i], priority, locales))
    table = pa.Table.from_pylist(rows)
    frame = pl.from_arrow(table.drop_columns(["governance_json"])).with_columns(
        pl.from_arrow(eligible_column(table.column("governance_json"))).alias("eligible"))
    rank = order_rank(frame, priority, locales)
    assert np.argsort(rank).tolist() == expected
    # every key matters somewhere in these rows
    keys = [representative_order_key(r, priority, locales) for r in rows]
    for pos in (0, 2, 3, 4):
        assert len({k[pos] for k in keys}) > 1


def test_order_refuses_a_record_id_used_twice():
    frame = pl.DataFrame({"record_id": ["a:1", "a:1"], "source_id": ["a", "a"], "eligible": [True, True],
                          "group_id": [None, None]})
    with pytest.raises(ValueError, match="'a:1' is used twice"):
        order_rank(frame, {})


# ------------------------------------------------------------------------------------------------
# the verifier the near-dedup tasks call


def test_shingle_sets_give_the_jaccard_of_the_texts_and_survive_pickling(tmp_path):
    import pickle

    texts = [GC, _near(GC, 4), VENV, "", "short text", _near(VENV, 2)]
    forms = [dedup_normal_form(t, "prose") for t in texts]

    def normal_forms(rows):  # two batches, out of order, as row groups of several snapshots come
        rows = np.asarray(rows)
        for part in (rows[::-1][:2], rows[::-1][2:]):
            yield part, [forms[i] for i in part.tolist()]

    needed = np.array([0, 1, 2, 3, 5], dtype=np.int64)
    ready = pickle.loads(pickle.dumps(TextPairVerifier(normal_forms, MINHASH).prepare(needed, tmp_path / "v")))
    assert isinstance(ready, ShingleSets)
    pairs = np.array([[0, 1], [2, 5], [0, 2], [3, 0], [1, 0]], dtype=np.int64)
    want = [exact_jaccard(text_shingle_hashes(forms[i], MINHASH), text_shingle_hashes(forms[j], MINHASH)) for i, j in pairs]
    assert ready.jaccard_many(pairs).tolist() == want
    assert want[0] > 0.5 and want[2] < 0.2 and want[3] == 0.0
    with pytest.raises(ValueError, match="row 4"):
        ready.jaccard_many(np.array([[0, 4]]))


def test_dedup_tables_are_the_layer_tables():
    assert set(DEDUP_TABLES) == {"clusters", "aliases", "edges", "superseded", "pair_verdicts", "band_keys", "decisions"}


def _rebuild_and_fresh(store: LayerStore, fresh_store: LayerStore, snapshots: list, policy, kwargs: dict):
    """The release rebuilt over ``snapshots`` with its current version as ``previous``, and built
    from nothing in ``fresh_store``: the same files and manifest. Returns both builds and their logs."""
    lines: list[str] = []
    again = build_dedup(store, "r1", snapshots, policy, MINHASH, **kwargs_less(kwargs), log=lines.append,
                        previous=store.current(DEDUP_CLUSTERS, "r1"))
    fresh_lines: list[str] = []
    fresh = build_dedup(fresh_store, "r1", snapshots, policy, MINHASH, **kwargs_less(kwargs), log=fresh_lines.append)
    assert _files(again.version) == _files(fresh.version)
    assert again.version.manifest == fresh.version.manifest
    return again, lines, fresh, fresh_lines


@pytest.mark.parametrize("shards", [1, 3])
def test_a_rebuild_reuses_the_previous_verdicts_and_writes_the_same_bytes(tmp_path, shards):
    """A release rebuilt after a new snapshot arrives, with the previous version's pair_verdicts as
    its memo, writes the same files as a build with no previous version; the pairs it knew were
    neither read nor verified again, and the new records' pairs were."""
    from corpus_assets.domain.core.keys import snapshot_key as skey

    homes = {k: tmp_path / k for k in ("inc", "fresh")}
    late = skey("web", T0 + timedelta(hours=3))
    for home in homes.values():
        kwargs = _release(LayerStore(home))
    policy = ReleaseDedupPolicy(lsh={"threshold": 0.5, "num_perm": 64, "bands": 16, "rows": 4}, shards=shards)
    store = LayerStore(homes["inc"])
    first = build_dedup(store, "r1", kwargs["snapshots"], policy, MINHASH, **kwargs_less(kwargs))
    assert first.memo_hits == 0 and first.candidates > 0
    added = [record_row("web:venv-2", "web", late, _near(VENV, 30)), record_row("web:gc-2", "web", late, _near(GC, 5)),
             record_row("web:y", "web", late, "Another page only the crawl has, about nothing the others cover.")]
    snapshots = kwargs["snapshots"] + [late]
    for home in homes.values():
        write_snapshot(LayerStore(home), late, [added], MINHASH)
    again, lines, fresh, fresh_lines = _rebuild_and_fresh(store, LayerStore(homes["fresh"]), snapshots, policy, kwargs)
    assert fresh.memo_hits == 0 and 0 < again.memo_hits < again.candidates
    assert any(f"({again.memo_hits} known from the previous build's " in line for line in lines)
    # texts are read only for the records the unknown pairs name: fewer than a build without verdicts reads
    assert 0 < _candidate_texts_read(lines) < _candidate_texts_read(fresh_lines)
    _assert_verdicts_are_real_jaccard(again.version, LayerStore(homes["inc"]), snapshots)


def _keyed_before(lines: list[str]) -> int:
    (line,) = [x for x in lines if x.startswith("near dedup:") and " bands x " in x]
    return int(re.search(r"rows \((\d+) keyed by the previous build\)", line).group(1))


@pytest.mark.parametrize("cap", [None, 2])
def test_a_rebuild_keys_only_the_signatures_it_has_not_keyed_before(tmp_path, cap):
    """After a new snapshot, the rebuild takes the band keys of every representative the previous
    build keyed from the same signatures (the new snapshot's are computed) and writes the same
    files as a fresh build, also under a bucket cap (whose pivots read every signature). Keys
    stored under other signatures or other LSH parameters are not taken; the ones it takes really
    decide the candidates (a forged table changes them)."""
    from corpus_assets.domain.core.keys import snapshot_key as skey

    homes = {k: tmp_path / k for k in ("inc", "fresh")}
    late = skey("web", T0 + timedelta(hours=3))
    for home in homes.values():
        kwargs = _release(LayerStore(home))
    policy = ReleaseDedupPolicy(lsh={"threshold": 0.5, "num_perm": 64, "bands": 16, "rows": 4, "bucket_cap": cap})
    store = LayerStore(homes["inc"])
    first = build_dedup(store, "r1", kwargs["snapshots"], policy, MINHASH, **kwargs_less(kwargs)).version
    added = [record_row("web:venv-2", "web", late, _near(VENV, 30)), record_row("web:z", "web", late, ITER)]
    snapshots = kwargs["snapshots"] + [late]
    for home in homes.values():
        write_snapshot(LayerStore(home), late, [added], MINHASH)
    again, lines, fresh, fresh_lines = _rebuild_and_fresh(store, LayerStore(homes["fresh"]), snapshots, policy, kwargs)
    before = {(r["snapshot"], r["record_id"]) for r in first.read_table("band_keys", ["snapshot", "record_id"]).to_pylist()}
    now = [(r["snapshot"], r["record_id"]) for r in again.version.read_table("band_keys", ["snapshot", "record_id"]).to_pylist()]
    assert _keyed_before(fresh_lines) == 0
    assert _keyed_before(lines) == sum(1 for k in now if k in before) == len(now) - len(added) > 0
    if cap is not None:
        return

    def forged(name: str, keys: bytes, spec_changes: dict = {}, record_changes: dict = {}):
        """``first`` with every band key replaced by ``keys`` (and its build spec or key record changed)."""
        t = first.read_table("band_keys")
        spec = {**first.manifest["build_spec"], **spec_changes}
        with store.new_version(DEDUP_CLUSTERS, name, {"band_keys": DEDUP_TABLES["band_keys"]}, spec) as w:
            w.write("band_keys", t.set_column(2, "keys", pa.array([keys] * t.num_rows, pa.binary())))
            return w.commit(extra_manifest={"band_keys": {**first.manifest["band_keys"], **record_changes}})

    one_bucket = np.ones(16, dtype="<u8").tobytes()  # every known representative in one bucket per band
    lines = []
    used = build_dedup(store, "r1", snapshots, policy, MINHASH, **kwargs_less(kwargs), log=lines.append,
                       previous=forged("forged", one_bucket))
    assert _keyed_before(lines) > 0 and used.candidates > fresh.candidates
    for name, spec_changes, record_changes in (
        ("other-signatures", {"signatures": {k: "0" * 64 for k in first.manifest["build_spec"]["signatures"]}}, {}),
        ("other-rows", {}, {"rows": 5}),
        ("other-code", {}, {"code_version": "lsh-0"}),
    ):
        lines = []
        ignored = build_dedup(store, "r1", snapshots, policy, MINHASH, **kwargs_less(kwargs), log=lines.append,
                              previous=forged(name, one_bucket, spec_changes, record_changes))
        assert _keyed_before(lines) == 0, name
        assert _files(ignored.version) == _files(fresh.version), name


def test_a_memo_under_other_shingling_is_not_used(tmp_path):
    from corpus_assets.domain.dedup.clusters_layer import _previous_memo

    kwargs = _release(LayerStore(tmp_path))
    store = LayerStore(tmp_path)
    policy = ReleaseDedupPolicy(lsh={"threshold": 0.5, "num_perm": 64, "bands": 16, "rows": 4})
    built = build_dedup(store, "r1", kwargs["snapshots"], policy, MINHASH, **kwargs_less(kwargs))
    keys = np.zeros((3, 2), dtype=np.uint64)
    assert _previous_memo(built.version, keys, MINHASH, tmp_path / "same").entries == built.version.row_count("pair_verdicts")
    for other in (MinHashPolicy(num_perm=64, shingles={"unit": "char", "size": 4}), MinHashPolicy(num_perm=64, seed=2)):
        assert _previous_memo(built.version, keys, other, tmp_path / "other") is None


def test_dedup_shards_is_read_but_is_not_part_of_the_release_identity(tmp_path):
    from corpus_assets.domain.release.spec import load_release_spec

    a, b = tmp_path / "a" / "r1.yaml", tmp_path / "b" / "r1.yaml"
    a.parent.mkdir()
    b.parent.mkdir()
    a.write_text("name: r1\nsnapshots: {sources: [site_a]}\ndedup: {exact: true, shards: 8}\n")
    b.write_text("name: r1\nsnapshots: {sources: [site_a]}\ndedup: {exact: true}\n")
    sa, sb = load_release_spec(a), load_release_spec(b)
    assert (sa.dedup.shards, sb.dedup.shards) == (8, 1)
    assert sa.as_written() == sb.as_written() and sa.as_written()["dedup"] == {"exact": True}
    assert sa.dedup.build_record() == sb.dedup.build_record()


@pytest.mark.parametrize("batch_chars", [50, 512 << 10])
def test_batched_shingle_hashes_and_sorted_jaccard_equal_the_per_text_functions(monkeypatch, batch_chars):
    from corpus_assets.domain.dedup import text_verifier
    from corpus_assets.domain.dedup.text_verifier import jaccard_sorted, shingle_hashes_many

    monkeypatch.setattr(text_verifier, "BATCH_CHARS", batch_chars)  # one text a batch, or all in one

    texts = [GC, "", "one", "two words", "  leading and trailing  ", "tabs\tand\nnewlines  and  runs",
             "unicode\u00a0space and\u2003em space", _near(VENV, 3), CODE, "é" * 40, VENV * 30]
    for policy in (MINHASH, MinHashPolicy(shingles={"unit": "char", "size": 4}), MinHashPolicy(hash_function="sha1_32")):
        forms = [dedup_normal_form(t, "prose") for t in texts] + [dedup_normal_form(CODE, "code")]
        got = shingle_hashes_many(forms, policy)
        want = [text_shingle_hashes(f, policy) for f in forms]
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert g.dtype == np.uint64 and g.tolist() == w.tolist()
        for a in range(len(forms)):
            for b in range(len(forms)):
                assert jaccard_sorted(got[a], got[b]) == exact_jaccard(want[a], want[b])


def test_split_by_bytes_keeps_different_bytes_under_one_key_apart():
    from corpus_assets.domain.dedup.exact import split_by_bytes

    table = pa.table({
        "idx": pa.array([10, 11, 12, 13, 14, 15], pa.int64()),
        "key": ["k1", "k1", "k1", "k2", "k2", "k1"],
        "rank": pa.array([5, 2, 9, 1, 0, 3], pa.int64()),
        "normal": pa.array(["same", "same", "other", "same", "same", "other"], pa.large_string()),
    })
    idx, rep = split_by_bytes(table)
    got = dict(zip(idx.tolist(), rep.tolist()))
    # k1/"same": 11 (rank 2) before 10; k1/"other": 15 (rank 3) before 12; k2: 14 (rank 0) — never across keys
    assert got == {10: 11, 11: 11, 12: 15, 15: 15, 13: 14, 14: 14}


def test_a_used_copy_without_its_signature_is_refused_naming_the_snapshot(tmp_path):
    from corpus_assets.domain.dedup.signatures_layer import SIGNATURES_TABLES
    from corpus_assets.domain.layers.registry import MINHASH_SIGNATURES

    store = LayerStore(tmp_path)
    snap = snapshot_key("site_a", T0)
    write_snapshot(store, snap, [[record_row(f"site_a:{i}", "site_a", snap, f"{GC} {i}") for i in range(3)]], MINHASH)
    sigs = store.require_current(MINHASH_SIGNATURES, snap)
    with store.new_version(MINHASH_SIGNATURES, snap, SIGNATURES_TABLES, {"stale": True}) as w:
        w.write("signatures", sigs.read_table("signatures").slice(0, 2))  # one curated record lost its signature
        w.commit(extra_manifest={k: sigs.manifest[k] for k in ("signature_dtype", "num_perm")})
    with pytest.raises(ValueError, match=rf"{snap}: minhash_signatures does not hold one signature per curated record.*site_a:2"):
        build_dedup(store, "r1", [snap], ReleaseDedupPolicy(), MINHASH, {})


def test_known_byte_classes_split_a_key_as_reading_every_text_does():
    """``_split_known`` with the previous build's byte classes for some records gives what
    ``split_by_bytes`` gives from every text, whichever records are known; it reads only keys with
    an unknown record, and there only that record and the first-ranked record of each known class."""
    import random
    from types import SimpleNamespace

    from corpus_assets.domain.dedup.clusters_layer import _split_known
    from corpus_assets.domain.dedup.exact import split_by_bytes

    rng = random.Random(7)
    for case in range(300):
        n = rng.randrange(2, 40)
        keys = [f"k{rng.randrange(6)}" for _ in range(n)]
        texts = [f"t{rng.randrange(3)}" for _ in range(n)]  # a key may hold several byte classes (collisions)
        rank = np.array(rng.sample(range(1000), n), dtype=np.int64)
        cand = np.array(sorted(rng.sample(range(n), rng.randrange(1, n + 1))), dtype=np.int64)

        def table(rows):
            return pa.table({"idx": pa.array(rows, pa.int64()), "key": [keys[i] for i in rows],
                             "rank": pa.array(rank[rows]), "normal": pa.array([texts[i] for i in rows], pa.large_string())})

        want = dict(zip(*(a.tolist() for a in split_by_bytes(table(cand)))))
        # labels: the byte class (key, text) under an arbitrary number, -1 for the unknown
        names = {kt: rng.randrange(10 ** 6) for kt in set(zip(keys, texts))}
        known = np.array([names[(keys[i], texts[i])] if rng.random() < 0.6 else -1 for i in cand], dtype=np.int64)
        reads: list = []

        def read(rows):
            reads.append(rows.tolist())
            return split_by_bytes(table(rows))

        inputs = SimpleNamespace(records=pa.table({"dedup_key": keys}))
        idx, rep, n_read = _split_known(inputs, cand, rank, known, read)
        assert dict(zip(idx.tolist(), rep.tolist())) == want, case
        read_rows = [r for rows in reads for r in rows]
        assert n_read == len(read_rows) <= cand.size
        unknown_keys = {keys[i] for i, lab in zip(cand, known) if lab < 0}
        assert {keys[i] for i in read_rows} == unknown_keys  # no text of a key whose records are all known
        if (known >= 0).all():
            assert reads == []


def test_a_rebuild_reads_only_the_texts_the_previous_byte_classes_do_not_settle(tmp_path):
    """A release rebuilt after a snapshot that adds copies to exact groups (and to a forged dedup-key
    collision, under both of its texts and a third one) writes the same files as a build with no
    previous version, and reads fewer texts of shared keys; a snapshot whose curated records
    changed version since (a purge) is read again."""
    from corpus_assets.domain.core.keys import snapshot_key as skey

    homes = {k: tmp_path / k for k in ("inc", "fresh")}
    late = skey("web", T0 + timedelta(hours=3))
    for home in homes.values():
        kwargs = _release(LayerStore(home))
    policy = ReleaseDedupPolicy(lsh={"threshold": 0.5, "num_perm": 64, "bands": 16, "rows": 4})
    store = LayerStore(homes["inc"])
    build_dedup(store, "r1", kwargs["snapshots"], policy, MINHASH, **kwargs_less(kwargs))
    added = [record_row("web:gc-3", "web", late, GC),
             record_row("web:empty-3", "web", late, ""),
             dict(record_row("web:collide-3", "web", late, "First text of the colliding pair, about caching."),
                  dedup_key="f" * 64),
             dict(record_row("web:collide-4", "web", late, "A third text under the forged key, unlike both."),
                  dedup_key="f" * 64)]
    snapshots = kwargs["snapshots"] + [late]
    for home in homes.values():
        write_snapshot(LayerStore(home), late, [added], MINHASH)

    def shared_line(lines):
        (line,) = [x for x in lines if "share a dedup key" in x]
        shared, known, read = map(int, re.search(r"\((\d+) share a dedup key: (\d+) in byte .* (\d+) texts read\)", line).groups())
        return shared, known, read

    again, lines, fresh, fresh_lines = _rebuild_and_fresh(store, LayerStore(homes["fresh"]), snapshots, policy, kwargs)
    shared, known, read = shared_line(lines)
    assert shared_line(fresh_lines) == (shared, 0, shared)
    assert known == shared - len(added) and 0 < read < shared
    clusters = {r["record_id"]: r for r in again.version.read_table("clusters").to_pylist()}
    assert clusters["web:collide-3"]["representative_id"] == "site_a:collide-1"  # the same bytes
    assert clusters["web:collide-4"]["kind"] == "representative"  # other bytes under the same key
    assert clusters["web:gc-3"]["representative_id"] == "site_b:gc"

    # site_a's newest snapshot purged of one record: a new curated version, its copies read again
    a_new = snapshot_key("site_a", T0 + timedelta(hours=1))
    from corpus_assets.domain.layers.registry import CURATED_RECORDS

    for home in homes.values():
        s = LayerStore(home)
        rows = [r for r in s.current(CURATED_RECORDS, a_new).read_table("records").to_pylist() if r["record_id"] != "site_a:code.py"]
        write_snapshot(s, a_new, [rows], MINHASH)
    lines = []
    third = build_dedup(store, "r1", snapshots, policy, MINHASH, **kwargs_less(kwargs), log=lines.append,
                        previous=store.current(DEDUP_CLUSTERS, "r1"))
    fresh_third = build_dedup(LayerStore(homes["fresh"]), "r1", snapshots, policy, MINHASH, **kwargs_less(kwargs))
    assert _files(third.version) == _files(fresh_third.version)
    shared3, known3, read3 = shared_line(lines)
    key_of = {r["record_id"]: r["dedup_key"] for r in third.version.read_table("aliases").to_pylist()}
    snap_of = {r["record_id"]: r["snapshot"] for r in third.version.read_table("clusters").to_pylist()}
    counts = Counter(key_of.values())
    sharing = [rid for rid, k in key_of.items() if counts[k] > 1]
    assert shared3 == len(sharing)
    # every copy of the purged snapshot is unknown now, every other one is known
    assert known3 == sum(1 for rid in sharing if snap_of[rid] != a_new) < shared3 and read3 > 0


@pytest.mark.parametrize("layout", ["same order", "shuffled", "a signature missing"])
def test_signatures_and_curated_rows_pair_up_as_a_join_would(layout):
    from corpus_assets.domain.dedup.release_inputs import _aligned

    ids = [f"s:{i:03d}" for i in range(50)]
    cur = pa.table({"record_id": ids, "cur_pos": list(range(50)), "group_id": [f"g{i % 7}" for i in range(50)]})
    sig_ids = list(ids)
    if layout == "shuffled":
        sig_ids = sig_ids[1::2] + sig_ids[0::2]
    elif layout == "a signature missing":
        sig_ids = sig_ids[:20] + sig_ids[21:]
    sig = pa.table({"record_id": sig_ids, "snapshot": ["s.1"] * len(sig_ids), "sig_pos": list(range(len(sig_ids)))})
    want = sig.join(cur, keys="record_id", join_type="inner")
    got = _aligned(sig, cur)
    assert sorted(got.column_names) == sorted(want.column_names)
    assert got.select(want.column_names).sort_by("record_id").equals(want.sort_by("record_id"))
