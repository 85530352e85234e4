"""Rule-based quality filters (curation): Gopher quality, Gopher repetition, C4, FineWeb.

Every filter is a separate policy with its own stable reason codes (``"<filter>.<rule>"``, all
listed in ``REASON_CODES``) and its own version (``filter_version``: a digest of
``QUALITY_CODE_VERSION`` and the effective thresholds it ran with). A filter only *decides*: it
never modifies text. Filters run in ``FILTER_ORDER`` and rules in a fixed order inside each; the
first failing rule decides, so a verdict is deterministic. A rejection carries the deciding
filter's version, a pass the policy version (``quality_policy_version``: code version, every
threshold of every filter, the apply map and the effective overrides). Defaults are the
published thresholds (as implemented in datatrove 0.10.1); every one is a config field. The
``detail`` of a verdict holds numbers and field names only, never the text. Pure domain logic:
no Dagster.

Words — one fast tokenizer, computed once per text and shared by all filters (``_Stats``)
    A *word* is a whitespace-delimited run (``str.split``), except that each character of a
    script written without spaces (Han, Hiragana, Katakana, Thai, Lao, Tibetan, Myanmar, Khmer)
    is a word by itself, with any CJK punctuation next to it attached (one C-level regex, used
    only when such a character occurs). datatrove uses spaCy / NLTK word tokenizers, which split
    punctuation off words; ours keeps ``word.`` together like the Gopher paper's whitespace
    words, so mean word lengths run ~0.2 higher and punctuation is not a "word" of its own. A
    *symbol word* has no letter or digit; it does not count towards the word minimum. *Lines*
    are the non-blank lines with trailing whitespace removed (indentation kept); *paragraphs*
    are separated by blank lines. Every statistic is computed lazily, at most once.
    Measured on 0.85 MB of real English HTML-extracted text (Debian handbook), all four prose
    filters run at ~4.5 MB/s on one core; datatrove's four filters with a *free* whitespace
    tokenizer standing in for spaCy run at ~1.2 MB/s on the same text (with spaCy it is slower).

Scripts without spaces (CJK, Thai, ...)
    Each such character is a word, so word counts and n-grams count characters: a CJK document
    is not rejected for having "few" words. Mean word length never reads these one-character
    words. When at least ``unspaced_script_share`` of the non-whitespace characters belong to
    such scripts the text is in *unspaced mode*: the mean-word-length rules and the English
    stop-word rule are skipped, n-gram rules read ``n * unspaced_ngram_scale`` characters (with
    the scale 1, 5-character n-grams repeat in ordinary Japanese: 15 of 127 Debian-handbook
    pages were rejected, 2 with the scale 2, against 1 of the English originals), and FineWeb's
    short-line rule measures display width (such a character counts 2, a full-width cell). C4's
    terminal punctuation includes 。！？ so CJK lines are not all dropped.

Filters (published source; what we do differently)
    ``sanity``             ours: ``sanity.too_long`` (more than ``max_chars`` characters; default
                           1,000,000, The Stack's 1 MB file limit), ``sanity.empty`` (fewer than
                           ``min_alnum_chars`` letters/digits). For messages also
                           ``sanity.no_assistant_turn``.
    ``gopher_quality``     Gopher (Rae et al. 2021, Table A1), datatrove ``GopherQualityFilter``.
                           Line ratios use non-blank lines. Stop words count in lower,
                           Capitalized and UPPER case and with a trailing , . ; : ! ?; the rule
                           runs only for ``stop_words_lang`` (or an unknown language). Bullets
                           are ``bullet_prefixes`` (datatrove: • and - only). Texts with fewer
                           than ``min_words_for_ratios`` words skip every rule after the word
                           counts.
    ``gopher_repetition``  datatrove ``GopherRepetitionFilter``. Top n-gram share counts only an
                           n-gram occurring at least twice (datatrove also counts one occurrence,
                           which rejects every text of a few words); duplicated n-gram share is
                           datatrove's left-to-right scan (a repeat counts its characters and the
                           scan jumps past it), visiting only positions whose n-gram occurs twice
                           or more (same result). Codes do not depend on n: ``top_ngram`` /
                           ``dup_ngram`` with ``n=`` in the detail. The n-gram rules read at most
                           the first ``ngram_window_chars`` characters (bounded work on huge
                           inputs; records longer than ``sanity.max_chars`` never get there).
    ``c4``                 datatrove ``C4QualityFilter`` (lines, not sentences), as a *decision*:
                           its line rules (a word over ``max_word_length``, no terminal
                           punctuation or ending in "...", fewer than ``min_words_per_line``
                           words, "javascript", policy phrases) only mark lines as dropped. The
                           document is rejected when a document rule fires on a kept line
                           (``lorem_ipsum``, ``curly_bracket``, as C4), when the kept lines hold
                           fewer than ``min_num_sentences`` sentences (``too_few_sentences``, as
                           C4), or when the dropped lines hold more than ``max_removed_char_share``
                           of the line characters (``too_much_removed``, ours, default 0.8: C4
                           would have kept only a small remainder, and we keep all or nothing; on
                           the Debian handbook and Python docs it fires only on index pages and
                           long tables). Sentences are counted with a regex (runs of
                           . ! ? 。！？ before a space or the end, at least one per kept line)
                           instead of NLTK/spaCy. Because nothing is removed, FineWeb then judges
                           the *whole* text, not C4's cleaned text as in the FineWeb pipeline: a
                           page with repeated boilerplate lines that datatrove would clean and keep
                           is rejected here (``fineweb.dup_line_chars``).
    ``fineweb``            datatrove ``FineWebQualityFilter``. Lines are right-stripped before the
                           terminal-punctuation test; terminal punctuation is the Unicode
                           Sentence_Terminal characters of the scripts in common modern use
                           (datatrove lists all 159).
    ``pair``               ours, preference records only: ``empty_prompt``, ``empty_answer`` (no
                           letter/digit), ``identical_answers`` (equal after case and whitespace
                           folding).

Record types — ``apply`` maps ``<schema_type>/<domain>`` to filters, ``overrides`` replaces
thresholds per apply key; a record uses the first key of ``<type>/<domain>``, ``<type>/*``,
``*/<domain>``, ``*/*`` present (every type/domain must resolve). Giving ``apply`` or
``overrides`` in a config replaces the default map as a whole.
    document/prose   sanity + all four prose filters on the text, published thresholds.
    document/code    sanity + a light gopher_repetition: only the duplicated-line character
                     share, at 0.6. Symbol, word-length, stop-word, punctuation, line-shape and
                     n-gram rules measure prose and say nothing about code. Repeated lines are
                     what marks generated tables and copy-paste loops; 0.6 rejects 0.3 % of
                     11,170 real Python files (stdlib and site-packages: data tables,
                     generated test matrices), 0.5 would reject 0.7 %, 0.3 (prose's 0.2 is
                     stricter still) 4.5 %.
    messages/*       the assistant turns' text (joined by blank lines; user, system and tool
                     content is not the training target and is not judged): sanity +
                     gopher_quality + gopher_repetition with ``min_doc_words=1`` and every
                     ratio rule only from 50 words; the word-length minimum, bullet,
                     alphabetic-word and stop-word rules are off (short, listy, numeric, code or
                     non-English answers are legitimate). No C4 / FineWeb: their line rules
                     describe web pages, and a curly bracket is normal in an answer with code.
                     A conversation without an assistant turn is rejected; one whose assistant
                     turns are only tool calls passes (no text to judge).
    instruction/*    the output, as messages.   reasoning/*: process and answer, as messages.
    preference/*     pair rules first, then sanity + the relaxed gopher filters on the shared
                     prompt (non-tool prompt messages) only. The two answers are never judged as
                     texts of their own: a deliberately worse ``rejected`` must not drop the
                     pair, and dropping only one side would break it.
    task/*           sanity only, on the public input.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from functools import cached_property
from itertools import accumulate, compress, filterfalse
from typing import Any, Literal, Optional, Sequence

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator, model_validator

from corpus_assets.domain.core.hashing import canonical_digest
from corpus_assets.domain.canonical.records import SCHEMA_VERSIONS, Record

__all__ = [
    "QUALITY_CODE_VERSION",
    "FILTER_ORDER",
    "TEXT_FILTERS",
    "REASON_CODES",
    "SanityConfig",
    "PairConfig",
    "GopherQualityConfig",
    "GopherRepetitionConfig",
    "C4Config",
    "FineWebConfig",
    "QualityConfig",
    "QualityVerdict",
    "quality_policy_version",
    "filter_version",
    "judge_record",
    "judge_text",
    "judged_text",
]

# Bump when a rule's definition changes (not its thresholds: those are digested from the config).
QUALITY_CODE_VERSION = "1"

FilterName = Literal["pair", "sanity", "gopher_quality", "gopher_repetition", "c4", "fineweb"]
# the fixed order filters run in, whatever order a config lists them in
FILTER_ORDER: tuple[str, ...] = ("pair", "sanity", "gopher_quality", "gopher_repetition", "c4", "fineweb")
TEXT_FILTERS: tuple[str, ...] = FILTER_ORDER[1:]
_DOMAINS = ("prose", "code")

REASON_CODES: frozenset[str] = frozenset(
    {
        "sanity.empty",
        "sanity.too_long",
        "pair.empty_prompt",
        "pair.empty_answer",
        "pair.identical_answers",
        "sanity.no_assistant_turn",
        "gopher_quality.too_few_words",
        "gopher_quality.too_many_words",
        "gopher_quality.short_mean_word_length",
        "gopher_quality.long_mean_word_length",
        "gopher_quality.hash_ratio",
        "gopher_quality.ellipsis_ratio",
        "gopher_quality.bullet_lines",
        "gopher_quality.ellipsis_lines",
        "gopher_quality.few_alpha_words",
        "gopher_quality.few_stop_words",
        "gopher_repetition.dup_paragraphs",
        "gopher_repetition.dup_paragraph_chars",
        "gopher_repetition.dup_lines",
        "gopher_repetition.dup_line_chars",
        "gopher_repetition.top_ngram",
        "gopher_repetition.dup_ngram",
        "c4.lorem_ipsum",
        "c4.curly_bracket",
        "c4.too_few_sentences",
        "c4.too_much_removed",
        "fineweb.line_punctuation",
        "fineweb.short_lines",
        "fineweb.dup_line_chars",
        "fineweb.newline_ratio",
    }
)

# --- configuration ----------------------------------------------------------------------------

class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SanityConfig(_Strict):
    enabled: bool = True
    min_alnum_chars: int = Field(1, ge=0)  # fewer letters/digits than this: sanity.empty
    max_chars: Optional[int] = Field(1_000_000, ge=1)  # The Stack's 1 MB file limit, in characters


class PairConfig(_Strict):
    enabled: bool = True
    min_alnum_chars: int = Field(1, ge=0)  # prompt / answer with fewer letters/digits is empty
    fold_identical: bool = True  # compare answers after case and whitespace folding (else exact)


class GopherQualityConfig(_Strict):
    enabled: bool = True
    min_doc_words: Optional[int] = Field(50, ge=0)
    max_doc_words: Optional[int] = Field(100_000, ge=1)
    min_avg_word_length: Optional[float] = Field(3.0, ge=0)
    max_avg_word_length: Optional[float] = Field(10.0, ge=0)
    max_symbol_word_ratio: Optional[float] = Field(0.1, ge=0)  # '#' and ellipses, each, per word
    max_bullet_lines_ratio: Optional[float] = Field(0.9, ge=0, le=1)
    max_ellipsis_lines_ratio: Optional[float] = Field(0.3, ge=0, le=1)
    min_alpha_words_ratio: Optional[float] = Field(0.8, ge=0, le=1)  # datatrove: max_non_alpha_words_ratio
    min_stop_words: Optional[int] = Field(2, ge=0)  # distinct stop words present
    stop_words: tuple[str, ...] = ("the", "be", "to", "of", "and", "that", "have", "with")
    stop_words_lang: Optional[str] = "en"  # run the stop-word rule only for this lang (and "und"); None: always
    bullet_prefixes: tuple[str, ...] = ("•", "-", "*", "‣", "◦", "▪", "●")
    min_words_for_ratios: int = Field(0, ge=0)  # fewer words: skip every rule after the word counts

    @field_validator("stop_words", "bullet_prefixes")
    @classmethod
    def _non_empty_items(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        if any(not s for s in v):
            raise ValueError("entries must be non-empty strings")
        return v


def _ngram_thresholds(v: tuple[tuple[int, float], ...]) -> tuple[tuple[int, float], ...]:
    seen = set()
    for n, share in v:
        if not 1 <= n <= 50:
            raise ValueError(f"n-gram size {n} outside 1..50")
        if not 0.0 <= share <= 1.0:
            raise ValueError(f"share {share} for n={n} outside [0, 1]")
        if n in seen:
            raise ValueError(f"n-gram size {n} listed twice")
        seen.add(n)
    return tuple(sorted(v))


class GopherRepetitionConfig(_Strict):
    enabled: bool = True
    dup_para_frac: Optional[float] = Field(0.3, ge=0, le=1)
    dup_para_char_frac: Optional[float] = Field(0.2, ge=0, le=1)
    dup_line_frac: Optional[float] = Field(0.3, ge=0, le=1)
    dup_line_char_frac: Optional[float] = Field(0.2, ge=0, le=1)
    top_n_grams: tuple[tuple[int, float], ...] = ((2, 0.2), (3, 0.18), (4, 0.16))
    dup_n_grams: tuple[tuple[int, float], ...] = ((5, 0.15), (6, 0.14), (7, 0.13), (8, 0.12), (9, 0.11), (10, 0.10))
    min_words_for_ratios: int = Field(0, ge=0)  # fewer words: the filter passes the text
    ngram_window_chars: Optional[int] = Field(1_000_000, ge=1)  # n-gram rules read at most this prefix

    _ngrams = field_validator("top_n_grams", "dup_n_grams")(_ngram_thresholds)


_C4_POLICY = ("terms of use", "privacy policy", "cookie policy", "uses cookies", "use of cookies", "use cookies")


class C4Config(_Strict):
    enabled: bool = True
    remove_citations: bool = True  # strip [1], [edit], [citation needed] before the punctuation test
    filter_no_terminal_punct: bool = True
    min_num_sentences: Optional[int] = Field(5, ge=0)
    min_words_per_line: Optional[int] = Field(3, ge=0)
    max_word_length: Optional[int] = Field(1000, ge=1)
    filter_lorem_ipsum: bool = True
    filter_javascript: bool = True
    filter_curly_bracket: bool = True
    filter_policy: bool = True
    end_punctuation: tuple[str, ...] = (".", "?", "!", '"', "'", "”", "’", "。", "！", "？", "｡", "．")
    policy_substrings: tuple[str, ...] = _C4_POLICY
    max_removed_char_share: Optional[float] = Field(0.8, ge=0, le=1)  # ours (decision-only C4)

    @field_validator("end_punctuation", "policy_substrings")
    @classmethod
    def _non_empty_items(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        if not v or any(not s for s in v):
            raise ValueError("needs at least one entry and no empty strings")
        return v


# Sentence_Terminal characters of the scripts in common modern use (datatrove: all 159 of them)
_TERMINAL = (
    ".", "!", "?", "։", "؟", "۔", "؞", "܀", "܁", "܂", "߹", "।", "॥", "၊", "။", "።", "፧", "፨", "᙮",
    "។", "៕", "᠃", "᠉", "‼", "‽", "⁇", "⁈", "⁉", "。", "꓿", "﹒", "﹖", "﹗", "！", "．", "？", "｡",
)  # fmt: skip


class FineWebConfig(_Strict):
    enabled: bool = True
    line_punct_thr: Optional[float] = Field(0.12, ge=0, le=1)
    line_punct_exclude_zero: bool = False
    stop_chars: tuple[str, ...] = _TERMINAL
    short_line_thr: Optional[float] = Field(0.67, ge=0, le=1)
    short_line_length: int = Field(30, ge=0)
    char_duplicates_ratio: Optional[float] = Field(0.01, ge=0, le=1)
    new_line_ratio: Optional[float] = Field(0.3, ge=0)

    @field_validator("stop_chars")
    @classmethod
    def _non_empty_items(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        if not v or any(not s for s in v):
            raise ValueError("needs at least one entry and no empty strings")
        return v


_SECTIONS: dict[str, type[_Strict]] = {
    "pair": PairConfig,
    "sanity": SanityConfig,
    "gopher_quality": GopherQualityConfig,
    "gopher_repetition": GopherRepetitionConfig,
    "c4": C4Config,
    "fineweb": FineWebConfig,
}

_PROSE = ["sanity", "gopher_quality", "gopher_repetition", "c4", "fineweb"]
_ANSWER = ["sanity", "gopher_quality", "gopher_repetition"]
DEFAULT_APPLY: dict[str, list[str]] = {
    "document/prose": _PROSE,
    "document/code": ["sanity", "gopher_repetition"],
    "messages/*": _ANSWER,
    "instruction/*": _ANSWER,
    "reasoning/*": _ANSWER,
    "preference/*": ["pair", *_ANSWER],
    "task/*": ["sanity"],
}
_ANSWER_OVERRIDES: dict[str, dict[str, Any]] = {
    "gopher_quality": {
        "min_doc_words": 1,
        "min_words_for_ratios": 50,
        "min_avg_word_length": None,
        "max_bullet_lines_ratio": None,
        "min_alpha_words_ratio": None,
        "min_stop_words": None,
    },
    "gopher_repetition": {"min_words_for_ratios": 50},
}
DEFAULT_OVERRIDES: dict[str, dict[str, dict[str, Any]]] = {
    "document/code": {
        "gopher_repetition": {
            "dup_para_frac": None,
            "dup_para_char_frac": None,
            "dup_line_frac": None,
            "dup_line_char_frac": 0.6,
            "top_n_grams": [],
            "dup_n_grams": [],
        }
    },
    "messages/*": _ANSWER_OVERRIDES,
    "instruction/*": _ANSWER_OVERRIDES,
    "reasoning/*": _ANSWER_OVERRIDES,
    "preference/*": _ANSWER_OVERRIDES,
}


def _copy_nested(d: dict) -> dict:
    out: dict = {}
    for k, v in d.items():
        out[k] = _copy_nested(v) if isinstance(v, dict) else list(v) if isinstance(v, list) else v
    return out


_KEY_RE = re.compile(r"^([a-z*][a-z0-9_]*|\*)/([a-z*][a-z0-9_]*|\*)$")


@dataclass(frozen=True)
class _Plan:
    key: str
    filters: tuple[str, ...]  # enabled filters, in FILTER_ORDER
    configs: dict[str, _Strict]  # effective config per filter
    versions: dict[str, str]  # filter version per filter


class QualityConfig(_Strict):
    """The whole quality policy. ``apply`` maps ``<schema_type>/<domain>`` (either may be ``*``)
    to the filters that run; ``overrides`` replaces thresholds of a filter for one apply key."""

    unspaced_script_share: float = Field(0.3, ge=0, le=1)  # unspaced mode from this share of characters
    unspaced_ngram_scale: int = Field(2, ge=1, le=8)  # in unspaced mode an n-gram rule reads n*scale characters
    pair: PairConfig = PairConfig()
    sanity: SanityConfig = SanityConfig()
    gopher_quality: GopherQualityConfig = GopherQualityConfig()
    gopher_repetition: GopherRepetitionConfig = GopherRepetitionConfig()
    c4: C4Config = C4Config()
    fineweb: FineWebConfig = FineWebConfig()
    apply: dict[str, list[FilterName]] = Field(default_factory=lambda: _copy_nested(DEFAULT_APPLY))
    overrides: dict[str, dict[FilterName, dict[str, Any]]] = Field(
        default_factory=lambda: _copy_nested(DEFAULT_OVERRIDES)
    )

    _plans: dict[str, _Plan] = PrivateAttr(default_factory=dict)
    _by_type: dict[tuple[str, str], _Plan] = PrivateAttr(default_factory=dict)
    _policy_version: str = PrivateAttr(default="")
    _text_plans: dict[tuple, _Plan] = PrivateAttr(default_factory=dict)

    @field_validator("apply")
    @classmethod
    def _fixed_order(cls, v: dict[str, list[str]]) -> dict[str, list[str]]:
        for key, names in v.items():
            if len(set(names)) != len(names):
                raise ValueError(f"apply key {key!r}: a filter is listed twice")
        # filters always run in FILTER_ORDER; store them so, so equal policies digest equally
        return {key: sorted(names, key=FILTER_ORDER.index) for key, names in v.items()}

    @model_validator(mode="after")
    def _check_apply(self) -> "QualityConfig":
        for key, names in self.apply.items():
            m = _KEY_RE.match(key)
            if m is None:
                raise ValueError(f"apply key {key!r} must look like '<schema_type>/<domain>' ('*' allowed)")
            stype, domain = m.groups()
            if stype != "*" and stype not in SCHEMA_VERSIONS:
                raise ValueError(f"apply key {key!r}: unknown schema type {stype!r}")
            if domain != "*" and domain not in _DOMAINS:
                raise ValueError(f"apply key {key!r}: unknown domain {domain!r}")
            if "pair" in names and stype != "preference":
                raise ValueError(f"apply key {key!r}: the 'pair' filter only applies to preference records")
        for stype in SCHEMA_VERSIONS:
            for domain in _DOMAINS:
                if _resolve_key(self.apply, stype, domain) is None:
                    raise ValueError(f"apply has no entry for {stype}/{domain} (add it, or '{stype}/*' / '*/*')")
        for key, per_filter in self.overrides.items():
            if key not in self.apply:
                raise ValueError(f"overrides key {key!r} is not an apply key")
            for name, values in per_filter.items():
                if name not in self.apply[key]:
                    raise ValueError(f"overrides[{key!r}][{name!r}]: filter does not run for {key!r}")
                base = getattr(self, name)
                try:
                    type(base).model_validate({**base.model_dump(), **values})
                except ValidationError as exc:
                    fields = ", ".join(".".join(map(str, e["loc"])) + f" ({e['msg']})" for e in exc.errors())
                    raise ValueError(f"overrides[{key!r}][{name!r}]: {fields}") from None
        self._compile()
        return self

    def _compile(self) -> None:
        for key, names in self.apply.items():
            configs: dict[str, _Strict] = {}
            versions: dict[str, str] = {}
            for name in FILTER_ORDER:
                if name not in names:
                    continue
                base = getattr(self, name)
                values = self.overrides.get(key, {}).get(name)
                cfg = type(base).model_validate({**base.model_dump(), **values}) if values else base
                if not cfg.enabled:  # type: ignore[attr-defined]
                    continue
                configs[name] = cfg
                versions[name] = filter_version(name, cfg, self)
            self._plans[key] = _Plan(key, tuple(configs), configs, versions)
        for stype in SCHEMA_VERSIONS:
            for domain in _DOMAINS:
                key = _resolve_key(self.apply, stype, domain)
                assert key is not None  # checked above
                self._by_type[(stype, domain)] = self._plans[key]
        # the digest reads validated values only (an override written 1 or 1.0 digests the same)
        body = {
            "code": QUALITY_CODE_VERSION,
            "unspaced_script_share": self.unspaced_script_share,
            "unspaced_ngram_scale": self.unspaced_ngram_scale,
            "sections": {name: getattr(self, name).model_dump(mode="json") for name in FILTER_ORDER},
            "apply": {
                key: {name: plan.configs[name].model_dump(mode="json") for name in plan.filters}
                for key, plan in sorted(self._plans.items())
            },
        }
        self._policy_version = f"quality-{QUALITY_CODE_VERSION}-{canonical_digest(body)[:16]}"

    def model_copy(self, *, update: Optional[dict[str, Any]] = None, deep: bool = False) -> "QualityConfig":
        """A copy; with ``update`` the result is validated and compiled again (pydantic's
        ``model_copy`` would skip both and keep the old compiled filters)."""
        if update:
            return type(self).model_validate({**self.model_dump(), **update})
        return super().model_copy(deep=deep)

    def plan_for(self, schema_type: str, domain: str) -> _Plan:
        plan = self._by_type.get((schema_type, domain))
        if plan is None:
            key = _resolve_key(self.apply, schema_type, domain)
            if key is None:
                raise ValueError(f"no quality filters declared for {schema_type}/{domain}")
            plan = self._plans[key]
        return plan


def _resolve_key(apply: dict, schema_type: str, domain: str) -> Optional[str]:
    for key in (f"{schema_type}/{domain}", f"{schema_type}/*", f"*/{domain}", "*/*"):
        if key in apply:
            return key
    return None


def filter_version(name: str, cfg: BaseModel, config: QualityConfig) -> str:
    """``<filter>-<code version>-<digest of its effective thresholds>`` (text filters also digest the
    tokenizer settings of ``config``)."""
    body: dict[str, Any] = {"code": QUALITY_CODE_VERSION, "filter": name, "config": cfg.model_dump(mode="json")}
    if name in TEXT_FILTERS:
        body["unspaced_script_share"] = config.unspaced_script_share
        body["unspaced_ngram_scale"] = config.unspaced_ngram_scale
    return f"{name}-{QUALITY_CODE_VERSION}-{canonical_digest(body)[:12]}"


def quality_policy_version(config: QualityConfig) -> str:
    """Digest over the code version, every threshold of every filter, the apply map and overrides."""
    return config._policy_version


# --- verdicts ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class QualityVerdict:
    passed: bool
    reason: Optional[str]  # None when passed, else a member of REASON_CODES
    detail: str  # numbers only, never the text
    filter_version: str  # the deciding filter's version; the policy version when passed


class _Reject(Exception):
    def __init__(self, reason: str, detail: str) -> None:
        self.reason = reason
        self.detail = detail


def _ratio(a: float, b: float) -> float:
    return a / b if b else 0.0


def _f(x: float) -> str:
    return f"{x:.4f}"


# --- text statistics (one tokenization, shared by all filters) ---------------------------------

# scripts written without spaces between words
_UNSPACED_CLASS = (
    "\u0e00-\u0eff"  # Thai, Lao
    "\u0f00-\u0fff"  # Tibetan
    "\u1000-\u109f"  # Myanmar
    "\u1780-\u17ff"  # Khmer
    "\u3040-\u30ff\u31f0-\u31ff"  # Hiragana, Katakana
    "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"  # Han
    "\uff66-\uff9f"  # half-width Katakana
    "\U00020000-\U0003134f"  # Han extensions
)
_CJK_PUNCT = "\u3000-\u303f\uff01-\uff0f\uff1a-\uff20\uff3b-\uff40\uff5b-\uff65"
_UNSPACED_RE = re.compile(f"[{_UNSPACED_CLASS}]")
# one unspaced-script character with the CJK punctuation around it, or a run of anything else
_TOKEN_RE = re.compile(f"[{_CJK_PUNCT}]*[{_UNSPACED_CLASS}][{_CJK_PUNCT}]*|[^\\s{_UNSPACED_CLASS}]+")
_ALNUM_RE = re.compile(r"[^\W_]")
_LETTER_RE = re.compile(r"[^\W\d_]")
_PARA_RE = re.compile(r"\n[ \t\r\f\v]*\n\s*")
_CITATION_RE = re.compile(r"\[\d*]|\[edit]|\[citation needed]")
_SENTENCE_END_RE = re.compile(r"[.!?。！？｡．]+[\"'”’)\]]*(?=\s|$)")
_STOP_SUFFIXES = ("", ",", ".", ";", ":", "!", "?")


def _count_alnum(text: str, at_least: int) -> int:
    """Letters/digits in ``text``, counting only up to ``at_least`` (cheap on long texts)."""
    if at_least <= 0:
        return 0
    n = 0
    for _ in _ALNUM_RE.finditer(text):
        n += 1
        if n >= at_least:
            break
    return n


def _dups(units: list[str]) -> tuple[int, int]:
    """(number, characters) of the units that repeat an earlier unit."""
    if len(set(units)) == len(units):
        return 0, 0
    seen: set[str] = set()
    n = chars = 0
    for u in units:
        if u in seen:
            n += 1
            chars += len(u)
        else:
            seen.add(u)
    return n, chars


class _Stats:
    """Lazily computed statistics of one text; each is computed at most once."""

    def __init__(self, text: str, unspaced_share: float, ngram_scale: int = 1) -> None:
        self.text = text
        self._unspaced_share = unspaced_share
        self._ngram_scale = ngram_scale

    @cached_property
    def has_unspaced(self) -> bool:
        return _UNSPACED_RE.search(self.text) is not None

    @cached_property
    def words(self) -> list[str]:
        return _TOKEN_RE.findall(self.text) if self.has_unspaced else self.text.split()

    @cached_property
    def n_unspaced(self) -> int:
        return _UNSPACED_RE.subn("", self.text)[1] if self.has_unspaced else 0

    @cached_property
    def nonspace_chars(self) -> int:
        return sum(map(len, self.words))

    @cached_property
    def unspaced_mode(self) -> bool:
        if not self.has_unspaced:
            return False
        return self.n_unspaced >= self._unspaced_share * self.nonspace_chars

    @cached_property
    def ngram_scale(self) -> int:
        return self._ngram_scale if self.unspaced_mode else 1

    @cached_property
    def _mixed(self) -> tuple[int, int, int, int, int]:
        """For texts with unspaced-script characters: (symbol words, their characters, words with a
        letter, unspaced-script words, characters of the other words with a letter or digit). An
        unspaced-script character (combining marks included) is a letter. Purely alphabetic words
        (str.isalpha, C speed) need no further look."""
        words = self.words
        rest = list(filterfalse(str.isalpha, words))
        n_sym = sym_chars = 0
        n_letter = len(words) - len(rest)
        unspaced = _UNSPACED_RE.search
        letter = _LETTER_RE.search
        alnum = _ALNUM_RE.search
        for w in rest:
            if letter(w) is not None or unspaced(w) is not None:
                n_letter += 1
            elif alnum(w) is None:
                n_sym += 1
                sym_chars += len(w)
        unspaced_words = list(filter(unspaced, words))
        spaced_chars = self.nonspace_chars - sym_chars - sum(map(len, unspaced_words))
        return n_sym, sym_chars, n_letter, len(unspaced_words), spaced_chars

    @cached_property
    def _spaced(self) -> tuple[int, int, int]:
        """For texts without unspaced-script characters: (symbol words, their characters, words
        with a letter). Only the words that are not purely alphabetic (str.isalpha, C speed) are
        looked at one by one."""
        rest = list(filterfalse(str.isalpha, self.words))
        n_sym = sym_chars = 0
        n_letter = len(self.words) - len(rest)
        letter = _LETTER_RE.search
        alnum = _ALNUM_RE.search
        for w in rest:
            if letter(w) is not None:
                n_letter += 1
            elif alnum(w) is None:
                n_sym += 1
                sym_chars += len(w)
        return n_sym, sym_chars, n_letter

    @cached_property
    def symbol_words(self) -> tuple[int, int]:
        """(count, characters) of words without a letter or digit."""
        if self.has_unspaced:
            return self._mixed[0], self._mixed[1]
        return self._spaced[0], self._spaced[1]

    @cached_property
    def letter_words(self) -> int:
        return self._mixed[2] if self.has_unspaced else self._spaced[2]

    @cached_property
    def mean_word_length(self) -> Optional[float]:
        """Mean length of the words with a letter or digit, unspaced-script words left out (they
        are one character); ``None`` if there is no such word."""
        if self.has_unspaced:
            n = self.content_words - self._mixed[3]
            return self._mixed[4] / n if n > 0 else None
        n = self.content_words
        return (self.nonspace_chars - self.symbol_words[1]) / n if n > 0 else None

    @cached_property
    def content_words(self) -> int:
        return len(self.words) - self.symbol_words[0]

    @cached_property
    def word_set(self) -> set[str]:
        return set(self.words)

    @cached_property
    def lines(self) -> list[str]:
        """Non-blank lines, trailing whitespace removed."""
        return [line for line in map(str.rstrip, self.text.split("\n")) if line]

    @cached_property
    def line_dups(self) -> tuple[int, int]:
        return _dups(self.lines)

    @cached_property
    def paragraphs(self) -> list[str]:
        stripped = self.text.strip()
        return _PARA_RE.split(stripped) if stripped else []

    @cached_property
    def newlines(self) -> int:
        return self.text.count("\n")

    @cached_property
    def word_prefix_chars(self) -> list[int]:
        return list(accumulate(map(len, self.words), initial=0))

    def width(self, line: str) -> int:
        """Line length; in unspaced mode an unspaced-script character counts 2 (full width)."""
        if self.unspaced_mode:
            return len(line) + _UNSPACED_RE.subn("", line)[1]
        return len(line)

    def line_words(self, line: str) -> list[str]:
        return _TOKEN_RE.findall(line) if self.has_unspaced else line.split()


# --- filters ----------------------------------------------------------------------------------


def _sanity(s: _Stats, c: SanityConfig, lang: Optional[str]) -> None:
    if c.max_chars is not None and len(s.text) > c.max_chars:
        raise _Reject("sanity.too_long", f"chars={len(s.text)} > {c.max_chars}")
    if c.min_alnum_chars and _count_alnum(s.text, c.min_alnum_chars) < c.min_alnum_chars:
        raise _Reject("sanity.empty", f"alnum_chars<{c.min_alnum_chars}")


def _gopher_quality(s: _Stats, c: GopherQualityConfig, lang: Optional[str]) -> None:
    n_content = s.content_words
    if c.min_doc_words is not None and n_content < c.min_doc_words:
        raise _Reject("gopher_quality.too_few_words", f"words={n_content} < {c.min_doc_words}")
    if c.max_doc_words is not None and n_content > c.max_doc_words:
        raise _Reject("gopher_quality.too_many_words", f"words={n_content} > {c.max_doc_words}")
    if n_content < c.min_words_for_ratios:
        return
    n_words = len(s.words)
    mean = None
    if not s.unspaced_mode and (c.min_avg_word_length is not None or c.max_avg_word_length is not None):
        mean = s.mean_word_length
    if mean is not None:
        if c.min_avg_word_length is not None and mean < c.min_avg_word_length:
            raise _Reject("gopher_quality.short_mean_word_length", f"mean={_f(mean)} < {c.min_avg_word_length}")
        if c.max_avg_word_length is not None and mean > c.max_avg_word_length:
            raise _Reject("gopher_quality.long_mean_word_length", f"mean={_f(mean)} > {c.max_avg_word_length}")
    if c.max_symbol_word_ratio is not None:
        r = _ratio(s.text.count("#"), n_words)
        if r > c.max_symbol_word_ratio:
            raise _Reject("gopher_quality.hash_ratio", f"ratio={_f(r)} > {c.max_symbol_word_ratio}")
        r = _ratio(s.text.count("...") + s.text.count("…"), n_words)
        if r > c.max_symbol_word_ratio:
            raise _Reject("gopher_quality.ellipsis_ratio", f"ratio={_f(r)} > {c.max_symbol_word_ratio}")
    lines = s.lines
    if c.max_bullet_lines_ratio is not None:
        prefixes = c.bullet_prefixes
        r = _ratio(sum(1 for line in lines if line.lstrip().startswith(prefixes)), len(lines))
        if r > c.max_bullet_lines_ratio:
            raise _Reject("gopher_quality.bullet_lines", f"share={_f(r)} > {c.max_bullet_lines_ratio}")
    if c.max_ellipsis_lines_ratio is not None:
        r = _ratio(sum(1 for line in lines if line.endswith(("...", "…"))), len(lines))
        if r > c.max_ellipsis_lines_ratio:
            raise _Reject("gopher_quality.ellipsis_lines", f"share={_f(r)} > {c.max_ellipsis_lines_ratio}")
    if c.min_alpha_words_ratio is not None:
        r = _ratio(s.letter_words, n_words)
        if r < c.min_alpha_words_ratio:
            raise _Reject("gopher_quality.few_alpha_words", f"share={_f(r)} < {c.min_alpha_words_ratio}")
    if c.min_stop_words and not s.unspaced_mode and (
        c.stop_words_lang is None or lang in (None, "und", c.stop_words_lang)
    ):
        ws = s.word_set
        found = 0
        for sw in c.stop_words:
            for form in {sw.lower(), sw.capitalize(), sw.upper()}:
                if any(form + suffix in ws for suffix in _STOP_SUFFIXES):
                    found += 1
                    break
        if found < c.min_stop_words:
            raise _Reject("gopher_quality.few_stop_words", f"stop_words={found} < {c.min_stop_words}")


def _top_ngram_chars(words: list[str], n: int) -> int:
    """Characters covered by the most frequent n-gram (the first seen among equals) if it occurs at
    least twice, else 0. An n-gram's characters are its words joined by single spaces."""
    counts = Counter(zip(*(words[i:] for i in range(n))))
    if not counts:
        return 0
    top = max(counts.values())
    if top < 2:
        return 0
    gram = next(g for g, c in counts.items() if c == top)
    return (sum(map(len, gram)) + n - 1) * top


