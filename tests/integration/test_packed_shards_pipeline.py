"""mixture_plan and packed_shards through Dagster: the plan realizes its target, every non-pad
position of every shard traces back to the token view it came from, an independent Megatron
format reader and the streaming reader read the shards, rebuilds are byte-identical, and bad
spec input fails the right step naming the field."""

import json

import dagster as dg
import numpy as np

from corpus_assets.domain.storage.layer_store import LayerStore
from corpus_assets.domain.pack.shard_reader import ShardStreamReader
from corpus_assets.domain.pack.shards_layer import shard_dirs
from megatron_format_reader import read_indexed_dataset
from release_fixture import TOKENIZER, build_snapshots, run_release, setup_release, step_failure

PAD_TOKENIZER = TOKENIZER  # the fixture tokenizer has <|pad|> (id 1)
MIXTURE = "mixture: {unit: documents, weights: {site_docs: 0.5, site_chat: 0.5}, budget: 40, replacement: true, seed: 7}\n"
PACKING = "packing: {seq_len: 128, mode: atomic, overlength: split, boundary: mask, pad_token: '<|pad|>'}\nshards: {positions: 512}\n"
SPLIT = "split: {fractions: [0.6, 0.2, 0.2]}\n"


def _build(tmp_path, monkeypatch, body=SPLIT + PAD_TOKENIZER + MIXTURE + PACKING):
    setup_release(tmp_path, monkeypatch, body)
    import corpus_assets.assets.mixtures_packing.packed_shards as packed_asset
    from corpus_assets.definitions import build_definitions

    # a step this quick logs no progress line (Progress.quiet_below); these tests read the last one
    monkeypatch.setattr(packed_asset, "SUBPHASE_QUIET_S", 0.0)

    defs = build_definitions()
    with dg.instance_for_test() as instance:
        build_snapshots(defs, instance)
        result = run_release(defs, instance)
        # packed_shards' progress lines, as the run's log shows them
        result.progress_lines = [e.user_message for e in instance.all_logs(result.run_id)
                                 if e.user_message.startswith("packed_shards[r1]: ")]
    return result


