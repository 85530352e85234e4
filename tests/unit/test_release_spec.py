"""Release specs are checked completely when read, with errors that name the file and the field; they
select snapshots deterministically and enter build ids as written."""

import shutil
from pathlib import Path
from typing import Optional

import pytest
from pydantic import BaseModel, ConfigDict, Field

from corpus_assets.domain.core.config_files import ConfigError, ConfigProblem, read_yaml
from corpus_assets.domain.core.hashing import canonical_digest
from corpus_assets.domain.dedup.clusters_layer import ReleaseDedupPolicy
from corpus_assets.domain.pack.mixture import MixtureSpec
from corpus_assets.domain.pack.packing import PackingPolicy, packing_policy_version
from corpus_assets.domain.pack.shards_layer import PackingSection, ShardSpec, resolve_packing
from corpus_assets.domain.release.spec import SnapshotSelection, discover_release_specs, load_release_spec
from corpus_assets.domain.core.settings import project_root
from corpus_assets.domain.tokens.splits import SplitPolicy
from corpus_assets.domain.tokens.token_views import TokenViewPolicy
from corpus_assets.domain.tokens.tokenizer import TokenizerSpec

FIXTURE_TOKENIZER = Path(__file__).resolve().parents[1] / "data" / "tokenizer" / "tiny_bpe.json"


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
    assert isinstance(errors["bad.yaml"], ConfigError) and [p.field for p in errors["bad.yaml"].problems] == ["snapshots"]


# --- typed sections, checked when the spec is read -----------------------------------------------

DEMO_AS_WRITTEN = {  # releases/demo.yaml as written: what every demo build id is computed from
    "name": "demo",
    "description": "Demo corpus built by `corpus demo` from the local pydoc crawl, the project docs and the demo dumps.",
    "snapshots": {
        "explicit": [],
        "sources": ["pydocs", "project_docs", "demo_chat", "demo_sharegpt", "demo_instructions", "demo_preferences",
                    "demo_reasoning", "demo_tasks", "demo_recipe"],
        "since": None,
        "until": None,
    },
    "dedup": {"exact": True, "lsh": {"threshold": 0.8, "num_perm": 128, "bands": 20, "rows": 5, "bucket_cap": 1000}},
    "split": {"names": ["train", "validation", "test"], "fractions": [0.8, 0.1, 0.1]},
    "tokenizer": {"train": {"vocab_size": 1000, "min_frequency": 2}, "special_tokens": ["<|endoftext|>", "<|pad|>"],
                  "eos_token": "<|endoftext|>"},
    "token_views": {"chat_template": "chatml-1", "train_on": "assistant", "reasoning": "whole_trace", "max_tokens": 8192},
    "mixture": {"unit": "documents", "alpha": 0.5, "budget": 60, "replacement": True, "seed": 0, "epoch_limit": 8},
    "packing": {"seq_len": 512, "mode": "atomic", "fit": "in_order", "overlength": "split", "boundary": "mask",
                "tail": "pad", "pad_token": "<|pad|>"},
    "shards": {"positions": 8192},
    "uses": ["post_training"],
}


class _UntypedReleaseSpec(BaseModel):
    """The release spec model before its sections were typed (dict sections, extra="allow"):
    ``as_written`` must give exactly its ``model_dump(mode="json")``, or build ids change."""

    model_config = ConfigDict(extra="allow")
    name: str
    description: str = ""
    snapshots: SnapshotSelection
    dedup: dict = Field(default_factory=dict)
    split: dict = Field(default_factory=dict)
    tokenizer: dict = Field(default_factory=dict)
    token_views: dict = Field(default_factory=dict)
    mixture: Optional[dict] = None
    packing: dict = Field(default_factory=dict)
    shards: dict = Field(default_factory=dict)


def _untyped_dump(path) -> dict:
    out = _UntypedReleaseSpec.model_validate(read_yaml(path)).model_dump(mode="json")
    out["snapshots"].pop("retain")  # a default added later: not in the identity unless written
    out.pop("rebuild", None)  # operational (when to rebuild), never part of the identity
    return out