def _dup_ngram_shares(s: _Stats, thresholds: tuple[tuple[int, float], ...], total: int, scale: int) -> None:
    """Reject if, for some n, the duplicated n-grams hold more than the share of ``total``
    characters. Duplicated n-gram characters are counted as Gopher / datatrove do: scan left to
    right; an n-gram already seen counts its characters (words joined without separators) and the
    scan jumps past it, otherwise it is remembered and the scan moves one word.

    Only n-grams occurring twice or more can ever be "already seen", so the scan visits just those
    positions (same result, much less work); and an (n+1)-gram can only occur twice where its
    n-gram prefix does, so the positions narrow as n grows."""
    words = s.words
    n_words = len(words)
    prefix = s.word_prefix_chars
    candidates: Optional[list[int]] = None  # positions whose previous n-gram occurs twice or more
    for n_rule, share in thresholds:
        n = n_rule * scale
        m = n_words - n + 1
        if m < 2:
            return
        if candidates is None:
            positions: Sequence[int] = range(m)
            grams = list(zip(*(words[i:] for i in range(n))))
        else:
            positions = [i for i in candidates if i < m]
            grams = [tuple(words[i : i + n]) for i in positions]
        counts = Counter(grams)
        if len(counts) == len(grams):
            return  # no n-gram repeats, so no longer one does either
        repeated = list(compress(range(len(grams)), map((1).__lt__, map(counts.__getitem__, grams))))
        seen: set[tuple] = set()
        next_free = 0
        chars = 0
        for k in repeated:
            start = positions[k]
            if start < next_free:
                continue  # inside an n-gram already counted: the scan jumped over it
            gram = grams[k]
            if gram in seen:
                chars += prefix[start + n] - prefix[start]
                next_free = start + n
                r = chars / total  # total > 0: there are words
                if r > share:
                    raise _Reject("gopher_repetition.dup_ngram", f"n={n_rule} share={_f(r)} > {share}")
            else:
                seen.add(gram)
        candidates = [positions[k] for k in repeated]


