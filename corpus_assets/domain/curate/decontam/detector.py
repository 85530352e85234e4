"""Benchmark decontamination by n-gram containment from the benchmark side (issue 3).

Deduplication asks whether training records repeat each other; decontamination asks whether the
training data holds protected evaluation material. A short benchmark question copied into a long
web page shares almost nothing with the page *as a whole* (Jaccard similarity of the two n-gram
sets is tiny), yet every n-gram of the question is in the page. So the detector is the
containment of the evaluation item in the document, computed from the benchmark side
(Broder 1997 distinguishes resemblance from containment)::

    C_n(e, d) = |G_n(e) ∩ G_n(d)| / |G_n(e)|

where ``G_n(z)`` is the set of token n-grams of ``z`` after normalization. A document is flagged
for an item when ``C_n(e, d) >= tau``.

Method, exactly as implemented (the contamination report repeats it):

Normalization (``normalize_tokens``; the *same* function on both sides):
  tokens are maximal runs of "word characters" — Unicode letters, numbers and combining marks
  (categories L*, N*, M*), plus compatibility characters whose NFKC form contains one (``™``,
  ``㎏``, ``½``) — with one exception: every Han ideograph, hiragana and katakana character is a
  token by itself (those scripts do not separate words with spaces). Everything else
  (whitespace, punctuation, symbols, ``_``) separates tokens. Each token is NFKC-normalized and
  case-folded; if that introduces a separator (``½`` -> ``1⁄2``) the token is split again. For a
  run of word characters, this equals "NFKC, casefold, split on non-alphanumerics" of the whole
  text. Each token keeps the character span it came from, so matches can be masked in the
  original text. Scripts written without spaces other than CJK (Thai, Lao, Khmer, Myanmar)
  become one token per run, which makes matching coarse there. Code is tokenized the same way:
  identifiers split at ``_`` and punctuation, and indentation is ignored.

n-grams and hashing:
  a token is hashed with xxh64; an n-gram's hash is the polynomial combination
  ``sum(h(t_i) * M**(n-1-i)) mod 2**64`` of its token hashes (computed for a whole document at
  once with numpy). Hash equality only proposes candidates: every candidate n-gram is then
  compared token by token with the item's own n-grams, so the containment reported is exact.

Choice of n:
  an item with at least ``short_item_tokens`` tokens (and at least ``n``) uses ``n`` (13, the
  n-gram length of GPT-3's contamination analysis, Brown et al. 2020); a shorter item uses
  ``short_n`` (8, the n-gram length of PaLM's analysis, Chowdhery et al. 2022); an item with
  fewer than ``short_n`` tokens is *not checked* — matching a few words (an answer such as
  "18" or "Wrong, Not wrong") would flag ordinary text, not contamination — and it is counted
  as unchecked, per benchmark and field, in the report.

Threshold:
  ``tau = 0.5`` by default. For comparison, GPT-3 counted an example as dirty when *any* of its
  13-grams appeared in the training data (tau -> 1/|G_n(e)|), PaLM when at least 70 % of its
  8-grams did (tau = 0.7). 0.5 flags more than PaLM's rule (a copy with a few edits still
  crosses it) while still needing more than one shared n-gram on a long item, so a single
  quoted sentence of shared phrasing does not remove a page.

Suppression of common n-grams:
  an n-gram that occurs in more than ``max_ngram_item_frequency`` distinct registry items
  (benchmark, item id) — instruction boilerplate, MMLU's "For which of these two scenarios does
  the main character ..." — is removed from the index and from every item's n-gram set, so it
  neither proposes candidates nor counts in the containment: ``G_n(e)`` above is the item's set
  of *non-suppressed* n-grams. An item all of whose n-grams are suppressed is counted as
  unchecked. Frequencies are counted separately for ``n`` and ``short_n`` over all items long
  enough to have such n-grams.

Matching:
  ``ContaminationIndex.build`` puts every kept n-gram hash of the registry in a sorted array
  with posting lists of protected texts (memory proportional to the registry).
  ``ContaminationIndex.match`` tokenizes a document once, hashes its n-grams, looks every hash up
  in the index (a direct-mapped presence table on the top hash bits, then binary search for the
  few that pass it; so the cost is linear in the document length, never all pairs), and computes
  the exact containment only for the items that share at least one n-gram.

Action:
  a record with at least one match (``containment >= tau``) is removed (``action="remove"``) or,
  with ``action="mask"``, kept with the character spans covered by the matched n-grams replaced
  by a placeholder. Either way the decision carries the reason code ``eval_contamination`` and
  the matched item ids.

Limits (also stated in every report): lexical matching misses paraphrases, translations,
rewritten code and synthetic restatements that keep the answer (Yang et al. 2023). A report can
say what was checked and what was removed; it cannot show that no evaluation material is left.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Literal, NamedTuple, Optional, Sequence

import numpy as np
import xxhash
from pydantic import BaseModel, ConfigDict, model_validator

from corpus_assets.domain.curate.decontam.eval_registry import DEFAULT_FIELDS, EvalRegistry
from corpus_assets.domain.core.hashing import canonical_digest

__all__ = [
    "DECONTAM_CODE_VERSION",
    "REASON_EVAL_CONTAMINATION",
    "NORMALIZATION_DESCRIPTION",
    "DecontamConfig",
    "decontam_policy_version",
    "normalize_tokens",
    "tokenize_with_offsets",
    "TokenizedText",
    "ContaminationIndex",
    "Match",
    "mask_spans",
    "DecontamDecision",
    "Decontaminator",
    "ContaminationReport",
]

DECONTAM_CODE_VERSION = "decontam-1"
REASON_EVAL_CONTAMINATION = "eval_contamination"
DEFAULT_PLACEHOLDER = "<EVAL_REDACTED>"

NORMALIZATION_DESCRIPTION = (
    "tokens = maximal runs of Unicode letters, numbers and combining marks (plus compatibility "
    "characters whose NFKC form contains one); every Han, hiragana and katakana character is a "
    "token by itself; each token NFKC-normalized and case-folded (and split again if that "
    "introduces a separator); whitespace, punctuation, symbols and '_' separate tokens. "
    "The same function is applied to benchmark items and to training documents."
)


# ------------------------------------------------------------------------------------------------
# configuration


class DecontamConfig(BaseModel):
    """Decontamination policy. Every value except the registry paths enters the policy version
    (the registry enters through its digest, wherever its files live)."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = True
    registry_files: list[Path] = []
    fields: list[str] = list(DEFAULT_FIELDS)
    n: int = 13
    short_item_tokens: int = 30
    short_n: int = 8
    tau: float = 0.5
    max_ngram_item_frequency: int = 10
    action: Literal["remove", "mask"] = "remove"

    @model_validator(mode="after")
    def _check(self) -> "DecontamConfig":
        if self.n < 1 or self.short_n < 1:
            raise ValueError("n and short_n must be at least 1")
        if self.short_n > self.n:
            raise ValueError(f"short_n ({self.short_n}) must not exceed n ({self.n})")
        if self.short_item_tokens < 0:
            raise ValueError("short_item_tokens must be >= 0")
        if not (0.0 < self.tau <= 1.0):
            raise ValueError(f"tau must be in (0, 1], got {self.tau}")
        if self.max_ngram_item_frequency < 1:
            raise ValueError("max_ngram_item_frequency must be >= 1")
        if not self.fields or any(not f for f in self.fields) or len(set(self.fields)) != len(self.fields):
            raise ValueError("fields must be a non-empty list of distinct field names")
        return self

    def method(self) -> dict:
        """The settings that determine what is flagged (no paths)."""
        return self.model_dump(mode="json", exclude={"registry_files"})


