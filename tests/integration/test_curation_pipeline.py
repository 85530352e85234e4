"""curated_records through Dagster: retention by reason, PII never public, decontamination reported honestly."""

import dagster as dg

from datetime import datetime, timezone

import pyarrow.parquet as pq

from corpus_assets.domain.demo.inputs import write_demo_inputs
from corpus_assets.domain.core.keys import snapshot_key
from corpus_assets.domain.storage.layer_store import LayerStore

PII_VALUES = ["maria.lopez@example.org", "+44 20 7946 0958", "81.2.69.160", "4111 1111 1111 1111"]


def _run(defs, instance, source_id):
    key = snapshot_key(source_id, datetime.now(timezone.utc))
    instance.add_dynamic_partitions("snapshots", [key])
    result = defs.resolve_job_def("snapshot_job").execute_in_process(instance=instance, partition_key=key)
    assert result.success
    return key, result


def _decisions(home, key):
    v = LayerStore(home).require_current("curated_records", key)
    return v, {d["record_id"]: d for d in v.read_table("decisions").to_pylist()}


def test_curation_redacts_quarantines_and_decontaminates_through_dagster(corpus_env):
    from corpus_assets.definitions import build_definitions

    write_demo_inputs(corpus_env / "demo_inputs")
    defs = build_definitions()
    with dg.instance_for_test() as instance:
        assert defs.resolve_job_def("registry_job").execute_in_process(instance=instance).success
        key, result = _run(defs, instance, "demo_sharegpt")
        checks = {e.check_name: e for e in result.get_asset_check_evaluations()}
        assert checks["curation_accounting"].passed
        assert checks["no_pii_in_public"].passed
        assert checks["registry_digest_recorded"].passed
        v, dec = _decisions(corpus_env, key)
        # e-mail, phone and IP are redacted in place; the card number quarantines its record
        assert (dec["demo_sharegpt:sg-004"]["action"], dec["demo_sharegpt:sg-004"]["reason"]) == ("modify", "pii.redacted")
        assert (dec["demo_sharegpt:sg-005"]["outcome"], dec["demo_sharegpt:sg-005"]["reason"]) == ("quarantined", "pii.quarantined_type")
        rec = {r["record_id"]: r for r in v.read_table("records").to_pylist()}
        assert "<EMAIL>" in rec["demo_sharegpt:sg-004"]["text"] and "demo_sharegpt:sg-005" not in rec
        audit = v.read_table("pii_audit").to_pylist()
        assert {a["pii_type"] for a in audit} >= {"email", "phone", "ipv4"}
        assert all(set(a) == {"record_id", "field", "pii_type", "start", "end", "detector_version"} for a in audit)
        # no detected value in any public table, in Dagster metadata or in the run's logs
        public = b"".join(p.read_bytes() for t in ("records", "decisions", "pii_audit", "contamination") for p in v.table_files(t))
        public_text = "".join(
            str(row) for t in ("records", "decisions", "pii_audit", "contamination") for p in v.table_files(t) for row in pq.read_table(p).to_pylist()
        )
        logs = "".join(str(e.message) + str(getattr(e.dagster_event, "event_specific_data", "")) for e in instance.all_logs(result.run_id))
        metadata = "".join(
            str(m.metadata) for m in result.asset_materializations_for_node("curated_records")
        ) + "".join(str(e.metadata) for e in result.get_asset_check_evaluations())
        assert "pii.redacted" in metadata
        for value in PII_VALUES:
            assert value not in public_text and value.encode() not in public
            assert value not in logs and value not in metadata
        quarantine = v.read_table("quarantine").to_pylist()
        assert [q["record_id"] for q in quarantine] == ["demo_sharegpt:sg-005"]
        assert (v.root / "quarantine").stat().st_mode & 0o077 == 0

        # the reasoning dump embeds a registry item verbatim: removed with the matched item named
        key, result = _run(defs, instance, "demo_reasoning")
        v, dec = _decisions(corpus_env, key)
        hit = dec["demo_reasoning:r-002"]
        assert (hit["stage"], hit["outcome"], hit["reason"]) == ("decontam", "rejected", "decontam.benchmark_match")
        assert "demo_math/dm-001" in hit["detail"]
        cont = v.read_table("contamination").to_pylist()
        assert {(c["benchmark"], c["item_id"]) for c in cont} == {("demo_math", "dm-001")}
        mat = result.asset_materializations_for_node("curated_records")[0]
        assert "not that the data is clean" in mat.metadata["contamination"].value
        assert "demo_reasoning" in mat.metadata["retention"].value

        # retention by reason is available as SQL too
        assert defs.resolve_job_def("reports_job").execute_in_process(instance=instance).success
        store = LayerStore(corpus_env)
        rows = store.require_current("curation_retention", "_all").read_table("result").to_pylist()
        assert any(r["reason"] == "decontam.benchmark_match" and r["records_out"] == 0 for r in rows)
        assert any(r["reason"] == "pii.redacted" and r["records_out"] == 1 for r in rows)
        summary = store.require_current("contamination_summary", "_all").read_table("result").to_pylist()
        (flagged,) = [r for r in summary if r["records_flagged"]]
        assert (flagged["benchmark"], flagged["records_flagged"], flagged["decided_by"]) == ("demo_math", 1, "decontam")
        # every benchmark of the registry has a row, with what could not be checked
        by_bench = {r["benchmark"]: r for r in summary}
        assert set(by_bench) == {"demo_code", "demo_math"}
        assert by_bench["demo_code"]["records_flagged"] == 0 and by_bench["demo_code"]["source_id"] is None
        # demo_math's answers "5050" and "50" are too short to check
        assert (by_bench["demo_math"]["protected_texts"], by_bench["demo_math"]["unchecked_too_short"]) == (6, 2)
        assert "unchecked: too short" in mat.metadata["contamination"].value
        assert "Limits" in mat.metadata["contamination"].value


def test_curated_records_fail_clearly_without_a_registry(corpus_env):
    from corpus_assets.definitions import build_definitions

    write_demo_inputs(corpus_env / "demo_inputs")
    defs = build_definitions()
    with dg.instance_for_test() as instance:
        key = snapshot_key("demo_chat", datetime.now(timezone.utc))
        instance.add_dynamic_partitions("snapshots", [key])
        result = defs.resolve_job_def("snapshot_job").execute_in_process(instance=instance, partition_key=key, raise_on_error=False)
        assert not result.success
        error = result.get_step_failure_events()[0].event_specific_data.error
        messages = []
        while error is not None:
            messages.append(error.message)
            error = error.cause
        assert any("eval_registry has not been materialized yet" in m for m in messages)
        # the earlier layers still materialized
        assert LayerStore(corpus_env).require_current("canonical_records", key).row_count("records") > 0
