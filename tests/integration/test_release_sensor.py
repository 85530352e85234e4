"""The release_specs sensor registers valid specs as partitions, through the real sensor evaluation."""

import json

import dagster as dg


def test_sensor_registers_valid_specs_once_and_reports_invalid_ones(corpus_env, tmp_path, monkeypatch):
    folder = tmp_path / "releases"
    folder.mkdir()
    (folder / "alpha.yaml").write_text("name: alpha\nsnapshots: {sources: [demo_chat]}\n")
    (folder / "broken.yaml").write_text("name: broken\nsnapshots: {}\n")
    monkeypatch.setenv("CORPUS_RELEASES", str(folder))
    from corpus_assets.definitions import build_definitions

    defs = build_definitions()
    with dg.instance_for_test() as instance:
        sensor = defs.resolve_sensor_def("release_specs")
        # entered, so the instance each context opens from the ref is closed here, not when the
        # context is garbage-collected during a later test (its exit would put that test's
        # Dagster state storage back to this dead instance's)
        with dg.build_sensor_context(instance_ref=instance.get_ref(), definitions=defs) as ctx:
            data = sensor.evaluate_tick(ctx)
        for req in data.dynamic_partitions_requests:
            instance.add_dynamic_partitions(req.partitions_def_name, list(req.partition_keys))
        assert instance.get_dynamic_partitions("releases") == ["alpha"]
        # a second tick with the same specs requests nothing; a new spec is added
        (folder / "beta.yaml").write_text("name: beta\nsnapshots: {sources: [demo_tasks]}\n")
        with dg.build_sensor_context(instance_ref=instance.get_ref(), cursor=data.cursor, definitions=defs) as ctx:
            data = sensor.evaluate_tick(ctx)
        assert [list(r.partition_keys) for r in data.dynamic_partitions_requests] == [["beta"]]


def _tick_log(instance, data) -> list[dict]:
    """The tick's captured log records: what the UI shows under the sensor's tick -> logs (the
    instance's compute log manager, keyed by the tick's log key)."""
    from dagster._core.definitions.instigation_logger import get_instigation_log_records

    assert data.log_key, "the tick captured no logs"
    return get_instigation_log_records(instance, data.log_key)


def test_sensor_never_registers_an_invalid_spec_and_its_tick_log_names_file_and_field(corpus_env, tmp_path, monkeypatch):
    folder = tmp_path / "releases"
    folder.mkdir()
    (folder / "good.yaml").write_text("name: good\nsnapshots: {sources: [demo_chat]}\npacking: {seq_len: 256}\n")
    (folder / "typo.yaml").write_text("name: typo\nsnapshots: {sources: [demo_chat]}\npackng: {seq_len: 256}\n")
    (folder / "notint.yaml").write_text("name: notint\nsnapshots: {sources: [demo_chat]}\npacking: {seq_len: \"x\"}\n")
    monkeypatch.setenv("CORPUS_RELEASES", str(folder))
    from corpus_assets.definitions import build_definitions
    from corpus_assets.domain.core.hashing import canonical_digest
    from corpus_assets.domain.release.spec import load_release_spec

    defs = build_definitions()
    with dg.instance_for_test() as instance:
        sensor = defs.resolve_sensor_def("release_specs")  # resolved while an instance is entered
        # repository and sensor name give the tick a log key, as the daemon does: context.log is captured
        with dg.build_sensor_context(instance_ref=instance.get_ref(), definitions=defs,
                                     repository_name="__repository__", sensor_name="release_specs") as ctx:
            data = sensor.evaluate_tick(ctx)
        for req in data.dynamic_partitions_requests:
            instance.add_dynamic_partitions(req.partitions_def_name, list(req.partition_keys))
        assert instance.get_dynamic_partitions("releases") == ["good"]
        # the cursor digests the spec as written, the same mapping release_manifest puts into build ids
        assert json.loads(data.cursor) == {"good": canonical_digest(load_release_spec(folder / "good.yaml").as_written())}

        records = _tick_log(instance, data)
        warnings = [r["dagster_meta"]["orig_message"] for r in records if r["levelname"] == "WARNING"]
        assert len(warnings) == 2, warnings
        notint, typo = warnings  # sorted by file name
        assert notint.startswith("release spec notint.yaml not registered (1 problem):\n")
        assert f"{folder / 'notint.yaml'}: packing.seq_len: Input should be a valid integer" in notint
        assert typo.startswith("release spec typo.yaml not registered (1 problem):\n")
        assert f"{folder / 'typo.yaml'}: packng: Extra inputs are not permitted" in typo
        assert not any("good.yaml" in w for w in warnings)
        infos = [r["dagster_meta"]["orig_message"] for r in records if r["levelname"] == "INFO"]
        assert infos == ["registering releases: good"]

        # a registered spec edited into an invalid one: nothing is added, the log says its partition stays
        (folder / "good.yaml").write_text("name: good\nsnapshots: {sources: [demo_chat]}\npacking: {seq_len: 256, boundary: bos}\n")
        ctx = dg.SensorEvaluationContext(instance_ref=instance.get_ref(), cursor=data.cursor, definitions=defs,
                                         repository_name="__repository__", sensor_name="release_specs",
                                         log_key=["__repository__", "release_specs", "second_tick"])
        with ctx:
            data = sensor.evaluate_tick(ctx)
        assert data.dynamic_partitions_requests == [] and json.loads(data.cursor) == {}
        # the tick did work without adding anything: it says what it found, not "empty result"
        assert data.skip_message == "3 invalid spec(s): good.yaml, notint.yaml, typo.yaml"
        warnings = [r["dagster_meta"]["orig_message"] for r in _tick_log(instance, data) if r["levelname"] == "WARNING"]
        good = [w for w in warnings if "good.yaml" in w]
        assert len(good) == 1 and "partition 'good' was registered earlier" in good[0]
        assert f"{folder / 'good.yaml'}: packing.bos_token: boundary is 'bos' but no bos_token is named" in good[0]
        assert instance.get_dynamic_partitions("releases") == ["good"]
