"""token_views through Dagster: every kept record tokenized, UI metadata, reuse across releases,
determinism, and bad release input that fails clearly or becomes a reason code."""

import json
from collections import Counter
from datetime import timedelta

import dagster as dg
import pytest

from corpus_assets.domain.core.keys import snapshot_key
from corpus_assets.domain.storage.layer_store import LayerStore
from release_fixture import (
    DOCS, EOS_ID, FIXTURE_TOKENIZER, ITERTOOLS, T0, TOKENIZER,
    build_snapshots as _snapshots, run_release as _release, setup_release as _setup, step_failure as _failure,
)

def _views(home, name="r1"):
    return LayerStore(home).require_current("token_views", name).read_table("views").to_pylist()


def test_every_kept_record_gets_views_with_one_eos_and_assistant_only_loss(corpus_env, tmp_path, monkeypatch):
    _setup(tmp_path, monkeypatch, "split: {fractions: [0.6, 0.2, 0.2]}\n" + TOKENIZER)
    from corpus_assets.definitions import build_definitions

    defs = build_definitions()
    with dg.instance_for_test() as instance:
        _snapshots(defs, instance)
        result = _release(defs, instance)
        assert result.success
    store = LayerStore(corpus_env)
    assignments = store.require_current("splits", "r1").read_table("assignments").to_pylist()
    kept = {r["record_id"]: r["split"] for r in assignments if r["kept"]}
    assert set(kept) == {f"site_docs:{k}" for k in DOCS} | {"site_chat:c1", "site_chat:c2"}
    views = {v["record_id"]: v for v in _views(corpus_env)}
    assert set(views) == set(kept)  # nothing lost
    assert all(views[r]["split"] == s for r, s in kept.items())

    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(FIXTURE_TOKENIZER))
    for key, text in DOCS.items():
        v = views[f"site_docs:{key}"]
        assert v["input_ids"].count(EOS_ID) == 1 and v["input_ids"][-1] == EOS_ID
        assert all(m == 1 for m in v["loss_mask"])  # documents: every token is a target, EOS included
        assert tok.decode(v["input_ids"][:-1]) == text
    chat = views["site_chat:c1"]
    labelled = tok.decode([i for i, m in zip(chat["input_ids"], chat["loss_mask"]) if m and i != EOS_ID])
    assert "Iterate over the file object" in labelled
    assert "line by line" not in labelled and "concise assistant" not in labelled  # user / system never in the loss
    assert chat["input_ids"].count(EOS_ID) == 1

    mat = result.asset_materializations_for_node("token_views")[0]
    md = mat.metadata
    tokens = sum(v["n_tokens"] for v in views.values())
    labels = sum(sum(v["loss_mask"]) for v in views.values())
    assert md["tokens"].value == tokens and md["label_tokens"].value == labels
    assert md["label_token_rate"].value == pytest.approx(labels / tokens, abs=1e-6)
    assert md["vocab_size"].value == 300
    assert md["tokenizer_digest"].value == store.require_current("tokenizer", "r1").manifest["tokenizer_digest"]
    assert "site_docs" in md["tokens_per_source"].value and "site_chat" in md["tokens_per_source"].value
    for split in set(kept.values()):
        assert md[f"{split}_tokens"].value == sum(v["n_tokens"] for v in views.values() if v["split"] == split)
        assert split in md["per_split"].value
    checks = result.get_asset_check_evaluations()
    assert [c.passed for c in checks if c.check_name == "token_views_accounting"] == [True]


