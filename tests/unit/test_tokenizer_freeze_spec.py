"""The tokenizer section's freeze and from_build forms are checked when a release spec is read:
what is meaningless or ambiguous is refused with an error naming the file and the field."""

from pathlib import Path

import pytest

from corpus_assets.domain.core.config_files import ConfigError
from corpus_assets.domain.release.spec import load_release_spec
from corpus_assets.domain.tokens.tokenizer import TokenizerSpec

FIXTURE_TOKENIZER = Path(__file__).resolve().parents[1] / "data" / "tokenizer" / "tiny_bpe.json"
BUILD = "a" * 64
HEAD = "name: r1\nsnapshots: {sources: [site_docs]}\n"


def _load(tmp_path, tokenizer: str):
    p = tmp_path / "r1.yaml"
    p.write_text(HEAD + f"tokenizer: {tokenizer}\n")
    return load_release_spec(p)


def _refused(tmp_path, tokenizer: str) -> str:
    with pytest.raises(ConfigError) as e:
        _load(tmp_path, tokenizer)
    return str(e.value)


def test_freeze_with_train_is_accepted_and_enters_the_identity_as_written(tmp_path):
    spec = _load(tmp_path, "{train: {vocab_size: 300}, freeze: true}")
    assert spec.tokenizer.freeze is True and spec.tokenizer.train.vocab_size == 300
    assert spec.as_written()["tokenizer"] == {"train": {"vocab_size": 300}, "freeze": True}
    assert _load(tmp_path, "{train: {vocab_size: 300}}").tokenizer.freeze is False  # off unless asked


def test_freeze_with_path_is_refused_naming_why(tmp_path):
    msg = _refused(tmp_path, f"{{path: '{FIXTURE_TOKENIZER}', freeze: true}}")
    assert "r1.yaml: invalid configuration" in msg and "\n  tokenizer: " in msg and "'freeze' applies to a trained tokenizer ('train') only" in msg
    assert "fixed by its file already" in msg


def test_freeze_with_from_build_is_refused(tmp_path):
    msg = _refused(tmp_path, f"{{from_build: 'r0@{BUILD}', freeze: true}}")
    assert "'freeze' applies to a trained tokenizer ('train') only" in msg and "always the one that build used" in msg


def test_from_build_is_accepted_and_parsed(tmp_path):
    spec = _load(tmp_path, f"{{from_build: 'r0@{BUILD}'}}")
    assert spec.tokenizer.build_ref() == ("r0", BUILD)


@pytest.mark.parametrize("ref, words", [
    (f"r0:{BUILD}", "is not '<release>@<build id>'"),
    ("r0@abc123", "is not '<release>@<build id>'"),  # a prefix is not a build id
    (f"r0@{BUILD.upper()}", "is not '<release>@<build id>'"),
    (f"../r0@{BUILD}", "tokenizer.from_build"),  # not a release name
])
def test_malformed_from_build_is_refused_on_its_field(tmp_path, ref, words):
    msg = _refused(tmp_path, f"{{from_build: '{ref}'}}")
    assert "tokenizer.from_build" in msg and words in msg


@pytest.mark.parametrize("tokenizer, words", [
    (f"{{from_build: 'r0@{BUILD}', train: {{vocab_size: 300}}}}", "not train and from_build"),
    (f"{{path: '{FIXTURE_TOKENIZER}', from_build: 'r0@{BUILD}'}}", "not path and from_build"),
    ("{freeze: true}", "not none"),
])
def test_exactly_one_way_in(tmp_path, tokenizer, words):
    msg = _refused(tmp_path, tokenizer)
    assert "give exactly one of 'path'" in msg and words in msg


def test_from_build_refuses_settings_that_come_with_the_build(tmp_path):
    msg = _refused(tmp_path, f"{{from_build: 'r0@{BUILD}', eos_token: '<|endoftext|>', special_tokens: ['<|endoftext|>']}}")
    assert "are those of the named build's tokenizer; leave out eos_token, special_tokens" in msg


@pytest.mark.parametrize("tokenizer, field", [
    ("{train: {vocab_size: 300}, frozen: true}", "tokenizer.frozen"),
    ("{train: {vocab_size: 300, freeze: true}}", "tokenizer.train.freeze"),
    (f"{{from_build: 'r0@{BUILD}', from_release: r0}}", "tokenizer.from_release"),
    ("{train: {vocab_size: 300}, freeze: maybe}", "tokenizer.freeze"),
])
def test_unknown_or_mistyped_keys_are_refused(tmp_path, tokenizer, field):
    msg = _refused(tmp_path, tokenizer)
    assert f"{field}: " in msg


def test_training_settings_are_what_freeze_compares():
    a = TokenizerSpec.model_validate({"train": {"vocab_size": 300}, "freeze": True})
    b = TokenizerSpec.model_validate({"train": {"vocab_size": 300, "min_frequency": 2}})  # the default, written out
    assert a.training_settings() == b.training_settings()  # freeze itself is not a training setting
    for change in ({"train": {"vocab_size": 301}}, {"train": {"vocab_size": 300, "min_frequency": 1}},
                   {"train": {"vocab_size": 300}, "special_tokens": ["<|endoftext|>", "<|pad|>"]},
                   {"train": {"vocab_size": 300}, "special_tokens": ["<|pad|>", "<|endoftext|>"]}):
        assert TokenizerSpec.model_validate(change).training_settings() != a.training_settings(), change


def _version(manifest: dict):
    from corpus_assets.domain.storage.layer_store import LayerVersion

    base = {"content_digest": "c" * 64, "tokenizer_digest": "d" * 64, "vocab_size": 300}
    return LayerVersion(Path("/nonexistent"), "tokenizer", "r1", "c" * 16, {**base, **manifest})


def test_tokenizer_versions_written_before_provenance_still_say_where_their_ids_come_from():
    from corpus_assets.domain.release.manifest import TokenizerInfo
    from corpus_assets.domain.tokens.tokenizer_layer import tokenizer_info

    trained = _version({"trained_on": "train split", "training_records": 5, "splits_version": "a" * 64})
    here = tokenizer_info(trained, "a" * 64)
    assert here["provenance"]["how"] == "trained" and "5 records" in here["origin"]
    later = tokenizer_info(trained, "b" * 64)  # a later build: its splits are not what the tokenizer learnt from
    assert later["provenance"] == {"how": "frozen", "tokenizer_version": "c" * 64, "release": "r1",
                                   "trained_on_splits_version": "a" * 64, "training_records": 5}
    assert later["origin"].startswith("frozen: ")
    loaded = tokenizer_info(_version({"loaded_from": "tok.json"}), "a" * 64)
    assert loaded["provenance"] == {"how": "loaded", "tokenizer_version": "c" * 64, "loaded_from": "tok.json"}
    for info in (here, later, loaded):
        TokenizerInfo.model_validate(info)  # what the release manifest's schema accepts