def decontam_policy_version(config: DecontamConfig, registry_digest: str) -> str:
    """16 hex digits naming (code version, method settings, registry digest)."""
    return canonical_digest(
        {"code_version": DECONTAM_CODE_VERSION, "config": config.method(), "registry_digest": registry_digest}
    )[:16]


# ------------------------------------------------------------------------------------------------
# normalization / tokenization

_ASCII_TOKEN_RE = re.compile(r"[A-Za-z0-9]+")

# Han (CJK unified ideographs and extensions, compatibility ideographs), iteration marks,
# hiragana, katakana (incl. phonetic extensions and half-width forms).
_CJK_RANGES: tuple[tuple[int, int], ...] = (
    (0x3005, 0x3007),
    (0x3040, 0x309F),
    (0x30A0, 0x30FF),
    (0x31F0, 0x31FF),
    (0x3400, 0x4DBF),
    (0x4E00, 0x9FFF),
    (0xF900, 0xFAFF),
    (0xFF66, 0xFF9F),
    (0x20000, 0x2FFFF),
    (0x30000, 0x3FFFF),
)


def _ranges_to_class(ranges: Iterable[tuple[int, int]]) -> str:
    parts = []
    for lo, hi in ranges:
        parts.append(re.escape(chr(lo)) if lo == hi else f"{re.escape(chr(lo))}-{re.escape(chr(hi))}")
    return "".join(parts)


def _is_cjk(cp: int) -> bool:
    return cp >= 0x3005 and any(lo <= cp <= hi for lo, hi in _CJK_RANGES)


def _is_word_char(c: str) -> bool:
    """Token characters (CJK included): letters, numbers, marks, and compatibility characters
    whose NFKC form contains a letter, number or mark. (For str patterns, ``re``'s ``[^\\W_]``
    is exactly ``str.isalnum()``, i.e. the letters and numbers.)"""
    if c.isalnum():
        return True
    k = unicodedata.category(c)
    if k[0] == "M":
        return True
    if k in ("Cn", "Cs", "Co") or unicodedata.is_normalized("NFKC", c):
        return False
    return any(unicodedata.category(x)[0] in "LNM" for x in unicodedata.normalize("NFKC", c))


