"""The UI explains itself: every asset, check, sensor, schedule and job has a description that renders
(no `<placeholder>` eaten by the Markdown renderer); groups follow the layers in dependency order;
kinds, owners and code versions are set on every asset (so a code change shows as unsynced); and the
key figures the UI plots over time (retention, duplicate rate, tokens, utilization...) are emitted
as numbers of one type (corpus_assets/metadata.py: KEY_FIGURES and the rule)."""

import re

import dagster as dg
import pytest

from corpus_assets.metadata import KEY_FIGURES
from release_fixture import TOKENIZER, build_snapshots, run_release, setup_release

# the layers, in the order data flows through them (docs/architecture.md)
LAYERS = ["ingestion", "curation", "dedup", "splits_tokens", "mixtures_packing", "releases", "reports"]
LAYER_OF = {
    "raw_snapshot": "ingestion", "canonical_records": "ingestion",
    "eval_registry": "curation", "curated_records": "curation",
    "minhash_signatures": "dedup", "dedup_clusters": "dedup",
    "splits": "splits_tokens", "tokenizer": "splits_tokens", "token_views": "splits_tokens",
    "mixture_plan": "mixtures_packing", "packed_shards": "mixtures_packing",
    "release_manifest": "releases",
}
OBSERVED = {"release_inputs": "dedup"}  # observed, never materialized: no code version, no key figures
COMPUTE_KINDS = {"python", "sql"}
OWNER = re.compile(r"^(team:[A-Za-z0-9_-]+|[^@\s]+@[^@\s]+\.[a-z]+)$")
# an HTML-looking tag outside a `code span`: the UI renders descriptions as Markdown and drops it
TAG = re.compile(r"</?[A-Za-z][^>\s]*( [^>]*)?>")


@pytest.fixture
def repo(corpus_env):
    from corpus_assets.definitions import build_definitions

    defs = build_definitions()
    # resolve the repository while an instance is entered, and keep `defs` referenced while it is used
    with dg.instance_for_test():
        yield defs.get_repository_def()


def _assets(repo):
    graph = repo.asset_graph
    return {key.to_user_string(): graph.get(key) for key in graph.get_all_asset_keys()}


def _described(repo):
    graph = repo.asset_graph
    out = [(f"asset {name}", node.description) for name, node in _assets(repo).items()]
    out += [(f"check {ck.asset_key.to_user_string()}.{ck.name}", graph.get_check_spec(ck).description)
            for ck in graph.asset_check_keys]
    out += [(f"sensor {s.name}", s.description) for s in repo.sensor_defs]
    out += [(f"schedule {s.name}", s.description) for s in repo.schedule_defs]
    out += [(f"job {j.name}", j.description) for j in repo.get_all_jobs() if not j.name.startswith("__ASSET_JOB")]
    return out


def test_every_asset_check_sensor_schedule_and_job_has_a_description_that_renders(repo):
    described = _described(repo)
    kinds = {what.split()[0] for what, _ in described}
    assert {"asset", "check", "sensor", "schedule", "job"} <= kinds, kinds  # the project ships each kind
    missing = [what for what, text in described if not (text and len(text.strip()) >= 20)]
    assert not missing, f"no (or a too short) description: {missing}"
    eaten = [(what, TAG.findall(re.sub(r"`[^`]*`", "", text))) for what, text in described
             if TAG.search(re.sub(r"`[^`]*`", "", text))]
    assert not eaten, f"put placeholders like <name> in `code spans`, the UI's Markdown drops them: {eaten}"


def test_groups_follow_the_layers_in_dependency_order(repo):
    assets = _assets(repo)
    groups = {name: node.group_name for name, node in assets.items()}
    assert set(groups.values()) == set(LAYERS), groups
    for name, layer in {**LAYER_OF, **OBSERVED}.items():
        assert groups.get(name) == layer, f"{name}: group {groups.get(name)!r}, expected {layer!r}"
    for name, node in assets.items():
        if name not in LAYER_OF and name not in OBSERVED:  # the SQL report models
            assert groups[name] == "reports" and "sql" in node.kinds, (name, groups[name], node.kinds)
    # data flows forward through the layers: an asset never reads from a later layer
    graph = repo.asset_graph
    for name, node in assets.items():
        for parent in graph.get(node.key).parent_keys:
            p = parent.to_user_string()
            assert LAYERS.index(groups[p]) <= LAYERS.index(groups[name]), f"{name} ({groups[name]}) reads {p} ({groups[p]})"


def test_every_asset_has_kinds_owners_and_a_code_version(repo):
    for name, node in _assets(repo).items():
        if name in OBSERVED:
            assert node.is_observable and node.kinds & COMPUTE_KINDS, (name, node.kinds)
            continue  # stores nothing and runs no transformation: its data version is the observed fingerprint
        assert node.kinds & COMPUTE_KINDS, f"{name}: kinds {node.kinds} name no compute kind ({COMPUTE_KINDS})"
        assert len(node.kinds) >= 2, f"{name}: kinds {node.kinds} name no storage kind"
        assert node.owners and all(OWNER.match(o) for o in node.owners), f"{name}: owners {node.owners}"
        # a code_version is what turns a code change into "unsynced" in the UI
        assert isinstance(node.code_version, str) and node.code_version.strip(), f"{name}: no code_version"


def test_key_figures_cover_every_layer_asset(repo):
    assert set(KEY_FIGURES) == set(LAYER_OF), set(KEY_FIGURES) ^ set(LAYER_OF)


SPEC = ("split: {fractions: [0.6, 0.2, 0.2]}\n" + TOKENIZER
        + "packing: {seq_len: 128, mode: atomic, overlength: split, boundary: mask, pad_token: '<|pad|>'}\n"
        + "shards: {positions: 512}\n")
NUMBER = re.compile(r"^[+-]?\d+(\.\d+)?%?$")


def test_key_figures_are_numbers_of_one_type_in_every_materialization(corpus_env, tmp_path, monkeypatch):
    setup_release(tmp_path, monkeypatch, SPEC)
    from corpus_assets.definitions import build_definitions

    defs = build_definitions()
    with dg.instance_for_test() as instance:
        build_snapshots(defs, instance)
        assert run_release(defs, instance).success
        for asset, figures in KEY_FIGURES.items():
            events = instance.fetch_materializations(dg.AssetKey(asset), limit=100).records
            assert events, f"{asset} was not materialized"
            for record in events:
                md = record.asset_materialization.metadata
                where = f"{asset}[{record.asset_materialization.partition}]"
                for key, kind in figures.items():
                    assert key in md, f"{where}: key figure {key!r} missing"
                    value = md[key]
                    if kind == "int":
                        assert isinstance(value, dg.IntMetadataValue), f"{where}.{key}: {value!r}"
                    else:
                        assert isinstance(value, dg.FloatMetadataValue), f"{where}.{key}: {value!r}"
                        if key.endswith(("_rate", "utilization")):
                            assert 0.0 <= value.value <= 1.0, f"{where}.{key} = {value.value} is not a rate"
                # no number smuggled in as text (it would not plot)
                texty = {k: v.value for k, v in md.items() if isinstance(v, dg.TextMetadataValue) and NUMBER.match(v.value)}
                assert not texty, f"{where}: numbers emitted as text: {texty}"
