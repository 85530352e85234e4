"""The release_specs sensor registers valid specs as partitions, through the real sensor evaluation."""

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
        ctx = dg.build_sensor_context(instance_ref=instance.get_ref(), definitions=defs)
        data = sensor.evaluate_tick(ctx)
        for req in data.dynamic_partitions_requests:
            instance.add_dynamic_partitions(req.partitions_def_name, list(req.partition_keys))
        assert instance.get_dynamic_partitions("releases") == ["alpha"]
        # a second tick with the same specs requests nothing; a new spec is added
        (folder / "beta.yaml").write_text("name: beta\nsnapshots: {sources: [demo_tasks]}\n")
        ctx = dg.build_sensor_context(instance_ref=instance.get_ref(), cursor=data.cursor, definitions=defs)
        data = sensor.evaluate_tick(ctx)
        assert [list(r.partition_keys) for r in data.dynamic_partitions_requests] == [["beta"]]