def test_plan_is_packed_into_shards_whose_every_position_traces_to_its_view(corpus_env, tmp_path, monkeypatch):
    result = _build(tmp_path, monkeypatch)
    assert result.success
    assert result.progress_lines[-1].startswith("packed_shards[r1]: 3/3 splits (100.0%)")  # counts splits, not log lines
    store = LayerStore(corpus_env)
    views = {(v["record_id"], v["variant"]): v for v in store.require_current("token_views", "r1").read_table("views").to_pylist()}
    plan = store.require_current("mixture_plan", "r1").read_table("plan").to_pylist()
    # the plan realizes 50 / 50 over 40 draws, and only training records are drawn
    assert [sum(1 for p in plan if p["source"] == s) for s in ("site_chat", "site_docs")] == [20, 20]
    assert all(views[(p["record_id"], None)]["split"] == "train" for p in plan)

    train = shard_dirs(store, "r1", "train")
    assert train, "no train shards"
    T = 128
    drawn_tokens = 0
    for directory, meta in train:
        assert meta["blocks"] <= 512 // T and meta["seq_len"] == T
        # an independent reader written from Megatron's published format reads the tokens back
        mg = read_indexed_dataset(directory / meta["name"])
        tokens = np.stack([mg.sequence(i) for i in range(len(mg))]).astype(np.int64)
        assert tokens.shape == (meta["blocks"], T)
        mask = np.fromfile(directory / f"{meta['name']}.loss_mask.bin", dtype=np.uint8).reshape(-1, T)
        assert meta["sidecar_dtypes"]["segment_ids"] == "<u2"  # segment ids 1..k <= T fit uint16
        seg = np.fromfile(directory / f"{meta['name']}.segment_ids.bin", dtype="<u2").reshape(-1, T)
        import pyarrow.parquet as pq

        spans = pq.read_table(directory / f"{meta['name']}.spans.parquet").to_pylist()
        covered = np.zeros_like(seg, dtype=np.int64)
        for s in spans:
            covered[s["block"], s["start"]:s["end"]] += 1
            if s["pad"]:
                assert s["record_id"] is None
                assert (tokens[s["block"], s["start"]:s["end"]] == 1).all()  # <|pad|>, never EOS
                assert (mask[s["block"], s["start"]:s["end"]] == 0).all()  # padding is never a target
                continue
            v = views[(s["record_id"], s["variant"])]
            src = v["input_ids"][s["src_token_start"]:s["src_token_end"]]
            assert tokens[s["block"], s["start"]:s["end"]].tolist() == src  # provenance is exact
            drawn_tokens += s["end"] - s["start"]
        assert (covered == 1).all()  # every position, pad included, is covered exactly once
        # no position predicts the first token of another sample (boundary: mask)
        for b in range(seg.shape[0]):
            starts = [t for t in range(T) if seg[b, t] != 0 and (t == 0 or seg[b, t] != seg[b, t - 1])]
            assert all(mask[b, t] == 0 for t in starts)
    # every planned draw is in the shards (split pieces included): tokens in = tokens placed
    assert drawn_tokens == sum(views[(p["record_id"], None)]["n_tokens"] for p in plan)

    md = result.asset_materializations_for_node("packed_shards")[0].metadata
    assert md["blocks"].value == sum(m["blocks"] for _, m in train) + sum(
        m["blocks"] for split in ("validation", "test") for _, m in shard_dirs(store, "r1", split))
    assert "site_docs" in md["denominators"].value and "sampled records" in md["denominators"].value
    assert 0 < md["train_utilization"].value <= 1 and md["train_label_token_rate"].value < md["train_utilization"].value
    checks = {c.check_name: c.passed for c in result.get_asset_check_evaluations()}
    assert checks["span_coverage"] is True
    mix = result.asset_materializations_for_node("mixture_plan")[0].metadata
    assert mix["draws"].value == 40 and "effective epochs" in mix["per_source"].value

    # shards are written as they fill, chunk by chunk, from views spooled in small batches: one
    # sample per chunk and two views per spool batch give the same bytes
    from corpus_assets.domain.pack.packing import PackingPolicy
    from corpus_assets.domain.pack.shards_layer import ShardSpec, _pack_and_write
    from corpus_assets.domain.pack.view_spool import SpooledViews

    spooled = SpooledViews.spool(store.require_current("token_views", "r1"), tmp_path / "spool",
                                 ["train", "validation", "test"], batch_size=2)
    rows = spooled.splits["train"].rows_of([p["record_id"] for p in plan])
    assert (rows >= 0).all()
    built = store.require_current("packed_shards", "r1")
    policy = PackingPolicy.model_validate(built.manifest["build_spec"]["policy"])
    metas, *_ = _pack_and_write(spooled.splits["train"], rows, policy, None, tmp_path / "one-by-one", "train",
                                ShardSpec(positions=512), built.manifest["build_spec"]["tokenizer_digest"], 300,
                                *(spooled.splits["train"].label_map(c) for c in ("source_id", "domain", "source_id")),
                                chunk_samples=1)
    assert [m["files"] for m in metas] == [m["files"] for _, m in train]

    # spool tasks write each range's tokens at offsets sized from the light columns: the same
    # files and records as the serial pass; a range whose tokens disagree with its size is refused
    import dataclasses

    import pytest

    from corpus_assets.domain.core.compute import Engine
    from corpus_assets.domain.pack import view_spool

    by_tasks = SpooledViews.spool(store.require_current("token_views", "r1"), tmp_path / "spool-tasks",
                                  ["train", "validation", "test"], engine=Engine())
    for split in ("train", "validation", "test"):
        a, b = spooled.splits[split], by_tasks.splits[split]
        assert list(a.lengths) == list(b.lengths)
        for c in ("record_id", "variant", "source_id", "domain"):
            assert a.column(c).equals(b.column(c))
        for k in ("ids", "mask", "offsets"):
            assert (a.directory / f"{k}.bin").read_bytes() == (b.directory / f"{k}.bin").read_bytes()
    sized: list = []
    real_map = Engine.map
    monkeypatch.setattr(Engine, "map", lambda self, fn, items, name="task": sized.extend(items) or real_map(self, fn, items, name=name))
    SpooledViews.spool(store.require_current("token_views", "r1"), tmp_path / "spool-2", ["train"], engine=Engine())
    first = next(t for t in sized if isinstance(t, view_spool.SpoolTask) and not t.records_only)  # a token-pass task
    wrong = dataclasses.replace(first, directory=str(tmp_path / "spool-wrong"), tokens=(first.tokens[0] + 1,))
    with pytest.raises(RuntimeError, match="token_views changed while packing"):
        view_spool.spool_task(wrong)
    by_tasks.remove()
    spooled.remove()
    assert not (tmp_path / "spool").exists()

    # the streaming reader reads every train block exactly once per epoch
    reader = ShardStreamReader(train, batch_size=3, buffer_size=4, seed=1)
    refs = [tuple(r) for batch in reader for r in batch.refs.tolist()]
    assert sorted(refs) == sorted((i, b) for i, (_, m) in enumerate(train) for b in range(m["blocks"]))


