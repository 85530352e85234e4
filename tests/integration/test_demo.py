"""The README's first command: the demo builds every layer through Dagster and prints a summary."""

import dagster as dg

from corpus_assets.domain.storage.layer_store import LayerStore
from corpus_assets.domain.demo.pydoc_server import free_port
from stage_chain import STAGES, check_stage_accounting


def test_demo_end_to_end_and_incremental_rerun(corpus_env, monkeypatch):
    from corpus_assets.demo import run_demo

    lines: list[str] = []
    port = free_port()
    summary = run_demo(port=port, echo=lines.append)
    text = "\n".join(lines)
    keys = [row[0] for row in summary["snapshots"]]
    sources = {k.split(".")[0] for k in keys}
    assert sources == {"pydocs", "project_docs", "demo_chat", "demo_sharegpt", "demo_instructions",
                       "demo_preferences", "demo_reasoning", "demo_tasks", "demo_recipe"}
    pydocs = next(row for row in summary["snapshots"] if row[0].startswith("pydocs."))
    assert pydocs[1] >= 20 and pydocs[2] >= 20  # the crawl captured and accepted real documentation pages
    for key, items, accepted, rejected, quarantined in summary["snapshots"]:
        assert items == accepted + rejected + quarantined
        # curation decides every canonical record once
        assert sum(summary["curated"][key]) == accepted
    # the demo's personal data and its embedded benchmark item are caught
    sharegpt = next(k for k in keys if k.startswith("demo_sharegpt."))
    reasoning = next(k for k in keys if k.startswith("demo_reasoning."))
    assert summary["curated"][sharegpt][2] == 1 and summary["curated"][reasoning][1] == 1
    assert "curated records" in text
    # the demo release finds the ShareGPT copy (exact) and its one-word variant (near) of demo_chat's chat-0002
    clusters = {r["record_id"]: r for r in LayerStore(corpus_env).require_current("dedup_clusters", "demo").read_table("clusters").to_pylist()}
    assert (clusters["demo_sharegpt:sg-006"]["kind"], clusters["demo_sharegpt:sg-006"]["representative_id"]) == ("exact", "demo_chat:chat-0002")
    assert (clusters["demo_sharegpt:sg-007"]["kind"], clusters["demo_sharegpt:sg-007"]["representative_id"]) == ("near", "demo_chat:chat-0002")
    assert summary["dedup"]["exact"]["duplicates_removed"] >= 1 and summary["dedup"]["near_removed"] >= 1
    # splits cover every record; the tokenizer learned from the kept training-split records only
    assignments = LayerStore(corpus_env).require_current("splits", "demo").read_table("assignments").to_pylist()
    assert {r["split"] for r in assignments} <= {"train", "validation", "test"} and len(assignments) == summary["dedup"]["records"]
    train_kept = sum(1 for r in assignments if r["kept"] and r["split"] == "train")
    assert summary["tokenizer"]["training_records"] == train_kept > 0
    assert "release demo tokenizer" in text
    assert str(corpus_env) in text and "canonical_records" in text
    store = LayerStore(corpus_env)
    # one row per stage of the demo release, from raw items to packed tokens, adding up (and printed)
    check_stage_accounting(store.require_current("stage_accounting", "_all").read_table("result").to_pylist(), store, "demo")
    assert [r["layer"] for r in summary["stage_accounting"]] == STAGES and "demo stage accounting" in text
    # everything ran in the persistent instance the UI reads
    instance = dg.DagsterInstance.get()
    assert set(keys) <= set(instance.get_dynamic_partitions("snapshots"))
    # a second run continues the crawl from its frontier: only pages never captured before
    again = run_demo(port=port, echo=lines.append)
    second = [k for k, *_ in again["snapshots"] if k.startswith("pydocs.")]
    assert len(second) == 1

    def uris(key):
        return set(store.require_current("raw_snapshot", key).read_table("items", columns=["uri"]).column("uri").to_pylist())

    first_uris, second_uris = uris(pydocs[0]), uris(second[0])
    assert second_uris and not (first_uris & second_uris)