def test_record_over_max_tokens_gets_a_reason_code_and_nothing_else_is_lost(corpus_env, tmp_path, monkeypatch):
    long_doc = ITERTOOLS + " " + DOCS["gc"].replace("garbage collector", "cycle finder")
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(FIXTURE_TOKENIZER))
    limit = max(len(tok.encode(t, add_special_tokens=False).ids) for t in DOCS.values()) + 1  # + EOS
    assert len(tok.encode(long_doc, add_special_tokens=False).ids) + 1 > limit
    _setup(tmp_path, monkeypatch, "split: {fractions: [0.6, 0.2, 0.2]}\n" + TOKENIZER + f"token_views: {{max_tokens: {limit}}}\n",
           extra_docs={"long": long_doc})
    from corpus_assets.definitions import build_definitions

    defs = build_definitions()
    with dg.instance_for_test() as instance:
        _snapshots(defs, instance)
        result = _release(defs, instance)
        assert result.success
    v = LayerStore(corpus_env).require_current("token_views", "r1")
    decisions = v.read_table("decisions").to_pylist()
    rejected = [d for d in decisions if d["outcome"] != "accepted"]
    assert [(r["record_id"], r["outcome"], r["action"], r["reason"]) for r in rejected] == [
        ("site_docs:long", "rejected", "reject", "token_views.too_long")]
    assert f"> max_tokens {limit}" in rejected[0]["detail"] and rejected[0]["tokens_out"] == 0
    # one decision per record with a split, and the accepted ones hold exactly the view tokens
    assignments = LayerStore(corpus_env).require_current("splits", "r1").read_table("assignments").to_pylist()
    assert sorted(d["record_id"] for d in decisions) == sorted(a["record_id"] for a in assignments if a["kept"] and a["split"])
    tokens = Counter()
    for row in v.read_table("views", columns=["record_id", "n_tokens"]).to_pylist():
        tokens[row["record_id"]] += row["n_tokens"]
    assert {d["record_id"]: d["tokens_out"] for d in decisions if d["outcome"] == "accepted"} == dict(tokens)
    assert {r["record_id"] for r in v.read_table("views").to_pylist()} == {f"site_docs:{k}" for k in DOCS} | {"site_chat:c1", "site_chat:c2"}
    md = result.asset_materializations_for_node("token_views")[0].metadata
    assert md["rejected"].value == 1 and md["rejected_by_reason"].value == {"token_views.too_long": 1}
    assert [c.passed for c in result.get_asset_check_evaluations() if c.check_name == "token_views_accounting"] == [True]


def test_second_release_tokenizes_only_new_records_and_reuse_never_changes_bytes(corpus_env, tmp_path, monkeypatch):
    rel = _setup(tmp_path, monkeypatch, "split: {fractions: [0.6, 0.2, 0.2]}\n" + TOKENIZER)
    from corpus_assets.definitions import build_definitions

    defs = build_definitions()
    with dg.instance_for_test() as instance:
        _snapshots(defs, instance)
        first = _release(defs, instance)
        assert first.success
        md1 = first.asset_materializations_for_node("token_views")[0].metadata
        assert md1["reused_records"].value == 0 and md1["tokenized_records"].value == 6
        # new documents arrive in a later snapshot of site_docs; r2 takes every snapshot
        (tmp_path / "docs" / "docs.jsonl").write_text(
            (tmp_path / "docs" / "docs.jsonl").read_text()
            + json.dumps({"id": "itertools", "text": ITERTOOLS}) + "\n")
        key = snapshot_key("site_docs", T0 + timedelta(hours=1))
        instance.add_dynamic_partitions("snapshots", [key])
        assert defs.resolve_job_def("snapshot_job").execute_in_process(instance=instance, partition_key=key).success
        (rel / "r2.yaml").write_text("name: r2\nsnapshots: {sources: [site_docs, site_chat]}\n"
                                     "split: {fractions: [0.6, 0.2, 0.2]}\n" + TOKENIZER)
        second = _release(defs, instance, "r2")
        assert second.success
        md2 = second.asset_materializations_for_node("token_views")[0].metadata
        # the later snapshot repeats the 4 earlier docs (exact duplicates: one representative each)
        # and adds one new record: only that one is tokenized
        assert md2["tokenized_records"].value == 1
        # a segment whose inputs are the same in both releases (site_chat's one snapshot, with the
        # small snapshots it shares files with) is adopted whole; the repeated docs come from r1's
        # views row by row
        store = LayerStore(corpus_env)
        keys1 = {e["key"] for e in store.require_current("token_views", "r1").manifest["segments"]}
        segments2 = store.require_current("token_views", "r2").manifest["segments"]
        assert md2["adopted_records"].value == sum(e["records"] for e in segments2 if e["key"] in keys1)
        assert md2["reused_records"].value > 0
        assert md2["reused_records"].value + md2["adopted_records"].value == md2["records"].value - 1
        cached = LayerStore(corpus_env).require_current("token_views", "r2")
        # the same release without the cache gives the same bytes
        fresh = _release(defs, instance, "r2", run_config={"ops": {"token_views": {"config": {"reuse": False}}}})
        assert fresh.success
        assert fresh.asset_materializations_for_node("token_views")[0].metadata["tokenized_records"].value == md2["records"].value
    again = LayerStore(corpus_env).require_current("token_views", "r2")
    assert again.content_digest == cached.content_digest
    r1 = {v["record_id"]: v["input_ids"] for v in _views(corpus_env, "r1")}
    r2 = {v["record_id"]: v["input_ids"] for v in _views(corpus_env, "r2")}
    assert all(r2[k] == r1[k] for k in set(r1) & set(r2))


