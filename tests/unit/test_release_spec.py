"""Release specs are validated with errors that name the field, and select snapshots deterministically."""

import pytest

from corpus_assets.domain.core.config_files import ConfigError
from corpus_assets.domain.release.spec import discover_release_specs, load_release_spec
from corpus_assets.domain.core.settings import project_root


def _spec(tmp_path, name, body):
    p = tmp_path / f"{name}.yaml"
    p.write_text(body)
    return p


def test_project_demo_spec_is_valid():
    spec = load_release_spec(project_root() / "releases" / "demo.yaml")
    assert spec.name == "demo" and "demo_chat" in spec.snapshots.sources


def test_selection_by_sources_and_time_window(tmp_path):
    spec = load_release_spec(_spec(tmp_path, "r1", """
name: r1
snapshots: {sources: [a, b], since: "2026-11-02T00:00:00Z", until: "2026-11-30T00:00:00Z"}
"""))
    available = ["a.20261101T000000", "a.20261105T120000", "b.20261129T235959", "c.20261110T000000", "b.20261201T000000"]
    assert spec.snapshots.select(available) == ["a.20261105T120000", "b.20261129T235959"]


@pytest.mark.parametrize("body, field", [
    ("name: r2\nsnapshots: {explicit: ['../x.20261101T000000']}", "snapshots.explicit"),
    ("name: r2\nsnapshots: {}", "snapshots"),
    ("name: r2\nsnapshots: {explicit: [a.20261101T000000], sources: [a]}", "snapshots"),
    ("name: r2\nsnapshots: {sources: [a], since: '2026-11-01T00:00:00'}", "snapshots.since"),
    ("name: r2\nsnapshots: {sources: [a], since: '2026-12-01T00:00:00Z', until: '2026-11-01T00:00:00Z'}", "snapshots"),
    ("name: r2\nsnapshots: {sources: [a], typo: 1}", "snapshots.typo"),
    ("name: R2\nsnapshots: {sources: [a]}", "name"),
])
def test_bad_specs_name_the_field(tmp_path, body, field):
    with pytest.raises(ConfigError) as e:
        load_release_spec(_spec(tmp_path, "r2", body))
    assert field in str(e.value)


def test_name_must_match_file_and_explicit_keys_must_exist(tmp_path):
    with pytest.raises(ConfigError, match="must match the file name"):
        load_release_spec(_spec(tmp_path, "other", "name: r3\nsnapshots: {sources: [a]}"))
    spec = load_release_spec(_spec(tmp_path, "r4", "name: r4\nsnapshots: {explicit: [a.20261101T000000]}"))
    with pytest.raises(ValueError, match="not materialized: a.20261101T000000"):
        spec.snapshots.select(["b.20261101T000000"])


def test_discovery_keeps_valid_specs_and_reports_invalid_ones(tmp_path):
    _spec(tmp_path, "good", "name: good\nsnapshots: {sources: [a]}")
    _spec(tmp_path, "bad", "name: bad\nsnapshots: {}")
    specs, errors = discover_release_specs(tmp_path)
    assert list(specs) == ["good"] and list(errors) == ["bad.yaml"]