def test_as_written_is_the_untyped_dump_for_the_demo_spec():
    path = project_root() / "releases" / "demo.yaml"
    spec = load_release_spec(path)
    assert spec.as_written() == DEMO_AS_WRITTEN
    assert list(spec.as_written()) == list(DEMO_AS_WRITTEN)  # same key order too
    assert spec.as_written() == _untyped_dump(path)
    # the typed sections do carry defaults the YAML does not write: they must not leak into it
    assert spec.model_dump(mode="json")["packing"]["open_blocks"] == 64 and "open_blocks" not in spec.as_written()["packing"]
    assert canonical_digest(spec.as_written()) != canonical_digest(spec.model_dump(mode="json"))


def test_as_written_of_a_minimal_spec_has_empty_sections_and_no_mixture(tmp_path):
    path = _spec(tmp_path, "m1", "name: m1\nsnapshots: {sources: [a]}\n")
    spec = load_release_spec(path)
    assert spec.as_written() == {
        "name": "m1", "description": "",
        "snapshots": {"explicit": [], "sources": ["a"], "since": None, "until": None},
        "dedup": {}, "split": {}, "tokenizer": {}, "token_views": {}, "mixture": None, "packing": {}, "shards": {},
    }
    assert spec.as_written() == _untyped_dump(path)
    # typed defaults: seq_len 2048 when absent, the default split and token view policies
    assert spec.packing.seq_len == 2048 and spec.split.fractions == [0.8, 0.1, 0.1] and spec.tokenizer is None


def test_as_written_keeps_values_as_written_not_coerced(tmp_path):
    # ints where the models hold floats, a time window, an explicit null mixture: all as the YAML has them
    path = _spec(tmp_path, "m2", """
name: m2
description: written
snapshots: {sources: [a, b], since: "2026-11-02T01:00:00+01:00"}
split: {names: [train, test], fractions: [1, 0.0]}
mixture: null
packing: {seq_len: 64, tail: drop}
shards: {positions: 128}
""")
    with pytest.raises(ConfigError, match=r"fractions\[1\] = 0.0 is outside"):
        load_release_spec(path)
    path.write_text(path.read_text().replace("[1, 0.0]", "[1]").replace("[train, test]", "[train]"))
    spec = load_release_spec(path)
    written = spec.as_written()
    assert written["split"] == {"names": ["train"], "fractions": [1]} and isinstance(written["split"]["fractions"][0], int)
    assert written["snapshots"]["since"] == "2026-11-02T00:00:00Z" and written["mixture"] is None
    assert written == _untyped_dump(path)
    assert canonical_digest(written) == canonical_digest(load_release_spec(path).as_written())  # stable


def test_sections_are_typed_models():
    spec = load_release_spec(project_root() / "releases" / "demo.yaml")
    assert isinstance(spec.dedup, ReleaseDedupPolicy) and spec.dedup.lsh.params() == (20, 5)
    assert isinstance(spec.split, SplitPolicy) and spec.split.names[0] == "train"
    assert isinstance(spec.tokenizer, TokenizerSpec) and spec.tokenizer.train.vocab_size == 1000
    assert isinstance(spec.token_views, TokenViewPolicy) and spec.token_views.max_tokens == 8192
    assert isinstance(spec.mixture, MixtureSpec) and spec.mixture.budget == 60
    assert isinstance(spec.packing, PackingSection) and spec.packing.pad_token == "<|pad|>"
    assert isinstance(spec.shards, ShardSpec) and spec.shards.positions == 8192
    for model in (ReleaseDedupPolicy, SplitPolicy, TokenizerSpec, TokenViewPolicy, MixtureSpec, PackingSection, ShardSpec):
        assert model.model_config.get("extra") == "forbid", model


BASE = "name: r5\nsnapshots: {sources: [site_docs, site_chat]}\n"
TOKENIZER = f"tokenizer: {{path: '{FIXTURE_TOKENIZER}', special_tokens: ['<|endoftext|>', '<|pad|>']}}\n"


