"""sources.yaml is validated with errors that name the file and the bad field."""

from pathlib import Path

import pytest

from corpus_assets.domain.core.settings import project_root
from corpus_assets.domain.ingest.sources_config import ConfigError, load_sources, parse_sources

GOV = {"license": "CC0-1.0", "rights_evidence": "https://example.org/rights"}


def _write(tmp_path, text):
    p = tmp_path / "sources.yaml"
    p.write_text(text)
    return p


def test_project_sources_file_is_valid():
    cfg = load_sources(project_root() / "sources.yaml", env={"CORPUS_HOME": "/tmp/x", "CORPUS_PYDOC_PORT": "9999"})
    crawl = cfg.get("pydocs")
    assert crawl.seeds == ["http://127.0.0.1:9999/"]
    assert crawl.allowed_hosts == ["127.0.0.1:9999"]
    assert cfg.get("demo_chat").root == Path("/tmp/x/demo_inputs")


def test_error_names_the_field(tmp_path):
    p = _write(tmp_path, """
sources:
  - id: ok
    kind: http_crawl
    seeds: ["http://127.0.0.1:1/"]
    max_pages: 0
    governance: {license: MIT, rights_evidence: x}
  - id: second
    kind: jsonl
    root: data
    include: ["*.jsonl"]
    adapter: alpaca
    governance: {license: MIT}
""")
    with pytest.raises(ConfigError) as e:
        load_sources(p)
    msg = str(e.value)
    assert str(p) in msg
    assert "sources[0].max_pages" in msg
    assert "sources[1].governance.rights_evidence" in msg


@pytest.mark.parametrize(
    "source, field",
    [
        ({"id": "a", "kind": "ftp", "governance": GOV}, "sources[0]"),
        ({"id": "../a", "kind": "local_dir", "root": ".", "governance": GOV}, "sources[0].id"),
        ({"id": "a", "kind": "local_dir", "root": ".", "include": ["../../etc/*"], "governance": GOV}, "sources[0].include"),
        ({"id": "a", "kind": "local_dir", "root": ".", "include": ["/etc/*"], "governance": GOV}, "sources[0].include"),
        ({"id": "a", "kind": "jsonl", "root": ".", "include": ["*.jsonl"], "adapter": "guess", "governance": GOV}, "sources[0].adapter"),
        ({"id": "a", "kind": "http_crawl", "seeds": ["file:///etc/passwd"], "governance": GOV}, "sources[0].seeds"),
        ({"id": "a", "kind": "http_crawl", "seeds": ["http://h/"], "schedule": "every hour", "governance": GOV}, "sources[0].schedule"),
        ({"id": "a", "kind": "local_dir", "root": ".", "governance": GOV, "typo_field": 1}, "sources[0].typo_field"),
    ],
)
def test_bad_sources_are_rejected_naming_the_field(source, field):
    with pytest.raises(ConfigError) as e:
        parse_sources({"sources": [source]})
    assert field in str(e.value)


def test_duplicate_ids_and_unknown_source():
    src = {"id": "a", "kind": "local_dir", "root": ".", "governance": GOV}
    with pytest.raises(ConfigError, match="duplicate source id 'a'"):
        parse_sources({"sources": [src, src]})
    cfg = parse_sources({"sources": [src]})
    with pytest.raises(KeyError, match="unknown source 'b'"):
        cfg.get("b")


def test_env_interpolation_and_missing_variable(tmp_path):
    p = _write(tmp_path, """
sources:
  - id: a
    kind: local_dir
    root: ${MY_ROOT}
    governance: {license: MIT, rights_evidence: x}
""")
    assert load_sources(p, env={"MY_ROOT": "/data"}).get("a").root == Path("/data")
    with pytest.raises(ConfigError, match=r"\$\{MY_ROOT\} is not set"):
        load_sources(p, env={})


def test_not_yaml_and_not_a_mapping(tmp_path):
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_sources(_write(tmp_path, "sources: [unclosed"))
    with pytest.raises(ConfigError, match="expected a mapping"):
        load_sources(_write(tmp_path, "- just a list"))
    with pytest.raises(ConfigError, match="cannot read"):
        load_sources(tmp_path / "missing.yaml")


def test_relative_root_resolves_against_the_file(tmp_path):
    p = _write(tmp_path, """
sources:
  - id: a
    kind: local_dir
    root: docs
    governance: {license: MIT, rights_evidence: x}
""")
    assert load_sources(p, env={}).get("a").root == (tmp_path / "docs").resolve()
