"""Partition keys added by hand in the UI ("Add partition" accepts any text) are found, reported
by the captured_snapshots sensor, and removed by `corpus partitions prune`; valid keys stay."""

import dagster as dg

from corpus_assets.cli import main as corpus_main


def test_invalid_partition_keys_are_reported_and_pruned(corpus_env, capsys):
    from corpus_assets.definitions import build_definitions

    defs = build_definitions()
    with dg.DagsterInstance.get() as instance:
        instance.add_dynamic_partitions("snapshots", ["demo_chat.20261129T140000", "my new snapshot", "../etc.20261129T140000"])
        instance.add_dynamic_partitions("releases", ["demo", "Demo Release!"])
        with dg.build_sensor_context(instance_ref=instance.get_ref(), definitions=defs) as ctx:
            data = defs.resolve_sensor_def("captured_snapshots").evaluate_tick(ctx)
        assert not data.run_requests  # the valid key was never captured: nothing to materialize
    assert corpus_main(["partitions"]) == 0
    out = capsys.readouterr().out
    assert "invalid snapshots partition 'my new snapshot'" in out and "invalid releases partition 'Demo Release!'" in out
    assert "3 invalid partition key(s) found" in out
    assert corpus_main(["partitions", "prune"]) == 0
    assert "3 invalid partition key(s) removed; partitions now: snapshots 1, releases 1" in capsys.readouterr().out
    with dg.DagsterInstance.get() as instance:
        assert instance.get_dynamic_partitions("snapshots") == ["demo_chat.20261129T140000"]
        assert instance.get_dynamic_partitions("releases") == ["demo"]
