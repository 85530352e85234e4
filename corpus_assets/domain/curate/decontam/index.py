"""The n-gram index over the evaluation registry, and the matches it finds in a text.

Built once per (registry, policy): every checked protected text's non-suppressed n-grams go into
a sorted array of hashes with posting lists, so matching a document costs time linear in its
length (never documents x items). ``candidates`` returns every protected text that shares a
verified n-gram with the text, with its exact containment from the benchmark side
``|G_n(e) ∩ G_n(d)| / |G_n(e)|`` and the rule that flags it, if any: containment >= tau, or, for a
long protected text (at least ``long_item_tokens`` tokens), at least ``long_item_min_ngrams``
shared n-grams. ``match`` keeps the flagged ones. Two kinds of n-grams are suppressed (neither
propose candidates nor count): those in more than ``max_ngram_item_frequency`` registry items,
and a benchmark's template n-grams (in more than ``template_share`` of its items). Texts too
short to check and texts whose n-grams are all suppressed are counted, not silently skipped.
Method and the choice of the settings: docs/curation.md, "Decontamination".
"""

from __future__ import annotations

import functools
from collections import Counter
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from corpus_assets.domain.curate.decontam.config import (
    RULE_CONTAINMENT,
    RULE_LONG_NGRAM,
    DecontamConfig,
    decontam_policy_version,
)
from corpus_assets.domain.curate.decontam.eval_registry import EvalRegistry
from corpus_assets.domain.curate.decontam.masking import merge_spans
from corpus_assets.domain.curate.decontam.ngrams import ngram_hashes, token_hashes
from corpus_assets.domain.curate.decontam.normalize import normalize_tokens, tokenize_with_offsets