def _gopher_repetition(s: _Stats, c: GopherRepetitionConfig, lang: Optional[str]) -> None:
    if c.min_words_for_ratios and s.content_words < c.min_words_for_ratios:
        return
    total = len(s.text)
    if c.dup_para_frac is not None or c.dup_para_char_frac is not None:
        paras = s.paragraphs
        n_dup, dup_chars = _dups(paras)
        r = _ratio(n_dup, len(paras))
        if c.dup_para_frac is not None and r > c.dup_para_frac:
            raise _Reject("gopher_repetition.dup_paragraphs", f"share={_f(r)} > {c.dup_para_frac}")
        r = _ratio(dup_chars, total)
        if c.dup_para_char_frac is not None and r > c.dup_para_char_frac:
            raise _Reject("gopher_repetition.dup_paragraph_chars", f"share={_f(r)} > {c.dup_para_char_frac}")
    if c.dup_line_frac is not None or c.dup_line_char_frac is not None:
        n_dup, dup_chars = s.line_dups
        r = _ratio(n_dup, len(s.lines))
        if c.dup_line_frac is not None and r > c.dup_line_frac:
            raise _Reject("gopher_repetition.dup_lines", f"share={_f(r)} > {c.dup_line_frac}")
        r = _ratio(dup_chars, total)
        if c.dup_line_char_frac is not None and r > c.dup_line_char_frac:
            raise _Reject("gopher_repetition.dup_line_chars", f"share={_f(r)} > {c.dup_line_char_frac}")
    if not c.top_n_grams and not c.dup_n_grams:
        return
    scale = s.ngram_scale
    if c.ngram_window_chars is not None and total > c.ngram_window_chars:
        # bounded work on huge texts: the n-gram rules read the first ngram_window_chars characters
        s = _Stats(s.text[: c.ngram_window_chars], s._unspaced_share, s._ngram_scale)
        total = len(s.text)
    for n, share in c.top_n_grams:
        chars = _top_ngram_chars(s.words, n * scale)
        r = _ratio(chars, total)
        if r > share:
            raise _Reject("gopher_repetition.top_ngram", f"n={n} share={_f(r)} > {share}")
    if c.dup_n_grams:
        _dup_ngram_shares(s, c.dup_n_grams, total, scale)


