"""Every Dagster asset is described by the layer registry (so deletion, the build id and the jobs,
which iterate the registry, cannot forget it), with the same partitioning and group."""

import dagster as dg

from corpus_assets.domain.layers import registry
from corpus_assets.domain.reports.sql_models import discover_models


def _described(defs: dg.Definitions) -> dict:
    with dg.instance_for_test():  # definitions resolve while an instance is entered
        return {spec.key.to_user_string(): (getattr(spec.partitions_def, "name", None), spec.group_name)
                for spec in defs.resolve_all_asset_specs()}


def _models() -> set[str]:
    from corpus_assets.assets.reports.sql_assets import SQL_FOLDER

    return {m.name for m in discover_models(SQL_FOLDER)}


def test_every_dagster_asset_is_a_registered_layer(corpus_env):
    from corpus_assets.definitions import build_definitions

    assert registry.undescribed(_described(build_definitions()), _models()) == []


def test_an_asset_the_registry_does_not_describe_fails_the_check(corpus_env):
    from corpus_assets.definitions import build_definitions

    defs = build_definitions()

    @dg.asset(partitions_def=dg.DynamicPartitionsDefinition(name="snapshots"), group_name="curation")
    def language_scores():  # a new per-snapshot layer someone forgot to register
        return None

    extended = dg.Definitions.merge(defs, dg.Definitions(assets=[language_scores]))
    problems = registry.undescribed(_described(extended), _models())
    assert len(problems) == 1 and problems[0].startswith("language_scores: a Dagster asset the layer registry does not describe")


def test_jobs_select_what_the_registry_says(corpus_env):
    from corpus_assets.definitions import build_definitions

    defs = build_definitions()

    def selected(job: str) -> set[str]:
        with dg.instance_for_test():
            return {k.to_user_string() for k in defs.resolve_job_def(job).asset_layer.selected_asset_keys}

    assert selected("snapshot_job") == {la.asset for la in registry.snapshot_layers()}
    # release_job also observes the release's input fingerprint first (the one observed asset)
    assert selected("release_job") == {la.asset for la in registry.release_layers()} | {registry.RELEASE_INPUTS}
    assert selected("registry_job") == {registry.EVAL_REGISTRY}
    assert selected("reports_job") == _models()