def test_same_spec_and_inputs_give_identical_splits_tokenizer_and_views(corpus_env, tmp_path, monkeypatch):
    _setup(tmp_path, monkeypatch, "split: {fractions: [0.6, 0.2, 0.2]}\n"
           "tokenizer: {train: {vocab_size: 300, min_frequency: 1}}\n")
    from corpus_assets.definitions import build_definitions

    digests = []
    for home in (corpus_env, tmp_path / "home_b"):
        (home / "dagster").mkdir(parents=True, exist_ok=True)
        monkeypatch.setenv("CORPUS_HOME", str(home))
        monkeypatch.setenv("DAGSTER_HOME", str(home / "dagster"))
        defs = build_definitions()
        with dg.instance_for_test() as instance:
            _snapshots(defs, instance)
            assert _release(defs, instance, run_config={"ops": {"token_views": {"config": {"max_records": 2}}}}
                            if home != corpus_env else None).success
        store = LayerStore(home)
        digests.append(tuple(store.require_current(a, "r1").content_digest for a in ("splits", "tokenizer", "token_views"))
                       + (store.require_current("tokenizer", "r1").manifest["tokenizer_digest"],))
    # a different batch size (2 records per encode_batch) in the second home: same bytes
    assert digests[0] == digests[1]


# refused when the spec is read: the first step that reads it (dedup_clusters) fails naming the
# file and the field, and nothing is built (the release_specs sensor never registers such a spec)
BAD_SPECS = [
    ("split: {fractions: [0.6, 0.5, -0.1]}\n" + TOKENIZER, "split.fractions", "fractions[2] = -0.1 is outside (0, 1]"),
    ("split: {boundaries: [0.5, 0.4, 1.0]}\n" + TOKENIZER, "split.boundaries", "boundaries must be strictly increasing"),
    ("tokenizer: {path: /nonexistent/tokenizer.json}\n", "tokenizer.path", "/nonexistent/tokenizer.json: no such file"),
    ("tokenizer: {path: tokenizer.json}\n", "tokenizer.path", "releases/tokenizer.json: no such file (a relative path is read from the releases folder"),
    (TOKENIZER + "token_views: {chat_template: chatml-9}\n", "token_views.chat_template", "Input should be 'chatml-1'"),
    (TOKENIZER + "token_views: {max_tokens: 0}\n", "token_views.max_tokens", "Input should be greater than or equal to 1"),
    (TOKENIZER + "token_view: {max_tokens: 10}\n", "token_view", "Extra inputs are not permitted"),
]
# a valid spec whose tokenizer file only the tokenizer step reads: that step fails, clearly
BAD_INPUT = [
    ("tokenizer: {path: BROKEN}\n", "tokenizer", "invalid JSON"),
]


def test_bad_release_input_fails_the_right_step_with_a_clear_error(corpus_env, tmp_path, monkeypatch):
    rel = _setup(tmp_path, monkeypatch, TOKENIZER)
    broken = tmp_path / "broken.json"
    broken.write_text('{"model": ')
    from corpus_assets.definitions import build_definitions

    defs = build_definitions()
    with dg.instance_for_test() as instance:
        _snapshots(defs, instance)
        head = "name: r1\nsnapshots: {sources: [site_docs, site_chat]}\n"
        for body, field, words in BAD_SPECS:
            (rel / "r1.yaml").write_text(head + body)
            result = _release(defs, instance, raise_on_error=False)
            assert not result.success
            failed = [ev.step_key for ev in result.all_events if ev.event_type_value == "STEP_FAILURE"]
            assert failed == ["release_inputs"], (body, failed)  # the first step reads the spec
            assert not [ev for ev in result.all_events if ev.event_type_value == "ASSET_MATERIALIZATION"], body
            message = _failure(result)
            assert f"releases/r1.yaml: invalid configuration\n  {field}: " in message, (body, message)
            assert words in message, (body, message)
        for body, step, words in BAD_INPUT:
            (rel / "r1.yaml").write_text(head + body.replace("BROKEN", str(broken)))
            result = _release(defs, instance, raise_on_error=False)
            assert not result.success
            failed = [ev.step_key for ev in result.all_events if ev.event_type_value == "STEP_FAILURE"]
            assert failed == [step], (body, failed)
            assert words in _failure(result), (body, _failure(result))