def _c4(s: _Stats, c: C4Config, lang: Optional[str]) -> None:
    end_punct = c.end_punctuation
    policy = c.policy_substrings
    total_chars = removed = sentences = 0
    for raw in s.lines:
        line = raw.strip()
        n = len(line)
        total_chars += n
        words = s.line_words(line)
        if c.max_word_length is not None and words and max(map(len, words)) > c.max_word_length:
            removed += n
            continue
        if c.remove_citations and "[" in line:
            line = _CITATION_RE.sub("", line)
        if c.filter_no_terminal_punct and (not line.endswith(end_punct) or line.endswith("...")):
            removed += n
            continue
        if c.min_words_per_line is not None and len(words) < c.min_words_per_line:
            removed += n
            continue
        low = line.lower()
        if c.filter_lorem_ipsum and "lorem ipsum" in low:
            raise _Reject("c4.lorem_ipsum", f"kept_line_chars={len(line)}")
        if c.filter_javascript and "javascript" in low:
            removed += n
            continue
        if c.filter_curly_bracket and "{" in line:
            raise _Reject("c4.curly_bracket", f"kept_line_chars={len(line)}")
        if c.filter_policy and any(p in low for p in policy):
            removed += n
            continue
        found = len(_SENTENCE_END_RE.findall(line))
        sentences += found if found > 1 else 1
    if c.min_num_sentences is not None and sentences < c.min_num_sentences:
        raise _Reject("c4.too_few_sentences", f"sentences={sentences} < {c.min_num_sentences}")
    if c.max_removed_char_share is not None:
        r = _ratio(removed, total_chars)
        if r > c.max_removed_char_share:
            raise _Reject("c4.too_much_removed", f"removed_share={_f(r)} > {c.max_removed_char_share}")