def _runs(cps: Iterable[int]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for cp in cps:
        if out and out[-1][1] == cp - 1:
            out[-1] = (out[-1][0], cp)
        else:
            out.append((cp, cp))
    return out


class _TokenRegexes(NamedTuple):
    bmp: re.Pattern  # exact for text without astral characters (fast: BMP-only character sets)
    full: re.Pattern  # exact for any text
    astral: re.Pattern  # finds an astral character


def compute_extra_word_ranges() -> list[tuple[int, int]]:
    """The word characters ``str.isalnum()`` misses (marks, compatibility characters; CJK
    excepted), as inclusive code point ranges. Scans every code point (~2 s): the result for the
    running Unicode version is shipped in unicode_word_table.py (scripts/gen_unicode_word_table.py)."""
    return _runs(
        cp for cp in range(0x80, 0x110000)
        if not chr(cp).isalnum() and not _is_cjk(cp) and _is_word_char(chr(cp))
    )


def _extra_word_ranges() -> list[tuple[int, int]]:
    from corpus_assets.domain.curate.decontam import unicode_word_table as table

    if table.UNIDATA_VERSION == unicodedata.unidata_version:
        return list(table.EXTRA_RANGES)
    return compute_extra_word_ranges()  # another Python, another Unicode database: compute


def _split_at_astral(ranges: Iterable[tuple[int, int]]) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    bmp, astral = [], []
    for lo, hi in ranges:
        if hi < 0x10000:
            bmp.append((lo, hi))
        elif lo >= 0x10000:
            astral.append((lo, hi))
        else:
            bmp.append((lo, 0xFFFF))
            astral.append((0x10000, hi))
    return bmp, astral


@functools.lru_cache(maxsize=1)
def _unicode_token_res() -> _TokenRegexes:
    """``CJK char | maximal run of other word chars``, as two equivalent regexes (built once).

    A run is written ``W+(?:E+W*)*|E+(?:W+E*)*`` with W = ``[^\\W_]`` minus CJK (letters and
    numbers, tested by ``re`` in O(1)) and E = the few other word characters (marks and
    compatibility characters), so E's long range list is only consulted where W fails. Python's
    ``re`` stores a character set that holds only BMP characters as a constant-time bitmap, so the
    BMP pattern is several times faster; it is used when the text has no astral character.
    """
    extra_b, extra_a = _split_at_astral(_extra_word_ranges())
    cjk_b = _ranges_to_class(r for r in _CJK_RANGES if r[1] < 0x10000)
    cjk_a = _ranges_to_class(r for r in _CJK_RANGES if r[0] >= 0x10000)
    e_b = _ranges_to_class(extra_b)
    e_a = _ranges_to_class(extra_a)

    def pattern(cjk: str, w_excl: str, e: str) -> str:
        W, E = f"[^\\W_{w_excl}]", f"[{e}]"
        return f"[{cjk}]|{W}+(?:{E}+{W}*)*|{E}+(?:{W}+{E}*)*"

    return _TokenRegexes(
        bmp=re.compile(pattern(cjk_b, cjk_b, e_b)),
        full=re.compile(pattern(cjk_b + cjk_a, cjk_b + cjk_a, e_b + e_a)),
        astral=re.compile("[\U00010000-\U0010FFFF]"),
    )


def _token_re_for(text: str) -> re.Pattern:
    res = _unicode_token_res()
    return res.full if res.astral.search(text) else res.bmp


class TokenizedText(NamedTuple):
    """Normalized tokens and, for each, the [start, end) character span it came from."""

    tokens: list[str]
    starts: list[int]
    ends: list[int]


def _tokenize(text: str, with_offsets: bool) -> TokenizedText:
    if text.isascii():
        low = text.lower()  # for ASCII, NFKC is the identity and casefold() == lower()
        if not with_offsets:
            return TokenizedText(_ASCII_TOKEN_RE.findall(low), [], [])
        toks, starts, ends = [], [], []
        for m in _ASCII_TOKEN_RE.finditer(low):
            toks.append(m.group())
            starts.append(m.start())
            ends.append(m.end())
        return TokenizedText(toks, starts, ends)
    rx = _token_re_for(text)
    if not with_offsets:
        # Same result as the per-run loop below, in a few C-level passes: NUL never composes or
        # reorders with a neighbour under NFKC and is a separator, so normalizing the runs joined
        # by NUL and splitting again gives the concatenation of the per-run results.
        runs = rx.findall(text)
        if not runs:
            return TokenizedText([], [], [])
        joined = "\x00".join(runs)
        if joined.isascii():
            return TokenizedText(joined.lower().split("\x00"), [], [])
        norm = unicodedata.normalize("NFKC", joined).casefold()
        return TokenizedText(_token_re_for(norm).findall(norm), [], [])
    toks, starts, ends = [], [], []
    nfkc = unicodedata.normalize
    for m in rx.finditer(text):
        run = m.group()
        if run.isascii():
            parts = [run.lower()]
        else:
            norm = nfkc("NFKC", run).casefold()
            parts = _token_re_for(norm).findall(norm)
        for p in parts:
            toks.append(p)
            if with_offsets:
                starts.append(m.start())
                ends.append(m.end())
    return TokenizedText(toks, starts, ends)


def normalize_tokens(text: str) -> list[str]:
    """The normalized tokens of ``text`` (see the module docstring); same function for both sides."""
    return _tokenize(text, False).tokens


def tokenize_with_offsets(text: str) -> TokenizedText:
    """``normalize_tokens`` plus each token's character span in ``text`` (for masking)."""
    return _tokenize(text, True)


# ------------------------------------------------------------------------------------------------
# hashing

_MULT = 0x9E3779B97F4A7C15  # odd 64-bit multiplier (golden ratio)
_MASK64 = (1 << 64) - 1


@functools.lru_cache(maxsize=64)
def _powers(n: int) -> np.ndarray:
    return np.array([pow(_MULT, n - 1 - i, 1 << 64) for i in range(n)], dtype=np.uint64)


def _token_hashes(tokens: Sequence[str]) -> np.ndarray:
    return np.fromiter(map(xxhash.xxh64_intdigest, map(str.encode, tokens)), dtype=np.uint64, count=len(tokens))


def _ngram_hashes(th: np.ndarray, n: int) -> np.ndarray:
    """Hash of every n-gram (position p covers tokens p..p+n-1), length max(0, len(th) - n + 1)."""
    m = len(th) - n + 1
    if m <= 0:
        return np.empty(0, dtype=np.uint64)
    pw = _powers(n)
    out = th[0:m] * pw[0]
    for i in range(1, n):
        out += th[i : i + m] * pw[i]
    return out


# ------------------------------------------------------------------------------------------------
# matches and masking


@dataclass(frozen=True)
class Match:
    """One protected text found in a document, with its containment from the benchmark side."""

    benchmark: str
    item_id: str
    field: str
    containment: float  # matched_ngrams / item_ngrams
    matched_ngrams: int  # distinct (non-suppressed) n-grams of the item found in the document
    item_ngrams: int  # distinct non-suppressed n-grams of the item, |G_n(e)|
    spans: tuple[tuple[int, int], ...]  # merged [start, end) character spans covered by matched n-grams
    n: int = 13  # the n used for this item (n or short_n)

    @property
    def item_key(self) -> str:
        return f"{self.benchmark}/{self.item_id}"


def _merge_spans(spans: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for s, e in sorted(spans):
        if out and s <= out[-1][1]:
            if e > out[-1][1]:
                out[-1] = (out[-1][0], e)
        else:
            out.append((s, e))
    return out


def mask_spans(text: str, spans: Iterable[tuple[int, int]], placeholder: str = DEFAULT_PLACEHOLDER) -> str:
    """Replace every (merged) [start, end) span of ``text`` with ``placeholder``; the rest is kept."""
    merged = _merge_spans(spans)
    for s, e in merged:
        if not (0 <= s < e <= len(text)):
            raise ValueError(f"span ({s}, {e}) outside text of length {len(text)}")
    parts, pos = [], 0
    for s, e in merged:
        parts.append(text[pos:s])
        parts.append(placeholder)
        pos = e
    parts.append(text[pos:])
    return "".join(parts)


# ------------------------------------------------------------------------------------------------
# the index

UNIT_CHECKED = "checked"
UNIT_TOO_SHORT = "too_short"  # fewer than short_n tokens
UNIT_ALL_SUPPRESSED = "all_ngrams_suppressed"


@dataclass
class _NIndex:
    """Sorted n-gram hashes with CSR posting lists of unit indices, for one n."""

    n: int
    keys: np.ndarray  # uint64, sorted, unique
    offsets: np.ndarray  # int64, len(keys) + 1
    postings: np.ndarray  # int32 unit indices
    suppressed: int  # distinct n-grams dropped as too common
    filter_shift: int = 64  # prefilter: a byte per value of (hash >> filter_shift)
    prefilter: np.ndarray = field(default_factory=lambda: np.zeros(1, dtype=bool))

    @classmethod
    def make(cls, n: int, keys: np.ndarray, offsets: np.ndarray, postings: np.ndarray, suppressed: int) -> "_NIndex":
        # a direct-mapped presence table on the top bits, about 16 slots per key (so ~6 % of
        # the document's n-grams that are not in the index pass it), capped at 2**26 slots
        bits = min(26, max(10, int(np.ceil(np.log2(max(1, len(keys)) * 16)))))
        table = np.zeros(1 << bits, dtype=bool)
        table[keys >> np.uint64(64 - bits)] = True
        return cls(n, keys, offsets, postings, suppressed, 64 - bits, table)

    def lookup(self, gh: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Positions p with gh[p] in keys, and the key index of each."""
        cand = np.flatnonzero(self.prefilter[gh >> np.uint64(self.filter_shift)])
        if len(cand) == 0:
            return cand, cand
        sub = gh[cand]
        pos = np.searchsorted(self.keys, sub)
        pos[pos == len(self.keys)] = 0
        ok = self.keys[pos] == sub
        return cand[ok], pos[ok]

    @property
    def nbytes(self) -> int:
        return int(self.keys.nbytes + self.offsets.nbytes + self.postings.nbytes + self.prefilter.nbytes)


class ContaminationIndex:
    """Registry n-grams -> protected texts. Build once per (registry, config); match per document."""

    def __init__(self) -> None:  # use build()
        raise TypeError("use ContaminationIndex.build(registry, config)")

    @classmethod
    def build(cls, registry: EvalRegistry, config: DecontamConfig) -> "ContaminationIndex":
        self = object.__new__(cls)
        self.config = config.model_copy(deep=True)  # later edits of the caller's config change nothing here
        self.registry_digest = registry.digest
        self.policy_version = decontam_policy_version(config, registry.digest)
        wanted = set(config.fields)
        units = [it for it in registry.items if it.field in wanted]
        self._units = units
        self._registry_items_per_benchmark = registry.benchmarks()
        n_units = len(units)
        self._unit_n = np.zeros(n_units, dtype=np.int16)
        self._unit_ngrams = np.zeros(n_units, dtype=np.int32)
        self._unit_status: list[str] = [UNIT_TOO_SHORT] * n_units

        # item key (benchmark, item_id) -> dense id, for frequency counting
        item_ids: dict[tuple[str, str], int] = {}
        per_k: dict[int, tuple[list[np.ndarray], list[np.ndarray]]] = {}
        unit_hashes: list[Optional[np.ndarray]] = [None] * n_units
        ks = sorted({config.n, config.short_n})
        for u, it in enumerate(units):
            toks = normalize_tokens(it.text)
            L = len(toks)
            if L < config.short_n:
                continue
            key_id = item_ids.setdefault((it.benchmark, it.item_id), len(item_ids))
            th = _token_hashes(toks)
            n_u = config.n if (L >= config.short_item_tokens and L >= config.n) else config.short_n
            self._unit_n[u] = n_u
            for k in ks:
                if L < k:
                    continue
                h = np.unique(_ngram_hashes(th, k))
                hs, ids = per_k.setdefault(k, ([], []))
                hs.append(h)
                ids.append(np.full(len(h), key_id, dtype=np.int64))
                if k == n_u:
                    unit_hashes[u] = h

        # common n-grams per k: in more than max_ngram_item_frequency distinct items
        common: dict[int, np.ndarray] = {}
        for k, (hs, ids) in per_k.items():
            H = np.concatenate(hs)
            I = np.concatenate(ids)
            order = np.lexsort((I, H))
            H, I = H[order], I[order]
            keep = np.ones(len(H), dtype=bool)
            keep[1:] = (H[1:] != H[:-1]) | (I[1:] != I[:-1])  # distinct (hash, item) pairs
            uh, counts = np.unique(H[keep], return_counts=True)
            common[k] = uh[counts > config.max_ngram_item_frequency]

        self._by_n: dict[int, _NIndex] = {}
        for k in ks:
            members = [u for u in range(n_units) if unit_hashes[u] is not None and int(self._unit_n[u]) == k]
            if not members:
                continue
            H = np.concatenate([unit_hashes[u] for u in members])
            U = np.concatenate([np.full(len(unit_hashes[u]), u, dtype=np.int32) for u in members])
            c = common.get(k)
            suppressed = 0
            if c is not None and len(c):
                dropped = np.isin(H, c)
                suppressed = int(len(np.unique(H[dropped])))
                H, U = H[~dropped], U[~dropped]
            counts = np.bincount(U, minlength=n_units)
            for u in members:
                if counts[u] == 0:
                    self._unit_status[u] = UNIT_ALL_SUPPRESSED
                else:
                    self._unit_status[u] = UNIT_CHECKED
                    self._unit_ngrams[u] = counts[u]
            if len(H) == 0:
                continue
            order = np.lexsort((U, H))
            H, U = H[order], U[order]
            keys, first = np.unique(H, return_index=True)
            offsets = np.append(first, len(H)).astype(np.int64)
            self._by_n[k] = _NIndex.make(k, keys, offsets, U, suppressed)
        # suppressed n-gram counts are reported for every k, even one without checked units
        self._suppressed_counts = {k: int(len(common.get(k, ()))) for k in ks}
        self._unit_tuples = functools.lru_cache(maxsize=4096)(self._unit_tuples_uncached)
        return self

    def __getstate__(self) -> dict:  # picklable (e.g. to ship to worker processes); the cache is not
        state = dict(self.__dict__)
        state.pop("_unit_tuples", None)
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._unit_tuples = functools.lru_cache(maxsize=4096)(self._unit_tuples_uncached)

    # -- introspection ------------------------------------------------------------------------

    @property
    def nbytes(self) -> int:
        """Bytes held by the index arrays (keys, offsets, postings, per-unit metadata)."""
        return sum(ix.nbytes for ix in self._by_n.values()) + int(self._unit_n.nbytes + self._unit_ngrams.nbytes)

    @property
    def ngram_count(self) -> int:
        return sum(len(ix.keys) for ix in self._by_n.values())

    def suppressed_ngrams(self) -> dict[int, int]:
        """Distinct registry n-grams suppressed as too common, per n."""
        return dict(self._suppressed_counts)

    def unit_summary(self) -> dict[str, dict[str, dict[str, int]]]:
        """benchmark -> field -> {protected, checked, too_short, all_ngrams_suppressed, n=<k> ...}."""
        out: dict[str, dict[str, Counter]] = {}
        for u, it in enumerate(self._units):
            c = out.setdefault(it.benchmark, {}).setdefault(it.field, Counter())
            c["protected"] += 1
            st = self._unit_status[u]
            c[st] += 1
            if st == UNIT_CHECKED:
                c[f"n={int(self._unit_n[u])}"] += 1
        return {
            b: {f: dict(sorted(c.items())) for f, c in sorted(fs.items())} for b, fs in sorted(out.items())
        }

    # -- matching -----------------------------------------------------------------------------

    def _unit_tuples_uncached(self, u: int) -> frozenset:
        toks = normalize_tokens(self._units[u].text)
        k = int(self._unit_n[u])
        return frozenset(tuple(toks[p : p + k]) for p in range(len(toks) - k + 1))

    def candidates(self, text: str) -> list[Match]:
        """Every protected text sharing at least one (verified) n-gram with ``text``, with its
        exact containment, whether or not it reaches tau. Sorted by containment, descending."""
        toks = normalize_tokens(text)
        if not toks or not self._by_n:
            return []
        th = _token_hashes(toks)
        hits: dict[int, list[int]] = {}
        for k, ix in self._by_n.items():
            gh = _ngram_hashes(th, k)
            if len(gh) == 0:
                continue
            found, kpos = ix.lookup(gh)
            if len(found) == 0:
                continue
            offsets, postings = ix.offsets, ix.postings
            for p, kidx in zip(found.tolist(), kpos.tolist()):
                for u in postings[offsets[kidx] : offsets[kidx + 1]].tolist():
                    hits.setdefault(u, []).append(p)
        if not hits:
            return []
        verified: list[tuple[int, int, list[int]]] = []
        for u, positions in hits.items():
            k = int(self._unit_n[u])
            grams = self._unit_tuples(u)
            matched: set[tuple] = set()
            good: list[int] = []
            for p in positions:
                t = tuple(toks[p : p + k])
                if t in grams:  # rules out hash collisions: containment is exact
                    matched.add(t)
                    good.append(p)
            if good:
                verified.append((u, min(len(matched), int(self._unit_ngrams[u])), good))
        if not verified:
            return []
        tk = tokenize_with_offsets(text)
        out = []
        for u, m, good in verified:
            k = int(self._unit_n[u])
            it = self._units[u]
            spans = _merge_spans((tk.starts[p], tk.ends[p + k - 1]) for p in good)
            total = int(self._unit_ngrams[u])
            out.append(
                Match(
                    benchmark=it.benchmark,
                    item_id=it.item_id,
                    field=it.field,
                    containment=m / total,
                    matched_ngrams=m,
                    item_ngrams=total,
                    spans=tuple(spans),
                    n=k,
                )
            )
        out.sort(key=lambda x: (-x.containment, x.benchmark, x.item_id, x.field))
        return out

    def match(self, text: str) -> list[Match]:
        """The protected texts whose containment in ``text`` reaches tau (the flagged matches)."""
        tau = self.config.tau
        return [m for m in self.candidates(text) if m.containment >= tau]


# ------------------------------------------------------------------------------------------------
# per-record decisions and the report


@dataclass(frozen=True)
class DecontamDecision:
    """What happened to one record: keep, remove or mask, with reason code and matched items."""

    action: Literal["keep", "remove", "mask"]
    reason: Optional[str]  # REASON_EVAL_CONTAMINATION when flagged, else None
    matches: tuple[Match, ...]  # flagged matches (containment >= tau)
    text: Optional[str]  # the text to keep: original (keep), masked (mask), None (remove)
    best_below_tau: float = 0.0  # highest containment among candidates that did not reach tau

    @property
    def flagged(self) -> bool:
        return bool(self.matches)

    @property
    def matched_item_ids(self) -> tuple[str, ...]:
        return tuple(sorted({m.item_key for m in self.matches}))


_SAMPLE_LIMIT = 50


def _method_fields(config: DecontamConfig) -> dict:
    """The report fields that describe how checking was done (same for every report of a config)."""
    return {
        "code_version": DECONTAM_CODE_VERSION,
        "normalization": NORMALIZATION_DESCRIPTION,
        "n": config.n,
        "short_n": config.short_n,
        "short_item_tokens": config.short_item_tokens,
        "tau": config.tau,
        "max_ngram_item_frequency": config.max_ngram_item_frequency,
        "action": config.action,
        "fields": list(config.fields),
    }


@dataclass
class ContaminationReport:
    """What was checked and how, and what was found. Never a statement that data is free of
    benchmark material: only "no matches found under this method"."""

    enabled: bool
    code_version: str
    policy_version: str
    registry_digest: str
    normalization: str
    n: int
    short_n: int
    short_item_tokens: int
    tau: float
    max_ngram_item_frequency: int
    action: str
    fields: list[str]
    suppressed_ngrams: dict[int, int]
    registry_items_per_benchmark: dict[str, int]
    units: dict[str, dict[str, dict[str, int]]]  # benchmark -> field -> status counts
    records_checked: int = 0
    chars_checked: int = 0
    records_checked_per_source: dict[str, int] = field(default_factory=dict)
    records_flagged: int = 0
    records_flagged_per_source: dict[str, int] = field(default_factory=dict)
    records_flagged_per_benchmark: dict[str, int] = field(default_factory=dict)
    items_matched_per_benchmark: dict[str, set] = field(default_factory=dict)
    records_removed: int = 0
    records_masked: int = 0
    chars_masked: int = 0
    tokens_removed: int = 0  # normalized tokens of removed records plus tokens inside masked spans
    records_below_tau: int = 0  # records with some shared n-gram but no item reaching tau (kept)
    flagged_sample: list[dict] = field(default_factory=list)  # first flagged (record id, items) for review

    @classmethod
    def for_index(cls, index: ContaminationIndex) -> "ContaminationReport":
        return cls(
            enabled=index.config.enabled,
            policy_version=index.policy_version,
            registry_digest=index.registry_digest,
            **_method_fields(index.config),
            suppressed_ngrams=index.suppressed_ngrams(),
            registry_items_per_benchmark=dict(index._registry_items_per_benchmark),
            units=index.unit_summary(),
        )

    @classmethod
    def disabled(cls, config: DecontamConfig, registry: Optional[EvalRegistry] = None) -> "ContaminationReport":
        digest = registry.digest if registry is not None else ""
        return cls(
            enabled=False,
            policy_version=decontam_policy_version(config, digest),
            registry_digest=digest,
            **_method_fields(config),
            suppressed_ngrams={},
            registry_items_per_benchmark=registry.benchmarks() if registry is not None else {},
            units={},
        )

    # -- accumulation -------------------------------------------------------------------------

    def add(self, decision: DecontamDecision, *, source: str, text: str, record_id: Optional[str] = None) -> None:
        self.records_checked += 1
        self.chars_checked += len(text)
        self.records_checked_per_source[source] = self.records_checked_per_source.get(source, 0) + 1
        if not decision.flagged:
            if decision.best_below_tau > 0:
                self.records_below_tau += 1
            return
        self.records_flagged += 1
        self.records_flagged_per_source[source] = self.records_flagged_per_source.get(source, 0) + 1
        for b in sorted({m.benchmark for m in decision.matches}):
            self.records_flagged_per_benchmark[b] = self.records_flagged_per_benchmark.get(b, 0) + 1
        for m in decision.matches:
            self.items_matched_per_benchmark.setdefault(m.benchmark, set()).add(m.item_id)
        if decision.action == "remove":
            self.records_removed += 1
            self.tokens_removed += len(normalize_tokens(text))
        elif decision.action == "mask":
            self.records_masked += 1
            spans = _merge_spans(sp for m in decision.matches for sp in m.spans)
            self.chars_masked += sum(e - s for s, e in spans)
            self.tokens_removed += sum(len(normalize_tokens(text[s:e])) for s, e in spans)
        if len(self.flagged_sample) < _SAMPLE_LIMIT:
            self.flagged_sample.append(
                {
                    "record_id": record_id,
                    "source": source,
                    "action": decision.action,
                    "items": [
                        {"item": m.item_key, "field": m.field, "containment": round(m.containment, 4)}
                        for m in decision.matches
                    ],
                }
            )

    def merge(self, other: "ContaminationReport") -> "ContaminationReport":
        """Add another report's counts (same policy version) into this one, e.g. across partitions."""
        if other.policy_version != self.policy_version:
            raise ValueError(f"cannot merge reports of policies {self.policy_version} and {other.policy_version}")
        for name in (
            "records_checked", "chars_checked", "records_flagged", "records_removed", "records_masked",
            "chars_masked", "tokens_removed", "records_below_tau",
        ):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        for name in ("records_checked_per_source", "records_flagged_per_source", "records_flagged_per_benchmark"):
            mine = getattr(self, name)
            for k, v in getattr(other, name).items():
                mine[k] = mine.get(k, 0) + v
        for b, ids in other.items_matched_per_benchmark.items():
            self.items_matched_per_benchmark.setdefault(b, set()).update(ids)
        room = _SAMPLE_LIMIT - len(self.flagged_sample)
        self.flagged_sample.extend(other.flagged_sample[: max(0, room)])
        return self

    # -- output -------------------------------------------------------------------------------

    def unchecked_counts(self) -> dict[str, dict[str, int]]:
        """benchmark -> {too_short, all_ngrams_suppressed} protected texts that were not checked."""
        out: dict[str, dict[str, int]] = {}
        for b, fs in self.units.items():
            out[b] = {
                UNIT_TOO_SHORT: sum(c.get(UNIT_TOO_SHORT, 0) for c in fs.values()),
                UNIT_ALL_SUPPRESSED: sum(c.get(UNIT_ALL_SUPPRESSED, 0) for c in fs.values()),
            }
        return out

    def to_dict(self) -> dict:
        """JSON-ready form for manifests and Dagster metadata (no benchmark text, only ids)."""
        return {
            "enabled": self.enabled,
            "code_version": self.code_version,
            "policy_version": self.policy_version,
            "registry_digest": self.registry_digest,
            "method": {
                "measure": "containment from the benchmark side: |G_n(e) ∩ G_n(d)| / |G_n(e)|",
                "normalization": self.normalization,
                "n": self.n,
                "short_n": self.short_n,
                "short_item_tokens": self.short_item_tokens,
                "items_shorter_than_short_n": "not checked; counted as unchecked",
                "tau": self.tau,
                "max_ngram_item_frequency": self.max_ngram_item_frequency,
                "suppressed_ngrams": {str(k): v for k, v in sorted(self.suppressed_ngrams.items())},
                "retrieval": "hashed n-gram index (xxh64), candidates verified token by token",
                "action": self.action,
                "fields": list(self.fields),
            },
            "registry_items_per_benchmark": dict(self.registry_items_per_benchmark),
            "protected_texts": self.units,
            "unchecked": self.unchecked_counts(),
            "records_checked": self.records_checked,
            "chars_checked": self.chars_checked,
            "records_checked_per_source": dict(sorted(self.records_checked_per_source.items())),
            "records_flagged": self.records_flagged,
            "records_flagged_per_source": dict(sorted(self.records_flagged_per_source.items())),
            "records_flagged_per_benchmark": dict(sorted(self.records_flagged_per_benchmark.items())),
            "items_matched_per_benchmark": {
                b: len(ids) for b, ids in sorted(self.items_matched_per_benchmark.items())
            },
            "records_removed": self.records_removed,
            "records_masked": self.records_masked,
            "chars_masked": self.chars_masked,
            "tokens_removed": self.tokens_removed,
            "records_below_tau": self.records_below_tau,
            "flagged_sample": list(self.flagged_sample),
        }

    def to_markdown(self) -> str:
        """The report for people: method first, then counts, then the limits of the method."""
        L: list[str] = ["# Contamination report", ""]
        if not self.enabled:
            L += [
                "Decontamination was **disabled** by configuration: no record was checked against "
                "the evaluation registry, so this report says nothing about benchmark overlap.",
                "",
                f"- registry digest: `{self.registry_digest or '(none loaded)'}`",
                f"- policy version: `{self.policy_version}` (code `{self.code_version}`)",
            ]
            return "\n".join(L) + "\n"
        L += [
            "## What was checked and how",
            "",
            f"- evaluation registry digest: `{self.registry_digest}`",
            f"- policy version: `{self.policy_version}` (code `{self.code_version}`)",
            "- measure: n-gram containment from the benchmark side, "
            "C_n(e, d) = |G_n(e) ∩ G_n(d)| / |G_n(e)|, per protected text e and record d",
            f"- normalization (both sides): {self.normalization}",
            f"- n = {self.n} for protected texts of at least {self.short_item_tokens} tokens; "
            f"n = {self.short_n} for shorter ones; texts with fewer than {self.short_n} tokens are "
            "**not checked** (counted below)",
            f"- threshold: a record is flagged for an item when C_n >= tau = {self.tau}",
            f"- common n-grams suppressed: those in more than {self.max_ngram_item_frequency} registry "
            "items; suppressed: "
            + (", ".join(f"{v} distinct {k}-grams" for k, v in sorted(self.suppressed_ngrams.items())) or "none"),
            "- retrieval: hashed n-gram index over the registry; every candidate verified token by token",
            f"- fields protected: {', '.join(self.fields)}",
            f"- action on a flagged record: {self.action} (reason code `{REASON_EVAL_CONTAMINATION}`)",
            "",
            "## Registry",
            "",
            f"| benchmark | items | field | protected texts | checked with n = {self.n} | checked with n = {self.short_n} "
            "| unchecked: too short | unchecked: all n-grams suppressed |",
            "|---|---:|---|---:|---:|---:|---:|---:|",
        ]
        for b, n_items in sorted(self.registry_items_per_benchmark.items()):
            fs = self.units.get(b, {})
            for f, c in sorted(fs.items()):
                L.append(
                    f"| {b} | {n_items} | {f} | {c.get('protected', 0)} | {c.get(f'n={self.n}', 0)} "
                    f"| {c.get(f'n={self.short_n}', 0) if self.short_n != self.n else 0} | {c.get(UNIT_TOO_SHORT, 0)} "
                    f"| {c.get(UNIT_ALL_SUPPRESSED, 0)} |"
                )
            if not fs:
                L.append(f"| {b} | {n_items} | (no protected field selected) | 0 | 0 | 0 | 0 | 0 |")
        L += [
            "",
            "## Records",
            "",
            f"- records checked: {self.records_checked} ({self.chars_checked} characters)",
            f"- records flagged: {self.records_flagged} (removed {self.records_removed}, masked "
            f"{self.records_masked}; {self.chars_masked} characters masked; {self.tokens_removed} "
            "normalized tokens taken out)",
            f"- records sharing some n-gram with an item but below tau (kept): {self.records_below_tau}",
            "",
            "| source | records checked | records flagged |",
            "|---|---:|---:|",
        ]
        for s, c in sorted(self.records_checked_per_source.items()):
            L.append(f"| {s} | {c} | {self.records_flagged_per_source.get(s, 0)} |")
        L += ["", "| benchmark | records flagged | distinct items matched |", "|---|---:|---:|"]
        for b in sorted(self.registry_items_per_benchmark):
            L.append(
                f"| {b} | {self.records_flagged_per_benchmark.get(b, 0)} "
                f"| {len(self.items_matched_per_benchmark.get(b, ()))} |"
            )
        L += ["", "## Result", ""]
        if self.records_flagged == 0:
            L.append(
                f"No matches found under this method (the normalization, n, tau and registry "
                f"`{self.registry_digest[:16]}` above) in the {self.records_checked} records checked."
            )
        else:
            L.append(
                f"{self.records_flagged} of {self.records_checked} records matched at least one protected "
                f"item under this method and were handled by the action `{self.action}`."
            )
        L += [
            "",
            "## Limits",
            "",
            "This is a lexical check. It does not detect paraphrases, translations, rewritten code or "
            "synthetic restatements that keep an item's answer (Yang et al. 2023), nor items with fewer "
            f"than {self.short_n} tokens, nor items whose n-grams were all suppressed. It shows what was "
            "checked and what was removed; it cannot show that the data holds no evaluation material.",
        ]
        return "\n".join(L) + "\n"


class Decontaminator:
    """Applies the policy to records one at a time and accumulates the report."""

    def __init__(
        self,
        index: Optional[ContaminationIndex],
        config: Optional[DecontamConfig] = None,
        registry: Optional[EvalRegistry] = None,
        placeholder: str = DEFAULT_PLACEHOLDER,
    ) -> None:
        """``Decontaminator(index)`` applies the index's policy; ``Decontaminator(None, config)``
        with a disabled config keeps every record and reports that nothing was checked."""
        self.config = index.config if index is not None else config
        if self.config is None:
            raise ValueError("a Decontaminator needs an index, or a disabled config")
        if self.config.enabled and index is None:
            raise ValueError("decontamination is enabled but no ContaminationIndex was given")
        self.index = index if self.config.enabled else None
        self.report = (
            ContaminationReport.for_index(index) if self.index is not None
            else ContaminationReport.disabled(self.config, registry)
        )
        self.placeholder = placeholder

    @classmethod
    def from_registry(cls, registry: EvalRegistry, config: DecontamConfig) -> "Decontaminator":
        if not config.enabled:
            return cls(None, config, registry)
        return cls(ContaminationIndex.build(registry, config))

    def check(self, text: str, *, source: str, record_id: Optional[str] = None) -> DecontamDecision:
        if self.index is None:
            return DecontamDecision("keep", None, (), text)
        cands = self.index.candidates(text)
        tau = self.config.tau
        flagged = tuple(m for m in cands if m.containment >= tau)
        below = max((m.containment for m in cands if m.containment < tau), default=0.0)
        if not flagged:
            decision = DecontamDecision("keep", None, (), text, best_below_tau=below)
        elif self.config.action == "mask":
            masked = mask_spans(text, [sp for m in flagged for sp in m.spans], self.placeholder)
            decision = DecontamDecision("mask", REASON_EVAL_CONTAMINATION, flagged, masked, best_below_tau=below)
        else:
            decision = DecontamDecision("remove", REASON_EVAL_CONTAMINATION, flagged, None, best_below_tau=below)
        self.report.add(decision, source=source, text=text, record_id=record_id)
        return decision