def test_rebuild_in_a_fresh_home_gives_the_same_shard_bytes(corpus_env, tmp_path, monkeypatch):
    assert _build(tmp_path, monkeypatch).success
    first = LayerStore(corpus_env).require_current("packed_shards", "r1")
    home_b = tmp_path / "home_b"
    (home_b / "dagster").mkdir(parents=True)
    monkeypatch.setenv("CORPUS_HOME", str(home_b))
    monkeypatch.setenv("DAGSTER_HOME", str(home_b / "dagster"))
    assert _build(tmp_path, monkeypatch).success
    second = LayerStore(home_b).require_current("packed_shards", "r1")
    assert second.content_digest == first.content_digest
    assert first.manifest["report"]["shard_set_digest"] == second.manifest["report"]["shard_set_digest"]
    a = sorted((p.relative_to(corpus_env), p.read_bytes()) for p in (corpus_env / "shards").rglob("*") if p.is_file())
    b = sorted((p.relative_to(home_b), p.read_bytes()) for p in (home_b / "shards").rglob("*") if p.is_file())
    assert a == b and a


# refused when the spec is read: the first step that reads it (dedup_clusters) fails naming the
# file and the field, and nothing is built (the release_specs sensor never registers such a spec)
BAD_SPECS = [
    ("mixture: {unit: documents, weights: {site_docs: 0.5, site_chat: 0.4}, budget: 10}\n", "mixture.weights", "weights must sum to 1"),
    ("mixture: {unit: documents, alpha: 1.5, budget: 10}\n", "mixture.alpha", "alpha"),
    ("mixture: {unit: documents, weights: {site_docs: 0.5, web: 0.5}, budget: 10}\n", "mixture.weights", "unknown source(s) ['web']"),
    ("mixture: {unit: documents, alpha: 0.5, budget: {tokens: 1000}}\n", "mixture.budget", "Input should be a valid integer"),
    ("packing: {seq_len: 128}\nshards: {positions: 100}\n", "shards.positions", "shard_positions (S=100) must be >= seq_len (T=128)"),
    ("packing: {seq_len: 128, mode: atomic, boundary: none}\n", "packing", "boundary='none' is only allowed with mode='stream'"),
    ("packing: {seq_len: 128, boundary: bos}\n", "packing.bos_token", "boundary is 'bos' but no bos_token is named"),
    ("packing: {seq_len: '128x'}\n", "packing.seq_len", "Input should be a valid integer"),
    ("packng: {seq_len: 128}\n", "packng", "Extra inputs are not permitted"),
]
# valid specs whose problem only the data or the tokenizer can show: the step that sees it fails
BAD_INPUT = [
    ("mixture: {unit: documents, weights: {site_docs: 0.5, site_chat: 0.3, site_short: 0.2}, budget: 10}\n",
     "mixture_plan", "source 'site_short' has no records"),
    ("packing: {seq_len: 128, pad_token: '<|nope|>'}\n", "packed_shards", "packing.pad_token '<|nope|>' is not in the tokenizer"),
]


def test_bad_mixture_and_packing_input_fails_the_right_step_naming_the_field(corpus_env, tmp_path, monkeypatch):
    short = tmp_path / "short"
    short.mkdir()
    (short / "s.jsonl").write_text(json.dumps({"id": "s1", "text": "Too short."}) + "\n")
    gov = "governance: {license: CC0-1.0, rights_evidence: https://example.org/rights}"
    rel = setup_release(
        tmp_path, monkeypatch, SPLIT + PAD_TOKENIZER,
        extra_sources=f"  - id: site_short\n    kind: jsonl\n    root: {short}\n    include: ['*.jsonl']\n    adapter: text_document\n    {gov}\n",
    )
    from corpus_assets.definitions import build_definitions

    defs = build_definitions()
    with dg.instance_for_test() as instance:
        build_snapshots(defs, instance, sources=("site_docs", "site_chat", "site_short"))
        head = "name: r1\nsnapshots: {sources: [site_docs, site_chat, site_short]}\n" + SPLIT + PAD_TOKENIZER
        for body, field, words in BAD_SPECS:
            (rel / "r1.yaml").write_text(head + body)
            result = run_release(defs, instance, raise_on_error=False)
            assert not result.success, body
            failed = [ev.step_key for ev in result.all_events if ev.event_type_value == "STEP_FAILURE"]
            # the run's first step (observing release_inputs) reads the spec: nothing is built from a bad one
            assert failed == ["release_inputs"], (body, failed)
            assert not [ev for ev in result.all_events if ev.event_type_value == "ASSET_MATERIALIZATION"], body
            message = step_failure(result)
            assert f"releases/r1.yaml: invalid configuration\n  {field}: " in message, (body, message)
            assert words in message, (body, message)
        for body, step, words in BAD_INPUT:
            (rel / "r1.yaml").write_text(head + body)
            result = run_release(defs, instance, raise_on_error=False)
            assert not result.success, body
            failed = [ev.step_key for ev in result.all_events if ev.event_type_value == "STEP_FAILURE"]
            assert failed == [step], (body, failed)
            assert words in step_failure(result), (body, step_failure(result))