def _fineweb(s: _Stats, c: FineWebConfig, lang: Optional[str]) -> None:
    lines = s.lines
    n_lines = len(lines)
    if c.line_punct_thr is not None:
        stop = c.stop_chars
        r = _ratio(sum(1 for line in lines if line.endswith(stop)), n_lines)
        if r < c.line_punct_thr and not (r == 0 and c.line_punct_exclude_zero):
            raise _Reject("fineweb.line_punctuation", f"share={_f(r)} < {c.line_punct_thr} lines={n_lines}")
    if c.short_line_thr is not None:
        limit = c.short_line_length
        if s.unspaced_mode:
            short = sum(1 for line in lines if s.width(line) <= limit)
        else:
            short = sum(1 for line in lines if len(line) <= limit)
        r = _ratio(short, n_lines)
        if r > c.short_line_thr:
            raise _Reject("fineweb.short_lines", f"share={_f(r)} > {c.short_line_thr}")
    if c.char_duplicates_ratio is not None:
        r = _ratio(s.line_dups[1], len(s.text) - s.newlines)
        if r > c.char_duplicates_ratio:
            raise _Reject("fineweb.dup_line_chars", f"share={_f(r)} > {c.char_duplicates_ratio}")
    if c.new_line_ratio is not None:
        n_words = len(s.words)
        newlines = s.newlines
        if (n_words == 0 and newlines > 0) or (n_words and newlines / n_words > c.new_line_ratio):
            raise _Reject("fineweb.newline_ratio", f"newlines={newlines} words={n_words} > {c.new_line_ratio}")