@pytest.mark.parametrize("body, field, words", [
    ("packng: {seq_len: 128}\n", "packng", "Extra inputs are not permitted"),
    ("packing: {seq_len: x}\n", "packing.seq_len", "Input should be a valid integer"),
    ("packing: {seq_len: 0}\n", "packing.seq_len", "greater than or equal to 1"),
    ("packing: {seq_len: 128, sep_len: 4}\n", "packing.sep_len", "Extra inputs are not permitted"),
    ("packing: {seq_len: 128, boundary: bos}\n", "packing.bos_token", "boundary is 'bos' but no bos_token is named"),
    ("packing: {seq_len: 128, mode: atomic, boundary: none}\n", "packing", "boundary='none' is only allowed with mode='stream'"),
    ("packing: {seq_len: 128}\nshards: {positions: 100}\n", "shards.positions", "shard_positions (S=100) must be >= seq_len (T=128)"),
    ("shards: {positions: 1000}\n", "shards.positions", "must be >= seq_len (T=2048)"),  # the default T counts too
    ("shards: {postions: 1000}\n", "shards.postions", "Extra inputs are not permitted"),
    ("split:\n", "split", "Input should be a valid dictionary"),
    ("split: {fractions: [0.6, 0.5, -0.1]}\n", "split.fractions", "outside (0, 1]"),
    ("split: {nams: [a]}\n", "split.nams", "Extra inputs are not permitted"),
    ("dedup: {lsh: {threshold: 2}}\n", "dedup.lsh.threshold", "less than or equal to 1"),
    ("dedup: {exakt: true}\n", "dedup.exakt", "Extra inputs are not permitted"),
    ("tokenizer: {path: missing/tok.json}\n", "tokenizer.path", "missing/tok.json: no such file"),
    ("tokenizer: {path: '.'}\n", "tokenizer.path", "not a file"),
    ("tokenizer: {train: {vocab_size: 100}}\n", "tokenizer.train.vocab_size", "greater than or equal to 257"),
    ("tokenizer: {train: {vocab_size: 300}, chat_template_version: chatml-2}\n", "tokenizer.chat_template_version",
     "unknown chat template 'chatml-2'"),
    (TOKENIZER + "token_views: {chat_template: chatml-9}\n", "token_views.chat_template", "Input should be 'chatml-1'"),
    (TOKENIZER + "token_views: {max_tokens: 0}\n", "token_views.max_tokens", "greater than or equal to 1"),
    (TOKENIZER + "token_views: {train_on: everything}\n", "token_views.train_on", "Input should be 'assistant' or 'all'"),
    ("mixture: {unit: documents, weights: {site_docs: 0.5, site_chat: 0.4}, budget: 10}\n", "mixture.weights", "sum to 1"),
    ("mixture: {unit: documents, alpha: 0.5, budget: {tokens: 1000}}\n", "mixture.budget", "valid integer"),
    ("mixture: {unit: documents, weights: {site_docs: 0.5, web: 0.5}, budget: 10}\n", "mixture.weights",
     "unknown source(s) ['web']"),
    ("mixture: {unit: documents, budget: 10, phases: [{until: 1.0, weights: {web: 1.0}}]}\n", "mixture.phases[0].weights",
     "unknown source(s) ['web']"),
    ("mixture: {unit: documents, alpha: 0.5, budget: 10, seeed: 1}\n", "mixture.seeed", "Extra inputs are not permitted"),
])
def test_every_section_is_checked_when_the_spec_is_read(tmp_path, body, field, words):
    path = _spec(tmp_path, "r5", BASE + body)
    with pytest.raises(ConfigError) as e:
        load_release_spec(path)
    assert str(e.value).startswith(f"{path}: invalid configuration\n")  # today's message, naming the file ...
    assert f"\n  {field}: " in str(e.value) and words in str(e.value)  # ... and the field
    assert e.value.origin == str(path)
    assert [p.field for p in e.value.problems] == [field], e.value.problems
    assert words in e.value.problems[0].message


