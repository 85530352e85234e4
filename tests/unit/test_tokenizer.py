"""The release tokenizer: digest, deterministic byte-level BPE training, loading and its errors,
and GPT-2 (converted from the openai-whisper package) against tiktoken's r50k_base."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from corpus_assets.domain.tokens.tokenizer import (
    BpeTrainSpec,
    FrozenTokenizer,
    TokenizerLoadError,
    TokenizerSpec,
    load_tokenizer,
    tokenizer_digest,
    train_bpe,
)

PROJECT = Path(__file__).resolve().parents[2]
FIXTURE = PROJECT / "tests" / "data" / "tokenizer" / "tiny_bpe.json"
SCRIPT = PROJECT / "scripts" / "gpt2_tokenizer_from_whisper.py"

TRAIN_TEXTS = [
    "The quick brown fox jumps over the lazy dog.",
    "def tokenize(text):\n    return text.split()\n",
    "Ünïcödé café naïve — “quoted” text, 日本語, emoji 😀👍🏽",
    "whitespace   runs\t\tand\n\n\nnewlines",
    "numbers 1234567890 and 3.14159",
] * 20
SPECIALS = ["<|endoftext|>", "<|pad|>"]


def _train_spec(vocab_size: int = 400, **kw) -> TokenizerSpec:
    return TokenizerSpec(train=BpeTrainSpec(vocab_size=vocab_size, min_frequency=2), special_tokens=SPECIALS, **kw)


def _path_spec(path: Path, **kw) -> TokenizerSpec:
    return TokenizerSpec(path=path, special_tokens=kw.pop("special_tokens", SPECIALS), **kw)


@pytest.fixture(scope="module")
def trained() -> FrozenTokenizer:
    return train_bpe(TRAIN_TEXTS, _train_spec())


# --- digest -----------------------------------------------------------------------------------


def test_digest_is_stable_and_ignores_formatting(trained):
    text = trained.to_json()
    d = tokenizer_digest(text, SPECIALS, "chatml-1", eos_token="<|endoftext|>")
    assert d == trained.digest
    assert d == tokenizer_digest(text, SPECIALS, "chatml-1", eos_token="<|endoftext|>")
    reformatted = json.dumps(json.loads(text), indent=4)  # same content, different bytes
    assert tokenizer_digest(reformatted, SPECIALS, "chatml-1", eos_token="<|endoftext|>") == d
    assert len(d) == 64 and int(d, 16) >= 0


def test_digest_is_sensitive_to_every_input(trained):
    text = trained.to_json()
    base = tokenizer_digest(text, SPECIALS, "chatml-1")
    obj = json.loads(text)
    obj["model"]["merges"] = obj["model"]["merges"][:-1]
    assert tokenizer_digest(json.dumps(obj), SPECIALS, "chatml-1") != base
    assert tokenizer_digest(text, ["<|endoftext|>"], "chatml-1") != base
    assert tokenizer_digest(text, list(reversed(SPECIALS)), "chatml-1") != base
    assert tokenizer_digest(text, SPECIALS, "chatml-2") != base
    assert tokenizer_digest(text, SPECIALS, "chatml-1", eos_token="<|pad|>") != base


def test_frozen_digest_follows_spec_template_version():
    a = train_bpe(TRAIN_TEXTS, _train_spec())
    b = train_bpe(TRAIN_TEXTS, _train_spec(chat_template_version="chatml-2"))
    assert a.to_json() == b.to_json() and a.digest != b.digest


# --- training ---------------------------------------------------------------------------------


def test_training_twice_gives_identical_tokenizer(trained):
    again = train_bpe(iter(TRAIN_TEXTS), _train_spec())  # an iterator works too
    assert again.to_json() == trained.to_json()
    assert again.digest == trained.digest


def test_training_is_deterministic_across_processes(trained):
    """Rust hash maps are seeded per process: a fresh interpreter must learn the same tokenizer."""
    code = (
        "import sys, json; from tests.unit.test_tokenizer import TRAIN_TEXTS, _train_spec;"
        "from corpus_assets.domain.tokens.tokenizer import train_bpe;"
        "print(train_bpe(TRAIN_TEXTS, _train_spec()).digest)"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=PROJECT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == trained.digest


def test_different_training_texts_give_a_different_digest(trained):
    other = train_bpe(TRAIN_TEXTS[:-1] + ["something else entirely"], _train_spec())
    assert other.digest != trained.digest


def test_training_depends_on_the_texts_not_their_order(trained):
    # the tokenizer layer streams training texts snapshot by snapshot, in file order, and relies on this
    import random

    shuffled = list(TRAIN_TEXTS)
    random.Random(7).shuffle(shuffled)
    assert train_bpe(iter(shuffled), _train_spec()).digest == trained.digest


def test_trained_tokenizer_round_trips_and_has_specials(trained):
    assert trained.vocab_size <= 400
    assert trained.eos_id == trained.tokenizer.token_to_id("<|endoftext|>") == 0
    assert trained.special_ids() == {"<|endoftext|>": 0, "<|pad|>": 1}
    for text in TRAIN_TEXTS[:5] + ["never seen: Ωmega ∑ 𝔘 \x00 \u200b", "", "  "]:
        ids = trained.encode(text)
        assert trained.decode(ids) == text
    # merges were learnt: a frequent word is shorter than its bytes
    assert len(trained.encode("The quick brown fox")) < len("The quick brown fox".encode())
    # special tokens in text map to their single id and survive decoding
    ids = trained.encode("a<|endoftext|>b")
    assert trained.eos_id in ids
    assert trained.decode(ids) == "a<|endoftext|>b"


def test_saved_trained_tokenizer_loads_with_same_digest(trained, tmp_path):
    path = trained.save(tmp_path / "tok" / "tokenizer.json")
    loaded = load_tokenizer(_path_spec(path))
    assert loaded.digest == trained.digest
    assert loaded.encode("The quick brown fox") == trained.encode("The quick brown fox")


# --- loading a committed fixture --------------------------------------------------------------


def test_committed_fixture_loads():
    tok = load_tokenizer(_path_spec(Path("tokenizer/tiny_bpe.json")), base_dir=FIXTURE.parents[1])
    assert tok.vocab_size == 300 and tok.eos_id == 0
    assert tok.special_ids()["<|pad|>"] == 1
    assert tok.encode("the cat sat on the log") == [260, 266, 259, 271, 270, 269, 222, 261, 72]
    assert tok.decode(tok.encode("the cat sat on the log")) == "the cat sat on the log"
    assert tok.digest == load_tokenizer(_path_spec(FIXTURE)).digest


# --- spec validation and load errors ----------------------------------------------------------


def test_spec_validation():
    with pytest.raises(ValidationError, match="exactly one"):
        TokenizerSpec()
    with pytest.raises(ValidationError, match="exactly one"):
        TokenizerSpec(path=FIXTURE, train=BpeTrainSpec(vocab_size=300))
    with pytest.raises(ValidationError, match="eos_token"):
        TokenizerSpec(path=FIXTURE, special_tokens=["<|pad|>"])
    with pytest.raises(ValidationError, match="below 256"):
        TokenizerSpec(train=BpeTrainSpec(vocab_size=257), special_tokens=SPECIALS)
    with pytest.raises(ValidationError, match="twice"):
        TokenizerSpec(path=FIXTURE, special_tokens=["<|endoftext|>", "<|endoftext|>"])
    with pytest.raises(ValidationError, match="extra"):
        TokenizerSpec(path=FIXTURE, revision="main")


def test_missing_path(tmp_path):
    missing = tmp_path / "nope" / "tokenizer.json"
    with pytest.raises(TokenizerLoadError, match="no such file") as exc:
        load_tokenizer(_path_spec(missing))
    assert exc.value.path == missing and str(missing) in str(exc.value)
    with pytest.raises(TokenizerLoadError, match="not a file"):
        load_tokenizer(_path_spec(tmp_path))


def test_invalid_json(tmp_path):
    bad = tmp_path / "tokenizer.json"
    bad.write_text('{"version": "1.0", "model": ')
    with pytest.raises(TokenizerLoadError, match="invalid JSON") as exc:
        load_tokenizer(_path_spec(bad))
    assert str(bad) in str(exc.value)


@pytest.mark.parametrize("body", ['{"hello": "world"}', "[1, 2, 3]", '{"model": {"type": "NoSuchModel"}}'])
def test_valid_json_but_not_a_tokenizer(tmp_path, body):
    bad = tmp_path / "tokenizer.json"
    bad.write_text(body)
    with pytest.raises(TokenizerLoadError, match="not a HuggingFace tokenizer.json") as exc:
        load_tokenizer(_path_spec(bad))
    assert str(bad) in str(exc.value)


def test_eos_or_special_token_missing_from_vocab():
    with pytest.raises(TokenizerLoadError, match=r"eos token \['<\|eot\|>'\] not in the vocabulary"):
        load_tokenizer(TokenizerSpec(path=FIXTURE, special_tokens=["<|eot|>"], eos_token="<|eot|>"))
    with pytest.raises(TokenizerLoadError, match=r"special token\(s\) \['<\|im_start\|>'\]"):
        load_tokenizer(TokenizerSpec(path=FIXTURE, special_tokens=["<|endoftext|>", "<|im_start|>"]))


def test_wrong_entry_point():
    with pytest.raises(ValueError, match="train_bpe"):
        load_tokenizer(_train_spec())
    with pytest.raises(ValueError, match="load_tokenizer"):
        train_bpe(TRAIN_TEXTS, _path_spec(FIXTURE))


# --- GPT-2 from openai-whisper vs tiktoken r50k_base ------------------------------------------


def _converter():
    spec = importlib.util.spec_from_file_location("gpt2_tokenizer_from_whisper", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def gpt2_json(tmp_path_factory) -> Path:
    """CORPUS_GPT2_TOKENIZER_JSON if set; else the converter is run here (it fetches the
    openai-whisper source archive from PyPI — a package registry — never a hub)."""
    if importlib.util.find_spec("tiktoken") is None:
        pytest.skip("tiktoken is not installed (it is in the dev extra)")
    env = os.environ.get("CORPUS_GPT2_TOKENIZER_JSON")
    if env:
        return Path(env)
    out = tmp_path_factory.mktemp("gpt2") / "tokenizer.json"
    proc = subprocess.run([sys.executable, str(SCRIPT), "--out", str(out)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return out


def test_gpt2_conversion_matches_tiktoken(gpt2_json):
    """GPT-2 from the openai-whisper package gives ids identical to tiktoken's r50k_base (read
    offline from the cache the converter writes next to its output, or TIKTOKEN_CACHE_DIR)."""
    path = gpt2_json
    assert path.is_file(), f"{path} does not exist"
    conv = _converter()
    cache = Path(os.environ.get("TIKTOKEN_CACHE_DIR") or path.parent / "tiktoken_cache")
    assert (cache / conv.tiktoken_cache_name()).is_file(), f"no r50k_base blob in {cache}"

    gpt2 = load_tokenizer(TokenizerSpec(path=path))
    assert gpt2.vocab_size == 50257 and gpt2.eos_id == 50256
    n_texts, n_tokens, problems = conv.compare_with_tiktoken(gpt2.to_json(), cache)
    assert problems == []
    assert n_texts == len(conv.SAMPLE_TEXTS) and n_tokens > 500
    # a few well-known GPT-2 ids
    assert gpt2.encode("Hello world") == [15496, 995]
    assert gpt2.encode("<|endoftext|>") == [50256]


def test_gpt2_merge_reconstruction_on_a_toy_rank_table():
    """The converter's merge reconstruction, without the 1.5 MB vocabulary."""
    import base64

    conv = _converter()
    toks = [bytes([b]) for b in range(256)] + [b"ab", b"abc", b"cd", b"abcd"]
    data = b"\n".join(base64.b64encode(t) + b" " + str(i).encode() for i, t in enumerate(toks))
    # a tiny table has no <|endoftext|> at 50256: the converter refuses it
    with pytest.raises(ValueError, match="50256"):
        conv.tiktoken_to_tokenizer_json(data)
    ranks = conv.read_tiktoken_ranks(data)
    assert conv._bpe(ranks, b"abcd", ranks[b"abcd"]) == [b"abc", b"d"]
    assert conv._bpe(ranks, b"abc", ranks[b"abc"]) == [b"ab", b"c"]


def test_stored_tokenizer_thaws_to_the_same_digest_and_refuses_a_changed_one(trained):
    from corpus_assets.domain.tokens.tokenizer import thaw_tokenizer

    again = thaw_tokenizer(trained.to_json(), trained.spec, expected_digest=trained.digest)
    assert again.digest == trained.digest and again.encode("def f(x): pass") == trained.encode("def f(x): pass")
    d = json.loads(trained.to_json())
    d["model"]["vocab"]["zzz-not-a-token"] = len(d["model"]["vocab"]) + 50
    with pytest.raises(ValueError, match="does not match the recorded"):
        thaw_tokenizer(json.dumps(d), trained.spec, expected_digest=trained.digest)