_TEXT_RULES = {
    "sanity": _sanity,
    "gopher_quality": _gopher_quality,
    "gopher_repetition": _gopher_repetition,
    "c4": _c4,
    "fineweb": _fineweb,
}


# --- engines ----------------------------------------------------------------------------------


def _run_text(text: str, plan: _Plan, config: QualityConfig, lang: Optional[str]) -> Optional[QualityVerdict]:
    stats = _Stats(text, config.unspaced_script_share, config.unspaced_ngram_scale)
    for name in plan.filters:
        rule = _TEXT_RULES.get(name)
        if rule is None:
            continue
        try:
            rule(stats, plan.configs[name], lang)  # type: ignore[arg-type]
        except _Reject as r:
            return QualityVerdict(False, r.reason, r.detail, plan.versions[name])
    return None


def _passed(config: QualityConfig) -> QualityVerdict:
    return QualityVerdict(True, None, "", config._policy_version)


def judge_text(
    text: str,
    filters: Sequence[str],
    config: QualityConfig,
    *,
    lang: Optional[str] = None,
    apply_key: Optional[str] = None,
) -> QualityVerdict:
    """Judge a plain text with the named text filters (run in ``FILTER_ORDER``, first failure
    decides). Thresholds are the config's sections, with the overrides of ``apply_key`` if given.
    ``lang`` (a langid label) gates the stop-word rule; ``None`` means unknown."""
    filters = tuple(filters)
    unknown = [f for f in filters if f not in TEXT_FILTERS]
    if unknown:
        raise ValueError(f"unknown text filter(s) {unknown}; text filters are {list(TEXT_FILTERS)}")
    if apply_key is not None and apply_key not in config.apply:
        raise ValueError(f"apply_key {apply_key!r} is not in the config's apply map")
    cache_key = (frozenset(filters), apply_key)
    plan = config._text_plans.get(cache_key)
    if plan is None:
        overrides = config.overrides.get(apply_key, {}) if apply_key is not None else {}
        configs: dict[str, _Strict] = {}
        versions: dict[str, str] = {}
        for name in TEXT_FILTERS:
            if name not in filters:
                continue
            base = getattr(config, name)
            cfg = type(base).model_validate({**base.model_dump(), **overrides[name]}) if name in overrides else base
            if cfg.enabled:  # type: ignore[attr-defined]
                configs[name] = cfg
                versions[name] = filter_version(name, cfg, config)
        plan = _Plan("text", tuple(configs), configs, versions)
        config._text_plans[cache_key] = plan
    return _run_text(text, plan, config, lang) or _passed(config)