def test_span_coverage_check_rereads_the_written_shards_and_fails_on_a_defect(corpus_env, tmp_path, monkeypatch):
    """The span_coverage check verifies what is on disk, not what the packer meant: a shard whose
    spans file lost a span (its digest updated, so only coverage can tell) fails it, naming the
    shard; a shard whose bytes changed fails the digest check."""
    import hashlib
    import shutil

    import pyarrow.parquet as pq

    from corpus_assets.domain.pack.shards_layer import SHARDS_TABLES, verify_packed_shards

    assert _build(tmp_path, monkeypatch).success
    store = LayerStore(corpus_env)
    built = store.require_current("packed_shards", "r1")
    report = verify_packed_shards(store, built)
    assert all(v["ok"] and v["problems"] == [] for v in report.values()) and report["train"]["shards"] >= 1

    rows = built.read_table("shards").to_pylist()
    src_set = rows[0]["directory"].rsplit("/", 1)[0]
    bad_set = "shards/r1/defect"
    shutil.copytree(corpus_env / src_set, corpus_env / bad_set)
    victim = next(r for r in rows if r["split"] == "train")
    meta = json.loads(victim["meta_json"])
    spans_path = corpus_env / bad_set / "train" / meta["files"]["spans"]["path"]
    spans = pq.read_table(spans_path)
    non_pad = [i for i, p in enumerate(spans.column("pad").to_pylist()) if not p]
    keep = [i for i in range(spans.num_rows) if i != non_pad[0]]
    pq.write_table(spans.take(keep), spans_path)
    data = spans_path.read_bytes()
    meta["files"]["spans"].update(sha256=hashlib.sha256(data).hexdigest(), bytes=len(data))
    tampered = []
    for r in rows:
        r = dict(r, directory=r["directory"].replace(src_set, bad_set))
        if r["name"] == victim["name"] and r["split"] == "train":
            r["meta_json"] = json.dumps(meta, sort_keys=True, separators=(",", ":"))
        tampered.append(r)
    with store.new_version("packed_shards", "r1-defect", SHARDS_TABLES, built.manifest["build_spec"]) as w:
        w.write("shards", tampered)
        defect = w.commit()
    report = verify_packed_shards(store, defect)
    assert report["train"]["ok"] is False and report["validation"]["ok"] is True
    assert any(p.startswith(f"{victim['name']}: ") and "not covered" in p for p in report["train"]["problems"])

    # changed bytes without a matching digest: refused before coverage is even looked at
    bin_path = corpus_env / bad_set / "train" / meta["files"]["bin"]["path"]
    raw = bytearray(bin_path.read_bytes())
    raw[0] ^= 1
    bin_path.write_bytes(bytes(raw))
    report = verify_packed_shards(store, defect)
    assert report["train"]["ok"] is False and any("sha256" in p or "digest" in p for p in report["train"]["problems"])


def test_a_span_coverage_failure_while_packing_is_recorded_as_a_failed_check_before_it_blocks(
        corpus_env, tmp_path, monkeypatch):
    import corpus_assets.domain.pack.pack_tasks as pack_tasks  # where each shard range's blocks are checked

    setup_release(tmp_path, monkeypatch, SPLIT + PAD_TOKENIZER + MIXTURE + PACKING)
    from corpus_assets.definitions import build_definitions

    defs = build_definitions()
    with dg.instance_for_test() as instance:
        build_snapshots(defs, instance)
        # a packer defect: the blocks of the first chunk do not cover their positions
        monkeypatch.setattr(pack_tasks, "coverage_check", lambda part: (False, "position 3 covered twice (injected)"))
        result = run_release(defs, instance, raise_on_error=False)
        assert not result.success and "fail span coverage" in step_failure(result)
        checks = [e.event_specific_data for e in result.all_events if e.event_type_value == "ASSET_CHECK_EVALUATION"]
        (coverage,) = [c for c in checks if c.check_name == "span_coverage"]
        assert coverage.passed is False and "injected" in json.dumps(coverage.metadata["problems"].value)
        assert not result.asset_materializations_for_node("release_manifest")  # blocked