def test_cross_section_problems_are_reported_together(tmp_path):
    path = _spec(tmp_path, "r5", BASE + "tokenizer: {path: nope.json}\nshards: {positions: 8}\n"
                 "mixture: {unit: documents, weights: {web: 1.0}, budget: 4}\n")
    with pytest.raises(ConfigError) as e:
        load_release_spec(path)
    assert [p.field for p in e.value.problems] == ["tokenizer.path", "shards.positions", "mixture.weights"]
    assert e.value.problem_lines("releases/r5.yaml") == [
        f"releases/r5.yaml: tokenizer.path: {tmp_path / 'nope.json'}: no such file "
        f"(a relative path is read from the releases folder {tmp_path})",
        "releases/r5.yaml: shards.positions: shard_positions (S=8) must be >= seq_len (T=2048): a shard holds whole "
        "blocks only (packing.seq_len)",
        "releases/r5.yaml: mixture.weights: names unknown source(s) ['web']; the release's snapshots select sources "
        "['site_chat', 'site_docs']",
    ]


def test_tokenizer_path_is_relative_to_the_releases_folder(tmp_path):
    (tmp_path / "tok").mkdir()
    shutil.copy(FIXTURE_TOKENIZER, tmp_path / "tok" / "t.json")
    spec = load_release_spec(_spec(tmp_path, "r6", "name: r6\nsnapshots: {sources: [a]}\ntokenizer: {path: tok/t.json}\n"))
    assert spec.tokenizer_spec().path == Path("tok/t.json")
    assert spec.as_written()["tokenizer"] == {"path": "tok/t.json"}


def test_mixture_sources_of_explicit_snapshots_and_tags(tmp_path):
    explicit = "name: r7\nsnapshots: {explicit: [a.20261101T000000]}\n"
    with pytest.raises(ConfigError, match=r"mixture.weights: names unknown source\(s\) \['b'\]; .* sources \['a'\]"):
        load_release_spec(_spec(tmp_path, "r7", explicit + "mixture: {unit: documents, weights: {a: 0.5, b: 0.5}, budget: 4}\n"))
    # key: tag weighs tags, not sources: nothing to check before the data is read
    spec = load_release_spec(_spec(tmp_path, "r7", explicit + "mixture: {unit: documents, key: tag, weights: {web: 1}, budget: 4}\n"))
    assert spec.mixture.key == "tag"


def test_absent_tokenizer_is_refused_by_name_when_it_is_needed(tmp_path):
    spec = load_release_spec(_spec(tmp_path, "r8", "name: r8\nsnapshots: {sources: [a]}\n"))
    with pytest.raises(ConfigError, match=r"releases/r8.yaml: tokenizer: the spec has no tokenizer section"):
        spec.tokenizer_spec()


def test_packing_section_resolves_to_the_same_policy_and_only_token_names_wait(tmp_path):
    spec = load_release_spec(_spec(tmp_path, "r9", "name: r9\nsnapshots: {sources: [a]}\n"
                                   "packing: {seq_len: 64, boundary: bos, bos_token: '<s>', pad_token: '<pad>', pad_id: 3}\n"))
    vocab = {"<s>": 5, "<pad>": 7}
    policy, bos_id = resolve_packing(spec.packing, vocab.get, "releases/r9.yaml")
    assert type(policy) is PackingPolicy and bos_id == 5
    assert policy == PackingPolicy(seq_len=64, boundary="bos", pad_id=7)  # pad_token overrides pad_id
    assert packing_policy_version(policy) == packing_policy_version(PackingPolicy(seq_len=64, boundary="bos", pad_id=7))
    # the default T; and a dict section is still accepted (validated the same way)
    assert resolve_packing({}, vocab.get, "x")[0] == PackingPolicy(seq_len=2048)
    with pytest.raises(ConfigError, match=r"x: packing: invalid configuration\n  packng: Extra inputs"):
        resolve_packing({"packng": 1}, vocab.get, "x")
    with pytest.raises(ValueError, match=r"releases/r9.yaml: packing.bos_token '<s>' is not in the tokenizer's vocabulary"):
        resolve_packing(spec.packing, {"<pad>": 7}.get, "releases/r9.yaml")
    with pytest.raises(ValueError, match=r"packing.pad_token '<pad>' is not in the tokenizer's vocabulary"):
        resolve_packing(spec.packing, {"<s>": 5}.get, "releases/r9.yaml")