def _fold(text: str) -> str:
    return " ".join(text.casefold().split())


def judged_text(record: Record) -> Optional[str]:
    """The text the text filters read for a record (``None``: nothing to judge)."""
    p = record.payload
    kind = p.kind
    if kind == "document":
        return p.text
    if kind == "messages":
        parts = [m.content for m in p.messages if m.role == "assistant" and m.content.strip()]
        return "\n\n".join(parts) if parts else None
    if kind == "preference":
        return "\n\n".join(m.content for m in p.prompt if m.role != "tool" and m.content.strip())
    if kind == "instruction":
        return p.output
    if kind == "reasoning":
        return f"{p.process}\n\n{p.answer}"
    if kind == "task":
        return p.input
    raise TypeError(f"unknown payload kind {kind!r}")


def _pair_rules(record: Record, c: PairConfig, prompt_text: str) -> None:
    p = record.payload
    if _count_alnum(prompt_text, c.min_alnum_chars) < c.min_alnum_chars:
        raise _Reject("pair.empty_prompt", f"prompt_alnum_chars<{c.min_alnum_chars}")
    for side in ("chosen", "rejected"):
        if _count_alnum(getattr(p, side).content, c.min_alnum_chars) < c.min_alnum_chars:
            raise _Reject("pair.empty_answer", f"{side}_alnum_chars<{c.min_alnum_chars}")
    a, b = p.chosen.content, p.rejected.content
    if (_fold(a) == _fold(b)) if c.fold_identical else (a == b):
        raise _Reject("pair.identical_answers", f"chars={len(a)},{len(b)}")


def judge_record(record: Record, config: QualityConfig) -> QualityVerdict:
    """Judge a typed record with the filters ``config.apply`` declares for its
    ``schema_type``/``domain``, on the text ``judged_text`` picks (see the module docstring)."""
    plan = config.plan_for(record.schema_type, record.domain)
    payload = record.payload
    text = judged_text(record)
    if (
        payload.kind == "messages"
        and "sanity" in plan.configs
        and not any(m.role == "assistant" for m in payload.messages)
    ):
        detail = f"messages={len(payload.messages)}"
        return QualityVerdict(False, "sanity.no_assistant_turn", detail, plan.versions["sanity"])
    if "pair" in plan.configs and payload.kind == "preference":
        try:
            _pair_rules(record, plan.configs["pair"], text or "")  # type: ignore[arg-type]
        except _Reject as r:
            return QualityVerdict(False, r.reason, r.detail, plan.versions["pair"])
    if text is None:
        return _passed(config)
    lang = record.lang if record.lang else None
    return _run_text(text, plan, config, lang) or _passed(config)