__all__ = [
    "UNIT_ALL_SUPPRESSED",
    "UNIT_CHECKED",
    "UNIT_LONG_RULE",
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
    rule: Optional[str] = None  # RULE_CONTAINMENT, RULE_LONG_NGRAM, or None: a candidate not flagged
    item_tokens: int = 0  # normalized tokens of the protected text

    @property
    def flagged(self) -> bool:
        return self.rule is not None

    @property
    def item_key(self) -> str:
        return f"{self.benchmark}/{self.item_id}"


UNIT_CHECKED = "checked"
UNIT_TOO_SHORT = "too_short"  # fewer than short_n tokens
UNIT_ALL_SUPPRESSED = "all_ngrams_suppressed"
UNIT_LONG_RULE = "long_rule"  # checked, and long enough for the long n-gram rule (counted besides its status)


@dataclass
class _NIndex:
    """Sorted n-gram hashes with CSR posting lists of unit indices, for one n."""

    n: int
    keys: np.ndarray  # uint64, sorted, unique
    offsets: np.ndarray  # int64, len(keys) + 1
    postings: np.ndarray  # int32 unit indices
    suppressed: int  # distinct n-grams dropped as too common
    # parallel to postings: the n-gram is an edge of a suppressed run in that unit (more than half
    # its tokens inside suppressed n-grams) — counted by containment, not by the long n-gram rule
    edge: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    filter_shift: int = 64  # prefilter: a byte per value of (hash >> filter_shift)
    prefilter: np.ndarray = field(default_factory=lambda: np.zeros(1, dtype=bool))

    @classmethod
    def make(cls, n: int, keys: np.ndarray, offsets: np.ndarray, postings: np.ndarray, suppressed: int,
             edge: np.ndarray) -> "_NIndex":
        # a direct-mapped presence table on the top bits, about 16 slots per key (so ~6 % of
        # the document's n-grams that are not in the index pass it), capped at 2**26 slots
        bits = min(26, max(10, int(np.ceil(np.log2(max(1, len(keys)) * 16)))))
        table = np.zeros(1 << bits, dtype=bool)
        table[keys >> np.uint64(64 - bits)] = True
        return cls(n, keys, offsets, postings, suppressed, edge, 64 - bits, table)

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
        return int(self.keys.nbytes + self.offsets.nbytes + self.postings.nbytes + self.edge.nbytes
                   + self.prefilter.nbytes)


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
        self._unit_tokens = np.zeros(n_units, dtype=np.int32)
        self._unit_status: list[str] = [UNIT_TOO_SHORT] * n_units
        bench_names = sorted({it.benchmark for it in units})
        bench_id = {b: i for i, b in enumerate(bench_names)}
        # the denominator of template_share: a benchmark's items (distinct item ids, any field)
        bench_items = np.array([self._registry_items_per_benchmark.get(b, 0) for b in bench_names], dtype=np.int64)

        # item key (benchmark, item_id) -> dense id, for frequency counting
        item_ids: dict[tuple[str, str], int] = {}
        item_bench: list[int] = []
        per_k: dict[int, tuple[list[np.ndarray], list[np.ndarray]]] = {}
        unit_hashes: list[Optional[np.ndarray]] = [None] * n_units
        ks = sorted({config.n, config.short_n})
        for u, it in enumerate(units):
            toks = normalize_tokens(it.text)
            L = len(toks)
            self._unit_tokens[u] = L
            if L < config.short_n:
                continue
            key = (it.benchmark, it.item_id)
            if key not in item_ids:
                item_ids[key] = len(item_ids)
                item_bench.append(bench_id[it.benchmark])
            key_id = item_ids[key]
            th = token_hashes(toks)
            n_u = config.n if (L >= config.short_item_tokens and L >= config.n) else config.short_n
            self._unit_n[u] = n_u
            for k in ks:
                if L < k:
                    continue
                g = ngram_hashes(th, k)
                h = np.unique(g)
                hs, ids = per_k.setdefault(k, ([], []))
                hs.append(h)
                ids.append(np.full(len(h), key_id, dtype=np.int64))
                if k == n_u:
                    unit_hashes[u] = g  # in text order until suppression is decided
        item_bench_arr = np.array(item_bench, dtype=np.int64)

        # common n-grams per k: in more than max_ngram_item_frequency distinct items (all
        # benchmarks); template n-grams per (benchmark, k): in at least template_min_items and
        # more than template_share of that benchmark's items
        common: dict[int, np.ndarray] = {}
        templates: dict[int, dict[int, np.ndarray]] = {}  # k -> benchmark id -> sorted hashes
        for k, (hs, ids) in per_k.items():
            H = np.concatenate(hs)
            I = np.concatenate(ids)
            order = np.lexsort((I, H))
            H, I = H[order], I[order]
            keep = np.ones(len(H), dtype=bool)
            keep[1:] = (H[1:] != H[:-1]) | (I[1:] != I[:-1])  # distinct (hash, item) pairs
            H, I = H[keep], I[keep]
            uh, counts = np.unique(H, return_counts=True)
            common[k] = uh[counts > config.max_ngram_item_frequency]
            B = item_bench_arr[I]
            order = np.lexsort((H, B))
            Hb, Bb = H[order], B[order]
            starts = np.flatnonzero(np.r_[True, (Hb[1:] != Hb[:-1]) | (Bb[1:] != Bb[:-1])])
            per_pair = np.diff(np.r_[starts, len(Hb)])
            pb, ph = Bb[starts], Hb[starts]
            limit = np.maximum(config.template_min_items, np.floor(config.template_share * bench_items[pb]) + 1)
            hit = per_pair >= limit
            templates[k] = {int(b): np.unique(ph[hit & (pb == b)]) for b in np.unique(pb[hit]).tolist()}

        # per protected text: drop the suppressed n-grams; mark as *edges* the n-grams more than
        # half of whose tokens lie inside suppressed ones ("<template> The" is in one item only, yet
        # says no more than the template): they count in the containment, not for the long rule
        suppressed_total: dict[int, set] = {k: set() for k in ks}
        unit_edge: list[Optional[np.ndarray]] = [None] * n_units
        unit_bench = np.array([bench_id[it.benchmark] for it in units], dtype=np.int64)
        for k in ks:
            members = [u for u in range(n_units) if unit_hashes[u] is not None and int(self._unit_n[u]) == k]
            if not members:
                continue
            lens = np.array([len(unit_hashes[u]) for u in members], dtype=np.int64)
            starts = np.r_[0, np.cumsum(lens)]
            G = np.concatenate([unit_hashes[u] for u in members])
            sup = np.zeros(len(G), dtype=bool)
            c = common.get(k)
            if c is not None and len(c):
                sup |= np.isin(G, c)
            if templates.get(k):
                GB = np.repeat(unit_bench[members], lens)
                for b, t_b in templates[k].items():
                    sel = GB == b
                    sup[sel] |= np.isin(G[sel], t_b)
            any_sup = np.add.reduceat(sup.astype(np.int64), starts[:-1]) > 0 if len(G) else np.zeros(len(members), bool)
            for j, u in enumerate(members):
                g = unit_hashes[u]
                if not any_sup[j]:
                    unit_hashes[u] = np.unique(g)
                    unit_edge[u] = np.zeros(len(unit_hashes[u]), dtype=bool)
                    continue
                s_u = sup[starts[j] : starts[j + 1]]
                cover = np.zeros(len(g) + k, dtype=np.int64)  # tokens covered by a suppressed n-gram
                pos = np.flatnonzero(s_u)
                np.add.at(cover, pos, 1)
                np.add.at(cover, pos + k, -1)
                covered = (np.cumsum(cover)[: len(g) + k - 1] > 0).astype(np.int64)
                csum = np.r_[0, np.cumsum(covered)]
                inside = csum[k : k + len(g)] - csum[: len(g)]  # covered tokens of the n-gram at q
                suppressed_total[k].update(np.unique(g[s_u]).tolist())
                kept = np.unique(g[~s_u])
                strong = np.unique(g[~s_u & (2 * inside <= k)])
                unit_hashes[u] = kept
                unit_edge[u] = ~np.isin(kept, strong)

        self._by_n: dict[int, _NIndex] = {}
        for k in ks:
            members = [u for u in range(n_units) if unit_hashes[u] is not None and int(self._unit_n[u]) == k]
            if not members:
                continue
            H = np.concatenate([unit_hashes[u] for u in members])
            U = np.concatenate([np.full(len(unit_hashes[u]), u, dtype=np.int32) for u in members])
            E = np.concatenate([unit_edge[u] for u in members])
            suppressed = len(suppressed_total[k])
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
            H, U, E = H[order], U[order], E[order]
            keys, first = np.unique(H, return_index=True)
            offsets = np.append(first, len(H)).astype(np.int64)
            self._by_n[k] = _NIndex.make(k, keys, offsets, U, suppressed, E)
        # suppressed n-gram counts are reported for every k, even one without checked units
        self._suppressed_counts = {k: int(len(common.get(k, ()))) for k in ks}
        self._template_counts = {
            b: {k: int(len(templates.get(k, {}).get(bench_id[b], ()))) for k in ks} for b in bench_names
        }
        self._long_tokens = config.long_item_tokens
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
        """Distinct registry n-grams suppressed as too common (in more than
        max_ngram_item_frequency items of the whole registry), per n."""
        return dict(self._suppressed_counts)

    def template_ngrams(self) -> dict[str, dict[int, int]]:
        """benchmark -> n -> distinct n-grams suppressed as that benchmark's template."""
        return {b: dict(c) for b, c in self._template_counts.items()}

    def is_long(self, u: int) -> bool:
        """Whether protected text ``u`` is long enough for the long n-gram rule."""
        return self._long_tokens is not None and int(self._unit_tokens[u]) >= self._long_tokens

    def unit_summary(self) -> dict[str, dict[str, dict[str, int]]]:
        """benchmark -> field -> {protected, checked, too_short, all_ngrams_suppressed, n=<k>,
        long_rule} (long_rule: checked texts the long n-gram rule applies to)."""
        out: dict[str, dict[str, Counter]] = {}
        for u, it in enumerate(self._units):
            c = out.setdefault(it.benchmark, {}).setdefault(it.field, Counter())
            c["protected"] += 1
            st = self._unit_status[u]
            c[st] += 1
            if st == UNIT_CHECKED:
                c[f"n={int(self._unit_n[u])}"] += 1
                if self.is_long(u):
                    c[UNIT_LONG_RULE] += 1
        return {
            b: {f: dict(sorted(c.items())) for f, c in sorted(fs.items())} for b, fs in sorted(out.items())
        }

    # -- matching -----------------------------------------------------------------------------

    def _unit_tuples_uncached(self, u: int) -> frozenset:
        toks = normalize_tokens(self._units[u].text)
        k = int(self._unit_n[u])
        return frozenset(tuple(toks[p : p + k]) for p in range(len(toks) - k + 1))

    def _rule(self, u: int, containment: float, strong: int) -> Optional[str]:
        """``strong``: matched n-grams that are not edges of a suppressed run."""
        if containment >= self.config.tau:
            return RULE_CONTAINMENT
        if self.is_long(u) and strong >= self.config.long_item_min_ngrams:
            return RULE_LONG_NGRAM
        return None

    def candidates(self, text: str) -> list[Match]:
        """Every protected text sharing at least one (verified) n-gram with ``text``, with its
        exact containment and the rule that flags it (``None``: not flagged). Sorted by
        containment, descending."""
        toks = normalize_tokens(text)
        if not toks or not self._by_n:
            return []
        th = token_hashes(toks)
        hits: dict[int, list[tuple[int, bool]]] = {}  # unit -> (position, edge n-gram for that unit)
        for k, ix in self._by_n.items():
            gh = ngram_hashes(th, k)
            if len(gh) == 0:
                continue
            found, kpos = ix.lookup(gh)
            if len(found) == 0:
                continue
            offsets, postings, edge = ix.offsets, ix.postings, ix.edge
            for p, kidx in zip(found.tolist(), kpos.tolist()):
                a, b = offsets[kidx], offsets[kidx + 1]
                for u, e in zip(postings[a:b].tolist(), edge[a:b].tolist()):
                    hits.setdefault(u, []).append((p, e))
        if not hits:
            return []
        verified: list[tuple[int, int, int, list[int]]] = []
        for u, positions in hits.items():
            k = int(self._unit_n[u])
            grams = self._unit_tuples(u)
            matched: set[tuple] = set()
            strong: set[tuple] = set()
            good: list[int] = []
            for p, e in positions:
                t = tuple(toks[p : p + k])
                if t in grams:  # rules out hash collisions: containment is exact
                    matched.add(t)
                    if not e:
                        strong.add(t)
                    good.append(p)
            if good:
                verified.append((u, min(len(matched), int(self._unit_ngrams[u])), len(strong), good))
        if not verified:
            return []
        tk = tokenize_with_offsets(text)
        out = []
        for u, m, strong_m, good in verified:
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
                    rule=self._rule(u, m / total, strong_m),
                    item_tokens=int(self._unit_tokens[u]),
                )
            )
        out.sort(key=lambda x: (-x.containment, x.benchmark, x.item_id, x.field))
        return out

    def match(self, text: str) -> list[Match]:
        """The flagged matches: containment >= tau, or the long n-gram rule."""
        return [m for m in self.candidates(text) if m.flagged]
