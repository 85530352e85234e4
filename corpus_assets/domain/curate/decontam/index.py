"""The n-gram index over the evaluation registry, and the matches it finds in a text.

Built once per (registry, policy): every checked protected text's non-suppressed n-grams go into
a sorted array of hashes with posting lists, so matching a document costs time linear in its
length (never documents x items). ``candidates`` returns every protected text that shares a
verified n-gram with the text, with its exact containment from the benchmark side
``|G_n(e) ∩ G_n(d)| / |G_n(e)|``; ``match`` keeps those that reach tau. Texts too short to check
and texts whose n-grams are all suppressed are counted, not silently skipped. Method and the
choice of n, short_n, tau and the suppression limit: docs/curation.md, "Decontamination".
"""

from __future__ import annotations

import functools
from collections import Counter
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from corpus_assets.domain.curate.decontam.config import DecontamConfig, decontam_policy_version
from corpus_assets.domain.curate.decontam.eval_registry import EvalRegistry
from corpus_assets.domain.curate.decontam.masking import merge_spans
from corpus_assets.domain.curate.decontam.ngrams import ngram_hashes, token_hashes
from corpus_assets.domain.curate.decontam.normalize import normalize_tokens, tokenize_with_offsets

__all__ = [
    "UNIT_ALL_SUPPRESSED",
    "UNIT_CHECKED",
    "UNIT_TOO_SHORT",
    "ContaminationIndex",
    "Match",
]


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
            th = token_hashes(toks)
            n_u = config.n if (L >= config.short_item_tokens and L >= config.n) else config.short_n
            self._unit_n[u] = n_u
            for k in ks:
                if L < k:
                    continue
                h = np.unique(ngram_hashes(th, k))
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

    def registry_items_per_benchmark(self) -> dict[str, int]:
        """benchmark -> items in the registry the index was built from (all fields, checked or not)."""
        return dict(self._registry_items_per_benchmark)

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
        th = token_hashes(toks)
        hits: dict[int, list[int]] = {}
        for k, ix in self._by_n.items():
            gh = ngram_hashes(th, k)
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
            spans = merge_spans((tk.starts[p], tk.ends[p + k - 1]) for p in good)
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
