"""The release tokenizer: frozen, and identified by a digest.

``TokenizerSpec`` names a ``tokenizer.json`` on disk (``path``; nothing is fetched from a hub), a
byte-level BPE to learn (``train``; the caller passes only training-split texts; ``freeze: true``
keeps the first trained one for later builds) or the tokenizer of a published build
(``from_build: <release>@<build id>``). Either way the result is a ``FrozenTokenizer`` whose
``digest`` covers the canonical ``tokenizer.json``, the special tokens, the eos token and the chat
template version: equal digests, equal token ids.

Details: docs/tokens.md#tokenizer
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Optional, Sequence

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

from corpus_assets.domain.core.errors import CorpusError
from corpus_assets.domain.core.keys import validate_release_name

DIGEST_FORMAT = "corpus-tokenizer/1"
N_BYTES = 256


class TokenizerLoadError(CorpusError, ValueError):
    """A tokenizer could not be loaded; names the path and the reason."""

    def __init__(self, path: Path | str, reason: str):
        self.path = Path(path)
        self.reason = reason
        super().__init__(f"tokenizer {self.path}: {reason}")


class BpeTrainSpec(BaseModel):
    """Byte-level BPE training settings. Training is deterministic: there is no seed to set;
    the same texts in the same order give the same tokenizer.json."""

    model_config = ConfigDict(extra="forbid")
    vocab_size: int = Field(ge=N_BYTES + 1, description="total, including the 256 bytes and the special tokens")
    min_frequency: int = Field(default=2, ge=1)
    max_token_length: Optional[int] = Field(default=None, ge=1, description="longest learnt token, in characters")


_FROM_BUILD = re.compile(r"^(?P<release>[^@\s]+)@(?P<build>[0-9a-f]{64})$")
# the fields a build of the tokenizer depends on; ``freeze`` reuses a stored one only while they are unchanged
TRAINING_SETTINGS = ("train", "special_tokens", "eos_token", "chat_template_version")


class TokenizerSpec(BaseModel):
    """Exactly one of ``path`` (a HuggingFace tokenizer.json), ``train`` (learn byte-level BPE;
    with ``freeze`` only once) or ``from_build`` (the tokenizer of a published build)."""

    model_config = ConfigDict(extra="forbid")
    path: Optional[Path] = None
    train: Optional[BpeTrainSpec] = None
    freeze: bool = Field(
        default=False,
        description="with train: later builds of the release reuse the stored trained tokenizer (same digest) "
                    "while train, special_tokens, eos_token and chat_template_version are unchanged")
    from_build: Optional[str] = Field(
        default=None,
        description="'<release>@<build id>': the tokenizer a published build was made with (special tokens, "
                    "eos token and chat template come with it)")
    special_tokens: list[str] = Field(default_factory=lambda: ["<|endoftext|>"])
    eos_token: str = "<|endoftext|>"
    chat_template_version: str = "chatml-1"

    @field_validator("special_tokens")
    @classmethod
    def _specials(cls, v: list[str]) -> list[str]:
        if not v:
            raise ValueError("at least one special token (the eos token) is required")
        if any(not t or t != t.strip() for t in v):
            raise ValueError("special tokens must be non-empty and carry no surrounding whitespace")
        if len(set(v)) != len(v):
            raise ValueError("a special token is listed twice")
        return v

    @field_validator("chat_template_version")
    @classmethod
    def _template(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("chat_template_version must not be empty")
        return v

    @field_validator("from_build")
    @classmethod
    def _build_ref(cls, v: Optional[str]) -> Optional[str]:
        if v is None:
            return v
        m = _FROM_BUILD.match(v)
        if m is None:
            raise ValueError(f"{v!r} is not '<release>@<build id>' (the build id is the 64 hex digits of a published "
                             "build, e.g. from `corpus releases <release>`)")
        validate_release_name(m["release"])
        return v

    def build_ref(self) -> tuple[str, str]:
        """``from_build`` as (release, build id)."""
        if self.from_build is None:
            raise ValueError("this tokenizer spec has no 'from_build'")
        m = _FROM_BUILD.match(self.from_build)
        return m["release"], m["build"]

    def training_settings(self) -> dict:
        """What a trained tokenizer depends on (``TRAINING_SETTINGS``, typed, defaults filled in): a
        frozen tokenizer is reused only while these are equal."""
        return self.model_dump(mode="json", include=set(TRAINING_SETTINGS))

    @model_validator(mode="after")
    def _one_way_in(self) -> "TokenizerSpec":
        given = [k for k in ("path", "train", "from_build") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError("give exactly one of 'path' (a tokenizer.json), 'train' (byte-level BPE settings) or "
                             f"'from_build' ('<release>@<build id>'), not {' and '.join(given) or 'none'}")
        if self.freeze and self.train is None:
            why = ("a tokenizer.json named by 'path' is fixed by its file already; its digest changes only with the file"
                   if self.path is not None else "a tokenizer taken 'from_build' is always the one that build used")
            raise ValueError(f"'freeze' applies to a trained tokenizer ('train') only: {why}")
        if self.from_build is not None:
            written = sorted(set(self.model_fields_set) & {"special_tokens", "eos_token", "chat_template_version"})
            if written:
                raise ValueError(f"with 'from_build' the special tokens, eos token and chat template are those of the "
                                 f"named build's tokenizer; leave out {', '.join(written)}")
        if self.eos_token not in self.special_tokens:
            raise ValueError(f"eos_token {self.eos_token!r} is not among special_tokens {self.special_tokens}")
        if self.train is not None and self.train.vocab_size < N_BYTES + len(self.special_tokens):
            raise ValueError(
                f"train.vocab_size {self.train.vocab_size} is below 256 bytes + {len(self.special_tokens)} special tokens"
            )
        return self


def gpt2_bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable character table (the ByteLevel pre-tokenizer's alphabet)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def tokenizer_digest(
    tokenizer_json: str,
    special_tokens: Sequence[str],
    chat_template_version: str,
    *,
    eos_token: Optional[str] = None,
) -> str:
    """sha256 (hex) over a canonical serialization: the parsed tokenizer.json with sorted keys and
    compact separators (so whitespace / key order of the file do not matter), the special tokens
    in order, the eos token and the chat template version."""
    try:
        parsed = json.loads(tokenizer_json)
    except json.JSONDecodeError as exc:
        raise ValueError(f"tokenizer_json is not valid JSON: {exc}") from None
    payload = {
        "format": DIGEST_FORMAT,
        "tokenizer": parsed,
        "special_tokens": list(special_tokens),
        "eos_token": eos_token,
        "chat_template_version": chat_template_version,
    }
    canonical = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class FrozenTokenizer:
    tokenizer: Tokenizer
    digest: str
    vocab_size: int  # including added / special tokens
    eos_id: int
    spec: TokenizerSpec

    def to_json(self) -> str:
        """The tokenizer.json text the digest covers."""
        return self.tokenizer.to_str()

    def save(self, path: Path | str) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(self.to_json(), encoding="utf-8")
        return path

    def special_ids(self) -> dict[str, int]:
        return {t: self.tokenizer.token_to_id(t) for t in self.spec.special_tokens}

    def encode(self, text: str) -> list[int]:
        """Token ids without any post-processing extras (no BOS/EOS added)."""
        return self.tokenizer.encode(text, add_special_tokens=False).ids

    def decode(self, ids: Sequence[int], *, skip_special_tokens: bool = False) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=skip_special_tokens)


def _freeze(tokenizer: Tokenizer, spec: TokenizerSpec, where: Path | str) -> FrozenTokenizer:
    missing = [t for t in spec.special_tokens if tokenizer.token_to_id(t) is None]
    if missing:
        which = "eos token" if spec.eos_token in missing else "special token(s)"
        raise TokenizerLoadError(where, f"{which} {missing} not in the vocabulary")
    text = tokenizer.to_str()
    digest = tokenizer_digest(text, spec.special_tokens, spec.chat_template_version, eos_token=spec.eos_token)
    return FrozenTokenizer(
        tokenizer=tokenizer,
        digest=digest,
        vocab_size=tokenizer.get_vocab_size(with_added_tokens=True),
        eos_id=tokenizer.token_to_id(spec.eos_token),
        spec=spec,
    )


def load_tokenizer(spec: TokenizerSpec, *, base_dir: Path | str | None = None) -> FrozenTokenizer:
    """Load ``spec.path`` (relative paths resolve against ``base_dir``, e.g. the release spec's
    directory). Raises ``TokenizerLoadError`` naming the path and the reason: missing file, not
    valid JSON, rejected by ``tokenizers``, or a special / eos token not in the vocabulary."""
    if spec.path is None:
        raise ValueError("load_tokenizer needs a spec with 'path'; use train_bpe for 'train'")
    path = spec.path
    if base_dir is not None and not path.is_absolute():
        path = Path(base_dir) / path
    if not path.exists():
        raise TokenizerLoadError(path, "no such file")
    if not path.is_file():
        raise TokenizerLoadError(path, "not a file")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise TokenizerLoadError(path, f"cannot read: {exc}") from None
    try:
        json.loads(text)
    except json.JSONDecodeError as exc:
        raise TokenizerLoadError(path, f"invalid JSON: {exc}") from None
    try:
        tokenizer = Tokenizer.from_str(text)
    except Exception as exc:  # tokenizers raises a bare Exception with serde's message
        raise TokenizerLoadError(path, f"not a HuggingFace tokenizer.json ({exc})") from None
    return _freeze(tokenizer, spec, path)


_THAWED: dict[tuple[str, bytes, str], FrozenTokenizer] = {}  # per process, bounded by _THAWED_MAX
_THAWED_MAX = 8
_thaw_lock = threading.Lock()


def thaw_tokenizer(tokenizer_json: str, spec: TokenizerSpec, *, expected_digest: str) -> FrozenTokenizer:
    """Re-freeze a stored tokenizer.json with the spec it was frozen with; refuses (ValueError) if
    the digest differs from ``expected_digest`` — a stored tokenizer that changed is never used.
    Thawed once per process for the same bytes and spec (the release steps of one run each
    thaw the release's tokenizer; the digest alone took ~0.1 s for a vocabulary of 8192)."""
    key = (expected_digest, hashlib.sha256(tokenizer_json.encode("utf-8")).digest(), spec.model_dump_json())
    with _thaw_lock:
        hit = _THAWED.get(key)
    if hit is not None:
        return hit
    try:
        tokenizer = Tokenizer.from_str(tokenizer_json)
    except Exception as exc:
        raise TokenizerLoadError("<stored>", f"not a HuggingFace tokenizer.json ({exc})") from None
    frozen = _freeze(tokenizer, spec, "<stored>")
    if frozen.digest != expected_digest:
        raise ValueError(f"stored tokenizer digest {frozen.digest} does not match the recorded {expected_digest}")
    with _thaw_lock:
        if len(_THAWED) >= _THAWED_MAX:
            _THAWED.pop(next(iter(_THAWED)))
        _THAWED[key] = frozen
    return frozen


def new_byte_level_bpe() -> Tokenizer:
    """An empty byte-level BPE tokenizer: GPT-2 pre-tokenization regex, no prefix space, no
    normalizer, ByteLevel decoder (decode(encode(text)) == text)."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    return tok


def train_bpe(texts: Iterable[str], spec: TokenizerSpec) -> FrozenTokenizer:
    """Learn byte-level BPE from ``texts`` — which must be the release's TRAINING split only
    (never validation or test). Special tokens take ids 0..k-1 in ``spec.special_tokens`` order,
    then the 256 bytes, then merges. Deterministic: the same texts in the same order give an
    identical tokenizer.json and digest."""
    if spec.train is None:
        raise ValueError("train_bpe needs a spec with 'train'; use load_tokenizer for 'path'")
    tok = new_byte_level_bpe()
    kwargs = {}
    if spec.train.max_token_length is not None:
        kwargs["max_token_length"] = spec.train.max_token_length
    trainer = trainers.BpeTrainer(
        vocab_size=spec.train.vocab_size,
        min_frequency=spec.train.min_frequency,
        special_tokens=list(spec.special_tokens),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
        **kwargs,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    return _freeze(tok, spec, "<trained>")
