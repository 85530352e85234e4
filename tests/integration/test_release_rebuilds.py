"""The release_rebuilds sensor keeps a published release current: a new snapshot of one of its
sources makes it request release_job with the reason; it waits out its debounce interval and any
deletion in flight, leaves `rebuild: manual` releases alone, and refreshes the reports after."""

import json
from datetime import timedelta

import dagster as dg

from corpus_assets.cli import main as corpus_main
from corpus_assets.domain.core.keys import snapshot_key
from release_fixture import DOCS, ITERTOOLS, T0, TOKENIZER, build_snapshots, run_release, setup_release

BODY = ("split: {fractions: [0.6, 0.2, 0.2]}\n" + TOKENIZER
        + "packing: {seq_len: 128, overlength: split, pad_token: '<|pad|>'}\nshards: {positions: 1024}\n")


def _tick(defs, instance, cursor):
    with dg.build_sensor_context(instance_ref=instance.get_ref(), definitions=defs, cursor=cursor) as ctx:
        data = defs.resolve_sensor_def("release_rebuilds").evaluate_tick(ctx)
    return data, [(r.job_name, r.partition_key, r.tags.get("corpus/rebuild_reason")) for r in data.run_requests or []]


def _capture(defs, instance, tmp_path, minute, extra):
    docs = dict(DOCS, **extra)
    (tmp_path / "docs" / "docs.jsonl").write_text("".join(json.dumps({"id": k, "text": v}) + "\n" for k, v in docs.items()))
    key = snapshot_key("site_docs", T0 + timedelta(minutes=minute))
    instance.add_dynamic_partitions("snapshots", [key])
    assert defs.resolve_job_def("snapshot_job").execute_in_process(instance=instance, partition_key=key).success
    return key


def test_a_new_snapshot_rebuilds_the_release_once_per_interval_and_never_during_a_deletion(corpus_env, tmp_path, monkeypatch, capsys):
    releases = setup_release(tmp_path, monkeypatch, BODY + "rebuild: {mode: on_new_snapshots, min_interval_minutes: 30}\n")
    from corpus_assets.definitions import build_definitions

    defs = build_definitions()
    with dg.instance_for_test() as instance:
        build_snapshots(defs, instance)
        # not built yet: nothing to keep current, nothing rebuilt behind the user's back
        data, asked = _tick(defs, instance, None)
        assert asked == []
        assert run_release(defs, instance).success
        data, asked = _tick(defs, instance, data.cursor)
        assert asked == [("reports_job", None, "layers, tombstones or the registry changed")]  # current; reports refreshed
        data, asked = _tick(defs, instance, data.cursor)
        assert asked == []  # nothing changed since

        key = _capture(defs, instance, tmp_path, 10, {"itertools": ITERTOOLS})
        data, asked = _tick(defs, instance, data.cursor)
        assert asked == [("release_job", "r1", f"new snapshot(s): {key}")]
        result = defs.resolve_job_def("release_job").execute_in_process(instance=instance, partition_key="r1",
                                                                         tags=data.run_requests[0].tags)
        assert result.success
        card = (corpus_env / result.asset_materializations_for_node("release_manifest")[0].metadata["path"].value
                / "data_card.md").read_text()
        assert key in card  # the data card lists the new snapshot
        data, asked = _tick(defs, instance, data.cursor)
        assert [a[0] for a in asked] == ["reports_job"]

        # another capture within the interval: the release is debounced, the reports refresh
        key2 = _capture(defs, instance, tmp_path, 20, {"itertools": ITERTOOLS + " Also zip."})
        data, asked = _tick(defs, instance, data.cursor)
        assert [a[0] for a in asked] == ["reports_job"]
        # the mode is operational, not content: switching it does not make the release stale, and manual waits
        spec = releases / "r1.yaml"
        spec.write_text(spec.read_text().replace("rebuild: {mode: on_new_snapshots, min_interval_minutes: 30}",
                                                 "rebuild: manual"))
        data, asked = _tick(defs, instance, data.cursor)
        assert asked == []
        # no interval: it would rebuild at once — but not while a deletion is in flight
        spec.write_text(spec.read_text().replace("rebuild: manual", "rebuild: {min_interval_minutes: 0}"))
        assert corpus_main(["delete", "--record-id", "site_docs:venv", "--requester", "a@example.org", "--reason", "r"]) == 0
        data, asked = _tick(defs, instance, data.cursor)
        assert asked == []
        from corpus_assets.domain.deletion.requests import pending, set_status
        from corpus_assets.domain.storage.catalog import Catalog

        cat = Catalog.at(corpus_env / "catalog.duckdb")
        for req in pending(cat):
            set_status(cat, req.request_id, "rejected", "withdrawn by the requester")
        data, asked = _tick(defs, instance, data.cursor)
        assert asked == [("release_job", "r1", f"new snapshot(s): {key2}")]