def test_config_error_keeps_its_message_and_carries_the_problems(tmp_path):
    path = _spec(tmp_path, "r10", "name: r10\nsnapshots: {sources: [a]}\npackng: {}\npacking: {seq_len: x}\n")
    with pytest.raises(ConfigError) as e:
        load_release_spec(path)
    assert str(e.value) == (f"{path}: invalid configuration\n"
                            "  packing.seq_len: Input should be a valid integer, unable to parse string as an integer\n"
                            "  packng: Extra inputs are not permitted")
    assert e.value.problems == (
        ConfigProblem("packing.seq_len", "Input should be a valid integer, unable to parse string as an integer"),
        ConfigProblem("packng", "Extra inputs are not permitted"),
    )
    assert e.value.problem_lines() == [f"{path}: packing.seq_len: Input should be a valid integer, unable to parse "
                                       "string as an integer", f"{path}: packng: Extra inputs are not permitted"]
    # errors that are not about a field: one line naming the file
    with pytest.raises(ConfigError) as e:
        load_release_spec(tmp_path / "absent.yaml")
    assert e.value.problem_lines("releases/absent.yaml")[0].startswith("releases/absent.yaml: cannot read config file:")
    with pytest.raises(ConfigError) as e:
        load_release_spec(_spec(tmp_path, "r11", "name: r12\nsnapshots: {sources: [a]}\n"))
    assert e.value.problem_lines("r11.yaml") == ["r11.yaml: name: name 'r12' must match the file name 'r11'"]
    assert ConfigError("plain\nmessage").problem_lines("f.yaml") == ["f.yaml: plain message"]


def test_retain_and_uses_enter_the_identity_only_when_written(tmp_path):
    base = "name: r5\nsnapshots: {sources: [a]}\n"
    plain = load_release_spec(_spec(tmp_path, "r5", base))
    assert (plain.snapshots.retain, plain.uses) == ("latest", ["pretraining"])
    assert "uses" not in plain.as_written() and "retain" not in plain.as_written()["snapshots"]
    union = load_release_spec(_spec(tmp_path, "r5", "name: r5\nuses: [post_training, evaluation]\n"
                                                   "snapshots: {sources: [a], retain: union}\n"))
    assert (union.snapshots.retain, union.uses) == ("union", ["post_training", "evaluation"])
    assert union.as_written()["snapshots"]["retain"] == "union" and union.as_written()["uses"] == ["post_training", "evaluation"]
    for bad, field in (("uses: [research]", "uses[0]"), ("uses: []", "uses"), ("snapshots: {sources: [a], retain: all}",
                                                                              "snapshots.retain")):
        text = base.replace("snapshots: {sources: [a]}", bad) if bad.startswith("snapshots") else base + bad + "\n"
        with pytest.raises(ConfigError) as err:
            load_release_spec(_spec(tmp_path, "r5", text))
        assert field in [p.field for p in err.value.problems]


def test_rebuild_policy_is_typed_accepts_the_shorthand_and_stays_out_of_the_identity(tmp_path):
    base = "name: r\nsnapshots: {sources: [a]}\n"
    default = load_release_spec(_spec(tmp_path, "r", base))
    assert (default.rebuild.mode, default.rebuild.min_interval_minutes) == ("on_new_snapshots", 30)
    manual = load_release_spec(_spec(tmp_path, "r", base + "rebuild: manual\n"))
    assert manual.rebuild.mode == "manual"
    tuned = load_release_spec(_spec(tmp_path, "r", base + "rebuild: {min_interval_minutes: 0}\n"))
    assert (tuned.rebuild.mode, tuned.rebuild.min_interval_minutes) == ("on_new_snapshots", 0)
    assert default.as_written() == manual.as_written() == tuned.as_written()
    for bad, field in (("rebuild: sometimes", "rebuild.mode"), ("rebuild: {min_interval_minutes: -1}", "rebuild.min_interval_minutes"),
                       ("rebuild: {mode: manual, every: 5}", "rebuild.every")):
        with pytest.raises(ConfigError, match=field.replace(".", r"\.")):
            load_release_spec(_spec(tmp_path, "r", base + bad + "\n"))
