"""Sequence packing: fixed-length training blocks from token views, with provenance spans.

Samples (token views, ``Sample`` objects or concatenated columns) in plan order become
``PackedBlocks``: ``tokens``, ``loss_mask``, ``segment_ids``, ``position_ids`` of shape
``(n_blocks, T)``, a spans table (``PACKING_SPANS_SCHEMA``) and ``PackingStats``. Conventions:
``loss_mask[b, t] = 1`` iff token ``t`` is a target predicted from ``t - 1`` of the same block (so
position 0, padding and packer BOS never are); segments are 1..k per block, 0 for padding (at the
end only); every position is covered by exactly one span (``coverage_check``). Modes
``stream`` / ``atomic`` (fit ``in_order``, ``best_fit``, ``one_per_block``), boundaries ``mask`` /
``bos`` / ``none``. ``Packer`` streams in chunks and the result does not depend on the chunking.

Method, modes, accounting and decisions: docs/packing.md#packing
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator, Literal, Optional, Sequence, Union

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = [
    "span_sums",
    "PACKING_CODE_VERSION",
    "REASON_TOO_LONG",
    "PackingPolicy",
    "packing_policy_version",
    "Sample",
    "PackingStats",
    "PackedBlocks",
    "PACKING_SPANS_SCHEMA",
    "Packer",
    "pack_arrays",
    "pack",
    "iter_packed",
    "coverage_check",
    "use_numba",
    "PackerState",
    "BlockPlan",
    "plan_blocks",
    "packer_states",
    "block_window",
]

PACKING_CODE_VERSION = "1"
REASON_TOO_LONG = "packing.too_long"


# --- policy -------------------------------------------------------------------------------------


class PackingPolicy(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    seq_len: int = Field(ge=1, description="T, positions per block")
    mode: Literal["stream", "atomic"] = "atomic"
    tail: Literal["drop", "pad"] = Field(default="pad", description="last partial block: padded or dropped")
    fit: Literal["in_order", "best_fit", "one_per_block"] = Field(default="in_order", description="atomic only")
    open_blocks: int = Field(default=64, ge=1, description="best_fit: blocks kept open before the oldest is sealed")
    overlength: Literal["truncate", "split", "quarantine"] = Field(
        default="quarantine", description="atomic samples longer than the block capacity, handled before packing"
    )
    boundary: Literal["mask", "bos", "none"] = "mask"
    reset_positions: bool = False
    pad_id: int = Field(default=0, ge=0)
    transform_version: Optional[str] = Field(
        default=None, description="provenance version; None -> packing_policy_version(policy)"
    )

    @model_validator(mode="after")
    def _coherent(self) -> "PackingPolicy":
        if self.mode == "atomic" and self.boundary == "none":
            raise ValueError(
                "boundary='none' is only allowed with mode='stream': atomic samples must not predict the first "
                "token of another sample (use boundary='mask' or 'bos')"
            )
        if self.mode == "stream" and self.fit != "in_order":
            raise ValueError(f"fit={self.fit!r} applies to mode='atomic' only; a stream is cut in order (fit='in_order')")
        if self.boundary == "bos" and self.seq_len < 2:
            raise ValueError("seq_len must be >= 2 with boundary='bos' (a BOS and at least one token per block)")
        if self.transform_version is not None and not self.transform_version.strip():
            raise ValueError("transform_version must not be empty (or leave it unset)")
        return self


def packing_policy_version(policy: PackingPolicy) -> str:
    """``pk<code version>-<12 hex>``: changes with the code version and every policy field except
    ``transform_version`` itself."""
    payload = {"code": PACKING_CODE_VERSION, "policy": policy.model_dump(mode="json", exclude={"transform_version"})}
    h = hashlib.sha256(json.dumps(payload, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    return f"pk{PACKING_CODE_VERSION}-{h[:12]}"


# --- data types ---------------------------------------------------------------------------------


@dataclass
class Sample:
    """One token view to pack (``token_views.TokenView`` has the same attributes and is accepted too)."""

    record_id: str
    variant: Optional[str]
    input_ids: np.ndarray  # int32 (n,)
    loss_mask: np.ndarray  # uint8 (n,)
    offsets: np.ndarray  # int32 (n, 2); (-1, -1) for inserted tokens

    def __len__(self) -> int:
        return int(self.input_ids.shape[0])


@dataclass
class PackingStats:
    seq_len: int
    blocks: int = 0
    input_samples: int = 0
    input_tokens: int = 0
    content_tokens: int = 0  # view tokens in emitted blocks (view EOS included, packer BOS excluded)
    bos_tokens: int = 0  # BOS inserted by the packer, in emitted blocks
    inserted_tokens: int = 0  # positions of inserted spans in emitted blocks (packer BOS + view-inserted, e.g. EOS)
    padding: int = 0
    label_tokens: int = 0  # sum of the emitted loss mask
    dropped_tokens: int = 0  # view tokens of a dropped tail block
    truncated_tokens: int = 0
    quarantined_tokens: int = 0
    empty_samples: int = 0
    split_samples: int = 0  # over-length samples cut into pieces (overlength="split")
    quarantined: list = field(default_factory=list)  # (record_id, variant, reason, length)
    truncated: list = field(default_factory=list)  # (record_id, variant, kept, cut)
    dropped: list = field(default_factory=list)  # (record_id, variant, src_token_start, src_token_end)

    @property
    def positions(self) -> int:
        return self.blocks * self.seq_len

    @property
    def utilization(self) -> float:
        return self.content_tokens / self.positions if self.positions else 0.0

    @property
    def label_rate(self) -> float:
        return self.label_tokens / self.positions if self.positions else 0.0

    @property
    def inserted_rate(self) -> float:
        return self.inserted_tokens / self.positions if self.positions else 0.0

    @property
    def tail_drop_rate(self) -> float:
        return self.dropped_tokens / self.input_tokens if self.input_tokens else 0.0

    @property
    def data_loss_rate(self) -> float:
        lost = self.dropped_tokens + self.truncated_tokens + self.quarantined_tokens
        return lost / self.input_tokens if self.input_tokens else 0.0

    def __add__(self, other: "PackingStats") -> "PackingStats":
        if other.seq_len != self.seq_len:
            raise ValueError(f"cannot add stats of seq_len {self.seq_len} and {other.seq_len}")
        out = PackingStats(self.seq_len)
        for name in _COUNT_FIELDS:
            setattr(out, name, getattr(self, name) + getattr(other, name))
        for name in ("quarantined", "truncated", "dropped"):
            setattr(out, name, getattr(self, name) + getattr(other, name))
        return out

    def as_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {name: getattr(self, name) for name in ("seq_len", *_COUNT_FIELDS)}
        for name in ("positions", "utilization", "label_rate", "inserted_rate", "tail_drop_rate", "data_loss_rate"):
            d[name] = getattr(self, name)
        d["quarantined"] = [list(q) for q in self.quarantined]
        d["truncated"] = [list(t) for t in self.truncated]
        d["dropped"] = [list(x) for x in self.dropped]
        return d


_COUNT_FIELDS = (
    "blocks", "input_samples", "input_tokens", "content_tokens", "bos_tokens", "inserted_tokens", "padding",
    "label_tokens", "dropped_tokens", "truncated_tokens", "quarantined_tokens", "empty_samples", "split_samples",
)  # fmt: skip


PACKING_SPANS_SCHEMA = pa.schema(
    [
        ("block", pa.int64()),
        ("start", pa.int32()),  # half-open [start, end) within the block
        ("end", pa.int32()),
        ("record_id", pa.string()),  # null for padding
        ("variant", pa.string()),
        ("src_token_start", pa.int32()),  # token offsets in the record's view; null for a packer BOS / padding
        ("src_token_end", pa.int32()),
        ("char_start", pa.int32()),  # char offsets in the view's rendered text; null for inserted spans / padding
        ("char_end", pa.int32()),
        ("inserted", pa.bool_()),
        ("pad", pa.bool_()),
        ("transform_version", pa.string()),
    ]
)


@dataclass
class PackedBlocks:
    """Blocks ``first_block .. first_block + n - 1`` (all of them from :func:`pack`, one chunk's
    from :func:`iter_packed` / :class:`Packer`) and the stats of the same call."""

    seq_len: int
    pad_id: int
    first_block: int
    tokens: np.ndarray  # int32 (n, T)
    loss_mask: np.ndarray  # uint8 (n, T)
    segment_ids: np.ndarray  # int32 (n, T)
    position_ids: np.ndarray  # int32 (n, T)
    spans: pa.Table  # PACKING_SPANS_SCHEMA
    stats: PackingStats
    # view tokens placed in these blocks, per input sample: sample index (the sample's position
    # among everything given to the Packer, from 0) and count, one entry per span (sum per sample)
    placed_samples: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    placed_tokens: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    placed_blocks: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # global block of each entry

    def __len__(self) -> int:
        return int(self.tokens.shape[0])

    def placed_per_sample(self, n_samples: int) -> np.ndarray:
        """View tokens placed per sample, for samples ``0 .. n_samples - 1``."""
        return np.bincount(self.placed_samples, weights=self.placed_tokens, minlength=n_samples).astype(np.int64)

    @staticmethod
    def concat(parts: Sequence["PackedBlocks"]) -> "PackedBlocks":
        """Consecutive parts (each starting where the previous ended) as one."""
        if not parts:
            raise ValueError("concat needs at least one part")
        first = parts[0]
        nxt = first.first_block
        for p in parts:
            if p.first_block != nxt or p.seq_len != first.seq_len:
                raise ValueError("parts are not consecutive blocks of one packing")
            nxt += len(p)
        if len(parts) == 1:
            return first
        stats = first.stats
        for p in parts[1:]:
            stats = stats + p.stats
        placed = (np.concatenate([p.placed_samples for p in parts]), np.concatenate([p.placed_tokens for p in parts]),
                  np.concatenate([p.placed_blocks for p in parts]))
        full = [p for p in parts if len(p)] or [first]
        if len(full) == 1:  # no copy
            f = full[0]
            return PackedBlocks(
                f.seq_len, f.pad_id, first.first_block, f.tokens, f.loss_mask, f.segment_ids, f.position_ids,
                f.spans, stats, *placed,
            )  # fmt: skip
        return PackedBlocks(
            first.seq_len,
            first.pad_id,
            first.first_block,
            np.concatenate([p.tokens for p in full]),
            np.concatenate([p.loss_mask for p in full]),
            np.concatenate([p.segment_ids for p in full]),
            np.concatenate([p.position_ids for p in full]),
            pa.concat_tables([p.spans for p in full]),
            stats,
            *placed,
        )


# --- spans, internal columnar form ----------------------------------------------------------------


@dataclass
class _Spans:
    row: np.ndarray  # int64, work-area row
    start: np.ndarray  # int64
    end: np.ndarray
    src_start: np.ndarray  # int64, -1 = null (packer BOS)
    src_end: np.ndarray
    char_start: np.ndarray  # int64 (meaningless where inserted)
    char_end: np.ndarray
    inserted: np.ndarray  # bool
    rid: pa.Array  # string
    var: pa.Array  # string
    sample: np.ndarray  # int64, the input sample (index among everything given to the Packer)

    def __len__(self) -> int:
        return int(self.row.shape[0])

    def take(self, idx: np.ndarray) -> "_Spans":
        t = pa.array(idx, pa.int64())
        return _Spans(
            self.row[idx], self.start[idx], self.end[idx], self.src_start[idx], self.src_end[idx],
            self.char_start[idx], self.char_end[idx], self.inserted[idx], self.rid.take(t), self.var.take(t),
            self.sample[idx],
        )  # fmt: skip

    @staticmethod
    def empty() -> "_Spans":
        z = np.zeros(0, np.int64)
        return _Spans(z, z, z, z, z, z, z, np.zeros(0, bool), pa.array([], pa.string()), pa.array([], pa.string()), z)

    @staticmethod
    def concat(parts: Sequence["_Spans"]) -> "_Spans":
        parts = [p for p in parts if len(p)]
        if not parts:
            return _Spans.empty()
        if len(parts) == 1:
            return parts[0]

        def cat(name):
            return np.concatenate([getattr(p, name) for p in parts])

        return _Spans(
            cat("row"), cat("start"), cat("end"), cat("src_start"), cat("src_end"), cat("char_start"),
            cat("char_end"), cat("inserted"), pa.concat_arrays([p.rid for p in parts]),
            pa.concat_arrays([p.var for p in parts]), cat("sample"),
        )  # fmt: skip


def _exclusive_cumsum(a: np.ndarray) -> np.ndarray:
    out = np.zeros(a.shape[0], np.int64)
    if a.shape[0] > 1:
        np.cumsum(a[:-1], out=out[1:])
    return out


# --- placement ----------------------------------------------------------------------------------


def _place_in_order(lens: list[int], T: int, fills: list[int], one_per_block: bool):
    """in_order (Algorithm 18.2) / one_per_block. ``fills``: open rows (at most one) and their fill."""
    n = len(lens)
    row_of = np.empty(n, np.int64)
    u_of = np.empty(n, np.int64)
    fill = list(fills)
    sealed: list[int] = []
    cur = len(fill) - 1 if fill else -1
    for i, l in enumerate(lens):
        if cur < 0 or fill[cur] + l > T or (one_per_block and fill[cur] > 0):
            if cur >= 0:
                sealed.append(cur)
            cur = len(fill)
            fill.append(0)
        row_of[i] = cur
        u_of[i] = fill[cur]
        fill[cur] += l
        if fill[cur] == T:
            sealed.append(cur)
            cur = -1
    open_rows = [cur] if cur >= 0 else []
    return row_of, u_of, sealed, open_rows, fill


def _place_best_fit_py(lens: list[int], T: int, fills: list[int], max_open: int):
    n = len(lens)
    row_of = np.empty(n, np.int64)
    u_of = np.empty(n, np.int64)
    fill = list(fills)
    open_rows = list(range(len(fill)))
    sealed: list[int] = []
    for i, l in enumerate(lens):
        best = -1
        best_rem = T + 1
        for r in open_rows:
            rem = T - fill[r]
            if l <= rem < best_rem:
                best, best_rem = r, rem
        if best < 0:
            best = len(fill)
            fill.append(0)
            open_rows.append(best)
            if len(open_rows) > max_open:
                sealed.append(open_rows.pop(0))
        row_of[i] = best
        u_of[i] = fill[best]
        fill[best] += l
        if fill[best] == T:
            open_rows.remove(best)
            sealed.append(best)
    return row_of, u_of, sealed, open_rows, fill


try:  # pragma: no cover - exercised when numba is installed
    import numba as _numba
except Exception:  # ImportError, or a numba incompatible with this numpy
    _numba = None

_NB_STATE: dict[str, object] = {}

if _numba is not None:  # pragma: no branch

    @_numba.njit(cache=True, nogil=True)
    def _nb_best_fit(lens, T, fills0, max_open):  # pragma: no cover - compiled
        n = lens.shape[0]
        k0 = fills0.shape[0]
        cap = k0 + n
        fill = np.zeros(cap, np.int64)
        fill[:k0] = fills0
        open_rows = np.empty(max_open + 1, np.int64)  # creation order
        n_open = 0
        for r in range(k0):
            open_rows[n_open] = r
            n_open += 1
        sealed = np.empty(cap, np.int64)
        n_sealed = 0
        n_rows = k0
        row_of = np.empty(n, np.int64)
        u_of = np.empty(n, np.int64)
        for i in range(n):
            l = lens[i]
            best_j = -1
            best_rem = T + 1
            for j in range(n_open):
                rem = T - fill[open_rows[j]]
                if l <= rem and rem < best_rem:
                    best_j = j
                    best_rem = rem
            if best_j < 0:
                r = n_rows
                n_rows += 1
                open_rows[n_open] = r
                best_j = n_open
                n_open += 1
                if n_open > max_open:
                    sealed[n_sealed] = open_rows[0]
                    n_sealed += 1
                    for j in range(1, n_open):
                        open_rows[j - 1] = open_rows[j]
                    n_open -= 1
                    best_j -= 1
            r = open_rows[best_j]
            row_of[i] = r
            u_of[i] = fill[r]
            fill[r] += l
            if fill[r] == T:
                sealed[n_sealed] = r
                n_sealed += 1
                for j in range(best_j + 1, n_open):
                    open_rows[j - 1] = open_rows[j]
                n_open -= 1
        return row_of, u_of, sealed[:n_sealed].copy(), open_rows[:n_open].copy(), fill[:n_rows].copy()


def use_numba(enabled: bool) -> None:
    """Switch the numba best-fit kernel on/off (off: the Python loop). Results are identical."""
    _NB_STATE["enabled"] = bool(enabled)


def _numba_on() -> bool:
    return _numba is not None and bool(_NB_STATE.get("enabled", True))


def _place_best_fit(lens: np.ndarray, T: int, fills: list[int], max_open: int):
    if _numba_on() and lens.shape[0] >= 64:
        row_of, u_of, sealed, open_rows, fill = _nb_best_fit(
            lens.astype(np.int64), np.int64(T), np.asarray(fills, np.int64), np.int64(max_open)
        )
        return row_of, u_of, sealed.tolist(), open_rows.tolist(), fill.tolist()
    return _place_best_fit_py(lens.tolist(), T, fills, max_open)


# --- the packer ---------------------------------------------------------------------------------


def _as_str_array(values, n: int, name: str) -> pa.Array:
    if values is None:
        return pa.nulls(n, pa.string())
    arr = values if isinstance(values, pa.Array) else pa.array(list(values), pa.string())
    if isinstance(arr, pa.ChunkedArray):  # pragma: no cover - defensive
        arr = arr.combine_chunks()
    if arr.type != pa.string():
        arr = arr.cast(pa.string())
    if len(arr) != n:
        raise ValueError(f"{name}: {len(arr)} values for {n} samples (lengths)")
    return arr


class Packer:
    """Incremental packer: ``add``/``add_arrays`` return the blocks sealed so far, ``finish`` the rest
    (tail rule applied). Between calls it holds only its open blocks (see docs/packing.md#packing)."""

    def __init__(self, policy: PackingPolicy, *, bos_id: Optional[int] = None, chunk_tokens: int = 1 << 20):
        if policy.boundary == "bos":
            if bos_id is None:
                raise ValueError("bos_id: boundary='bos' needs the BOS token id (bos_id=...)")
            if int(bos_id) < 0:
                raise ValueError(f"bos_id must be >= 0, got {bos_id}")
        if chunk_tokens < 1:
            raise ValueError(f"chunk_tokens must be >= 1, got {chunk_tokens}")
        self.policy = policy
        self.T = int(policy.seq_len)
        self.bos_id = None if bos_id is None else int(bos_id)
        self._bos = 1 if policy.boundary == "bos" else 0
        self.chunk_tokens = int(chunk_tokens)
        self.transform_version = policy.transform_version or packing_policy_version(policy)
        self._emitted = 0
        self._samples = 0  # samples given so far: the next one's index
        self._finished = False
        T = self.T
        self._c_tok = np.empty((0, T), np.int32)
        self._c_msk = np.empty((0, T), np.uint8)
        self._c_mark = np.empty((0, T), bool)
        self._c_fill: list[int] = []
        self._c_spans = _Spans.empty()

    @classmethod
    def resume(cls, policy: PackingPolicy, state: "PackerState", *, bos_id: Optional[int] = None,
               chunk_tokens: int = 1 << 20) -> "Packer":
        """A packer standing where ``state`` says (``packer_states``): the next sample given is
        sample ``state.sample`` and the next block sealed is block ``state.emitted``. Its open
        blocks have the right fill but no content, so the blocks opened before ``state.sample``
        come out wrong (callers drop them: ``block_window``); every later block is exactly the
        block one packer over all samples seals, because placement depends on fills only."""
        p = cls(policy, bos_id=bos_id, chunk_tokens=chunk_tokens)
        k, T = len(state.fills), p.T
        p._samples, p._emitted = int(state.sample), int(state.emitted)
        p._c_tok = np.full((k, T), policy.pad_id, np.int32)
        p._c_msk = np.zeros((k, T), np.uint8)
        p._c_mark = np.zeros((k, T), bool)
        p._c_fill = [int(f) for f in state.fills]
        return p

    # -- public ----------------------------------------------------------------------------------

    @property
    def open_blocks(self) -> int:
        return len(self._c_fill)

    @property
    def emitted(self) -> int:
        """Blocks sealed so far (the next one sealed gets this number)."""
        return self._emitted

    def add(self, samples: Sequence[Any]) -> PackedBlocks:
        """Pack ``samples`` (objects with ``record_id``, ``variant``, ``input_ids``, ``loss_mask``,
        ``offsets``) after everything added before."""
        samples = list(samples)
        if not samples:
            return self._empty_result(PackingStats(self.T))
        lengths = np.fromiter((s.input_ids.shape[0] for s in samples), np.int64, len(samples))
        ids = np.concatenate([s.input_ids for s in samples])
        msk = np.concatenate([s.loss_mask for s in samples])
        offs = np.concatenate([s.offsets for s in samples])
        return self.add_arrays(
            ids, msk, offs, lengths, [s.record_id for s in samples], [s.variant for s in samples]
        )

    def add_arrays(
        self,
        flat_ids: np.ndarray,
        flat_mask: np.ndarray,
        flat_offsets: np.ndarray,
        lengths: np.ndarray,
        record_ids: Union[Sequence[str], pa.Array],
        variants: Union[Sequence[Optional[str]], pa.Array, None] = None,
    ) -> PackedBlocks:
        """Columnar ``add``: sample ``i`` is ``flat_*[s_i : s_i + lengths[i]]`` with ``s_i`` the sum
        of the previous lengths; ``variants=None`` means no variant for any sample."""
        if self._finished:
            raise RuntimeError("this Packer is finished")
        lengths = np.asarray(lengths, dtype=np.int64).reshape(-1)
        n = lengths.shape[0]
        if n and int(lengths.min()) < 0:
            raise ValueError("lengths must be >= 0")
        ids = np.ascontiguousarray(flat_ids, dtype=np.int32).reshape(-1)
        msk = np.ascontiguousarray(flat_mask, dtype=np.uint8).reshape(-1)
        offs = np.ascontiguousarray(flat_offsets, dtype=np.int32)
        N = int(lengths.sum())
        if ids.shape[0] != N:
            raise ValueError(f"flat_ids: {ids.shape[0]} tokens but lengths sum to {N}")
        if msk.shape[0] != N:
            raise ValueError(f"flat_mask: {msk.shape[0]} values but lengths sum to {N}")
        if offs.shape != (N, 2):
            raise ValueError(f"flat_offsets: shape {offs.shape}, expected ({N}, 2)")
        rids = _as_str_array(record_ids, n, "record_ids")
        if rids.null_count:
            raise ValueError("record_ids: a sample has no record_id")
        vars_ = _as_str_array(variants, n, "variants")
        # whole samples, about chunk_tokens tokens per piece (a longer sample is a piece of its own)
        parts: list[PackedBlocks] = []
        ends = np.cumsum(lengths)
        i = 0
        base = 0
        while i < n or not parts:
            j = int(np.searchsorted(ends, base + self.chunk_tokens, side="right"))
            j = min(max(j, i + 1), n)
            stop = int(ends[j - 1]) if j else 0
            parts.append(
                self._add_chunk(
                    ids[base:stop], msk[base:stop], offs[base:stop], lengths[i:j], rids.slice(i, j - i),
                    vars_.slice(i, j - i),
                )  # fmt: skip
            )
            i, base = j, stop
            if n == 0:
                break
        return PackedBlocks.concat(parts)

    def finish(self) -> PackedBlocks:
        """Seal every open block (oldest first) and apply the tail rule to the last one."""
        if self._finished:
            raise RuntimeError("this Packer is finished")
        self._finished = True
        st = PackingStats(self.T)
        k = len(self._c_fill)
        sealed = list(range(k))
        fill = np.asarray(self._c_fill, np.int64)
        sp = self._c_spans
        if k and self.policy.tail == "drop" and fill[-1] < self.T:
            last = k - 1
            sealed.pop()
            sel = np.flatnonzero((sp.row == last) & (sp.src_start >= 0))
            sel = sel[np.argsort(sp.start[sel], kind="stable")]
            for r, v, a, b in zip(
                sp.rid.take(pa.array(sel)).to_pylist(), sp.var.take(pa.array(sel)).to_pylist(),
                sp.src_start[sel].tolist(), sp.src_end[sel].tolist(),
            ):  # fmt: skip
                prev = st.dropped[-1] if st.dropped else None
                if prev is not None and prev[0] == r and prev[1] == v and prev[3] == a:  # one piece per sample
                    st.dropped[-1] = (r, v, prev[2], int(b))
                else:
                    st.dropped.append((r, v, int(a), int(b)))
            st.dropped_tokens += int((sp.src_end[sel] - sp.src_start[sel]).sum())
        out = self._emit(self._c_tok, self._c_msk, self._c_mark, fill, sp, np.asarray(sealed, np.int64), st)
        self._c_tok = self._c_tok[:0]
        self._c_msk = self._c_msk[:0]
        self._c_mark = self._c_mark[:0]
        self._c_fill = []
        self._c_spans = _Spans.empty()
        return out

    # -- internals -------------------------------------------------------------------------------

    def _empty_result(self, st: PackingStats) -> PackedBlocks:
        T = self.T
        return PackedBlocks(
            T, self.policy.pad_id, self._emitted, np.empty((0, T), np.int32), np.empty((0, T), np.uint8),
            np.empty((0, T), np.int32), np.empty((0, T), np.int32), PACKING_SPANS_SCHEMA.empty_table(), st,
        )  # fmt: skip

    def _effective(self, lengths: np.ndarray, rids: pa.Array, vars_: pa.Array, st: PackingStats):
        """Samples entering the packer after the over-length policy: (sample index, flat start,
        length, src offset in the view)."""
        n = lengths.shape[0]
        e_sample = np.arange(n, dtype=np.int64)
        e_start = _exclusive_cumsum(lengths)
        e_len = lengths
        e_src = np.zeros(n, np.int64)
        empty = e_len == 0
        if empty.any():
            st.empty_samples += int(empty.sum())
            keep = ~empty
            e_sample, e_start, e_len, e_src = e_sample[keep], e_start[keep], e_len[keep], e_src[keep]
        if self.policy.mode != "atomic":
            return e_sample, e_start, e_len, e_src
        cap = self.T - self._bos
        over = e_len > cap
        if not over.any():
            return e_sample, e_start, e_len, e_src
        ov = np.flatnonzero(over)
        ov_samples = pa.array(e_sample[ov])
        ov_rids = rids.take(ov_samples).to_pylist()
        ov_vars = vars_.take(ov_samples).to_pylist()
        ov_lens = e_len[ov].tolist()
        how = self.policy.overlength
        if how == "quarantine":
            for r, v, L in zip(ov_rids, ov_vars, ov_lens):
                st.quarantined.append((r, v, REASON_TOO_LONG, int(L)))
            st.quarantined_tokens += int(sum(ov_lens))
            keep = ~over
            return e_sample[keep], e_start[keep], e_len[keep], e_src[keep]
        if how == "truncate":
            for r, v, L in zip(ov_rids, ov_vars, ov_lens):
                st.truncated.append((r, v, cap, int(L) - cap))
            st.truncated_tokens += int(sum(ov_lens)) - cap * len(ov_lens)
            e_len = np.minimum(e_len, cap)
            return e_sample, e_start, e_len, e_src
        # split: consecutive pieces of at most cap tokens, each an atomic sample
        st.split_samples += len(ov_lens)
        pieces = np.where(over, -(-e_len // cap), 1)
        total = int(pieces.sum())
        first = _exclusive_cumsum(pieces)
        j = np.arange(total, dtype=np.int64) - np.repeat(first, pieces)  # piece number within its sample
        src = j * cap
        s_len = np.repeat(e_len, pieces)
        return (
            np.repeat(e_sample, pieces),
            np.repeat(e_start, pieces) + src,
            np.minimum(s_len - src, cap),
            np.repeat(e_src, pieces) + src,
        )

    def _placement(self, e_len: np.ndarray, fills: list[int]):
        """What ``_add_chunk`` decides from lengths alone, after ``fills`` (the open blocks):
        (sealed rows in sealing order, open rows oldest first, fill per row, first position of
        each piece in the work area — its BOS under ``boundary="bos"``)."""
        T, bos = self.T, self._bos
        ne = e_len.shape[0]
        es = _exclusive_cumsum(e_len)
        if self.policy.mode == "stream":
            u0 = fills[0] if fills else 0
            total = u0 + int(e_len.sum()) + bos * ne
            W = -(-total // T)
            fill = np.full(W, T, np.int64)
            if W:
                fill[-1] = total - (W - 1) * T
            n_sealed = W if (W and fill[-1] == T) else max(W - 1, 0)
            return (np.arange(n_sealed, dtype=np.int64), np.arange(n_sealed, W, dtype=np.int64), fill,
                    u0 + es + bos * np.arange(ne, dtype=np.int64))
        lens = e_len + bos
        if self.policy.fit == "best_fit":
            row_of, u_of, sealed, open_rows, fill = _place_best_fit(lens, T, list(fills), self.policy.open_blocks)
        else:
            row_of, u_of, sealed, open_rows, fill = _place_in_order(lens.tolist(), T, list(fills),
                                                                    self.policy.fit == "one_per_block")
        return (np.asarray(sealed, np.int64), np.asarray(open_rows, np.int64), np.asarray(fill, np.int64),
                np.asarray(row_of, np.int64) * T + np.asarray(u_of, np.int64))

    def _add_chunk(self, ids, msk, offs, lengths, rids: pa.Array, vars_: pa.Array) -> PackedBlocks:
        T, bos, pol = self.T, self._bos, self.policy
        st = PackingStats(T)
        st.input_samples += int(lengths.shape[0])
        base = self._samples
        self._samples += int(lengths.shape[0])
        N = int(ids.shape[0])
        st.input_tokens += N
        e_sample, e_start, e_len, e_src = self._effective(lengths, rids, vars_, st)
        ne = e_len.shape[0]
        K = int(e_len.sum())
        es = _exclusive_cumsum(e_len)  # sample starts in selected-token space
        full_selection = K == N  # every token kept, in order (split pieces are consecutive)
        k0 = len(self._c_fill)

        # placement -> dest_first (work-area flat position of each sample's first real token)
        if pol.mode == "stream":
            u0 = self._c_fill[0] if k0 else 0
            total = u0 + K + bos * ne
            W = -(-total // T)
            dest_first = u0 + es + bos * (np.arange(ne, dtype=np.int64) + 1)
            fill = np.full(W, T, np.int64)
            if W:
                fill[-1] = total - (W - 1) * T
            n_sealed = W if (W and fill[-1] == T) else max(W - 1, 0)
            sealed = np.arange(n_sealed, dtype=np.int64)
            open_rows = np.arange(n_sealed, W, dtype=np.int64)
        else:
            lens = e_len + bos
            if pol.fit == "best_fit":
                row_of, u_of, sealed_l, open_l, fill_l = _place_best_fit(lens, T, self._c_fill, pol.open_blocks)
            else:
                row_of, u_of, sealed_l, open_l, fill_l = _place_in_order(
                    lens.tolist(), T, self._c_fill, pol.fit == "one_per_block"
                )
            W = len(fill_l)
            fill = np.asarray(fill_l, np.int64)
            dest_first = row_of * T + u_of + bos
            sealed = np.asarray(sealed_l, np.int64)
            open_rows = np.asarray(open_l, np.int64)

        # work area: carried open rows first, then the new rows
        tok = np.full((W, T), pol.pad_id, np.int32)
        lm = np.zeros((W, T), np.uint8)
        mark = np.zeros((W, T), bool)
        if k0:
            tok[:k0] = self._c_tok
            lm[:k0] = self._c_msk
            mark[:k0] = self._c_mark
        tf, mf, kf = tok.reshape(-1), lm.reshape(-1), mark.reshape(-1)
        if full_selection:
            src_ids, src_msk = ids, msk
        else:
            sel = np.repeat(e_start - es, e_len) + np.arange(K, dtype=np.int64)
            src_ids, src_msk = ids[sel], msk[sel]
        if ne:
            if pol.mode == "stream" and not bos:
                tf[u0 : u0 + K] = src_ids
                mf[u0 : u0 + K] = src_msk
            else:
                dest = np.repeat(dest_first - es, e_len)
                dest += np.arange(K, dtype=np.int64)
                tf[dest] = src_ids
                mf[dest] = src_msk
                del dest
            if bos:
                tf[dest_first - 1] = self.bos_id
            kf[dest_first - bos] = True
            if pol.boundary == "mask":
                mf[dest_first] = 0
        if W:
            mark[:, 0] = True
            lm[:, 0] = 0

        spans = _Spans.concat([self._c_spans, self._new_spans(
            offs, rids, vars_, e_sample, e_start, e_len, e_src, es, dest_first, K, W, u0 if pol.mode == "stream" else 0,
            base,
        )])  # fmt: skip

        out = self._emit(tok, lm, mark, fill, spans, sealed, st)
        # carry the open rows
        self._c_tok = tok[open_rows]
        self._c_msk = lm[open_rows]
        self._c_mark = mark[open_rows]
        self._c_fill = fill[open_rows].tolist()
        cm = np.full(W, -1, np.int64)
        cm[open_rows] = np.arange(open_rows.shape[0])
        keep = np.flatnonzero(cm[spans.row] >= 0) if len(spans) else np.zeros(0, np.int64)
        carried = spans.take(keep)
        carried.row = cm[carried.row]
        self._c_spans = carried
        return out

    def _new_spans(self, offs, rids, vars_, e_sample, e_start, e_len, e_src, es, dest_first, K, W, u0, base) -> _Spans:
        T, bos = self.T, self._bos
        ne = e_len.shape[0]
        if ne == 0:
            return _Spans.empty()
        # break points in selected-token space: sample starts, inserted-run edges, block starts
        fi = np.flatnonzero(offs[:, 0] < 0)
        ins_breaks = []
        if fi.shape[0] and K != offs.shape[0]:  # some tokens were cut: keep the selected ones
            e = np.searchsorted(e_start, fi, side="right") - 1
            ok = (e >= 0) & (fi < e_start[e] + e_len[e])
            fi = es[e[ok]] + fi[ok] - e_start[e[ok]]
        if fi.shape[0]:
            ks = fi
            gap = np.diff(ks) != 1
            run_s = ks[np.concatenate(([True], gap))]
            run_e = ks[np.concatenate((gap, [True]))] + 1
            ins_breaks = [run_s, run_e[run_e < K]]
        brk = [es, *ins_breaks]
        if self.policy.mode == "stream" and W > 1:
            B = T * np.arange(1, W, dtype=np.int64)
            B = B[B > u0]
            e = np.searchsorted(dest_first, B, side="right") - 1
            ok = e >= 0
            e = np.where(ok, e, 0)
            ok &= (B > dest_first[e]) & (B < dest_first[e] + e_len[e])
            brk.append(es[e[ok]] + B[ok] - dest_first[e[ok]])
        S = np.unique(np.concatenate(brk)) if len(brk) > 1 else es
        E = np.empty_like(S)
        E[:-1] = S[1:]
        E[-1] = K
        e = np.searchsorted(es, S, side="right") - 1
        off_in = S - es[e]
        d = dest_first[e] + off_in
        row = d // T
        start = d - row * T
        length = E - S
        src_s = e_src[e] + off_in
        flat_s = e_start[e] + off_in
        ins = offs[flat_s, 0] < 0
        smp = pa.array(e_sample[e])
        parts = [
            _Spans(
                row, start, start + length, src_s, src_s + length, offs[flat_s, 0].astype(np.int64),
                offs[flat_s + length - 1, 1].astype(np.int64), ins, rids.take(smp), vars_.take(smp),
                base + e_sample[e],
            )  # fmt: skip
        ]
        if bos:
            db = dest_first - 1
            rb = db // T
            m1 = np.full(ne, -1, np.int64)
            sb = pa.array(e_sample)
            parts.append(
                _Spans(rb, db - rb * T, db - rb * T + 1, m1, m1, m1, m1, np.ones(ne, bool), rids.take(sb), vars_.take(sb),
                       base + e_sample)
            )
        return _Spans.concat(parts)

    def _emit(self, tok, lm, mark, fill, spans: _Spans, sealed: np.ndarray, st: PackingStats) -> PackedBlocks:
        T, pol = self.T, self.policy
        nb = int(sealed.shape[0])
        W = tok.shape[0]
        if nb == 0:
            return self._empty_result(st)
        if np.array_equal(sealed, np.arange(nb)):
            o_tok, o_lm, o_mark, o_fill = tok[:nb], lm[:nb], mark[:nb], fill[:nb]
        else:
            o_tok, o_lm, o_mark, o_fill = tok[sealed], lm[sealed], mark[sealed], fill[sealed]
        first = self._emitted
        self._emitted += nb

        # runs: segments (marked starts; every row start is one) and the padding run of a partial row
        partial = np.flatnonzero(o_fill < T)
        seg_starts = np.flatnonzero(o_mark)
        pad_starts = partial * T + o_fill[partial]
        run_start = np.concatenate([seg_starts, pad_starts])
        is_pad_run = np.concatenate([np.zeros(seg_starts.shape[0], bool), np.ones(pad_starts.shape[0], bool)])
        ro = np.argsort(run_start, kind="stable")
        run_start, is_pad_run = run_start[ro], is_pad_run[ro]
        run_len = np.diff(np.append(run_start, nb * T))
        run_row = run_start // T
        run_seg = np.arange(run_start.shape[0], dtype=np.int64) - np.searchsorted(run_start, run_row * T) + 1
        run_seg[is_pad_run] = 0
        seg = np.repeat(run_seg.astype(np.int32), run_len).reshape(nb, T)
        if pol.reset_positions:
            pos = np.arange(nb * T, dtype=np.int64) - np.repeat(run_start, run_len)
            pos = pos.astype(np.int32).reshape(nb, T)
        else:
            pos = np.broadcast_to(np.arange(T, dtype=np.int32), (nb, T)).copy()

        # spans of the emitted rows (global block numbers) + one pad span per padded row
        gm = np.full(W, -1, np.int64)
        gm[sealed] = np.arange(first, first + nb)
        idx = np.flatnonzero(gm[spans.row] >= 0) if len(spans) else np.zeros(0, np.int64)
        sp = spans.take(idx)
        blk = gm[sp.row]
        n_pad = partial.shape[0]
        p_blk = first + partial.astype(np.int64)
        block = np.concatenate([blk, p_blk])
        start = np.concatenate([sp.start, o_fill[partial]])
        order = np.lexsort((start, block))
        n_sp = len(sp)
        is_pad = np.concatenate([np.zeros(n_sp, bool), np.ones(n_pad, bool)])
        inserted = np.concatenate([sp.inserted, np.zeros(n_pad, bool)])
        src_null = np.concatenate([sp.src_start < 0, np.ones(n_pad, bool)])
        char_null = inserted | is_pad

        def col(a, b, null=None):
            v = np.concatenate([a, b])[order].astype(np.int32)
            return pa.array(v, pa.int32(), mask=None if null is None else null[order])

        pad_fill = np.full(n_pad, -1, np.int64)
        take = pa.array(order)
        table = pa.Table.from_arrays(
            [
                pa.array(block[order], pa.int64()),
                col(sp.start, o_fill[partial]),
                col(sp.end, np.full(n_pad, T, np.int64)),
                pa.concat_arrays([sp.rid, pa.nulls(n_pad, pa.string())]).take(take),
                pa.concat_arrays([sp.var, pa.nulls(n_pad, pa.string())]).take(take),
                col(sp.src_start, pad_fill, src_null),
                col(sp.src_end, pad_fill, src_null),
                col(sp.char_start, pad_fill, char_null),
                col(sp.char_end, pad_fill, char_null),
                pa.array(inserted[order], pa.bool_()),
                pa.array(is_pad[order], pa.bool_()),
                pa.repeat(pa.scalar(self.transform_version, pa.string()), n_sp + n_pad),
            ],
            schema=PACKING_SPANS_SCHEMA,
        )

        lengths = sp.end - sp.start
        from_view = sp.src_start >= 0
        st.blocks += nb
        st.content_tokens += int(lengths[from_view].sum())
        st.bos_tokens += int(lengths[~from_view].sum())
        st.inserted_tokens += int(lengths[sp.inserted].sum())
        st.padding += int((T - o_fill).sum())
        st.label_tokens += int(np.count_nonzero(o_lm))
        return PackedBlocks(T, pol.pad_id, first, o_tok, o_lm, seg, pos, table, st,
                            sp.sample[from_view], lengths[from_view].astype(np.int64), blk[from_view])


# --- planning: which sample lands in which block, before any block is built ------------------------


@dataclass(frozen=True)
class PackerState:
    """Where a packer over a sample sequence stands just before sample ``sample``: blocks sealed
    so far and the fill of each open block, oldest first. All that later placement depends on."""

    sample: int
    emitted: int
    fills: tuple[int, ...] = ()


@dataclass
class BlockPlan:
    """The blocks one packer over ``lengths`` would seal, from the lengths alone."""

    first_sample: np.ndarray  # per block in sealing order: the first sample with a position in it;
    # with tail="drop" and a partial last block, that dropped block is the last entry
    blocks: int  # blocks emitted (a dropped tail block not counted)
    stats: PackingStats  # the input side: samples, tokens, empty samples, over-length handling


def _null_strings(n: int) -> pa.Array:
    return pa.nulls(n, pa.string())


def plan_blocks(lengths: np.ndarray, policy: PackingPolicy, *, bos_id: Optional[int] = None,
                record_ids: Union[Sequence[str], pa.Array, None] = None,
                variants: Union[Sequence[Optional[str]], pa.Array, None] = None) -> BlockPlan:
    """Placement of every sample (Algorithm 18.2 / best fit / stream cuts) without building a
    block: one pass over the lengths. ``record_ids`` / ``variants`` name the over-length samples
    in ``stats`` (as the packer's stats do)."""
    packer = Packer(policy, bos_id=bos_id)
    lengths = np.asarray(lengths, np.int64).reshape(-1)
    n, T = lengths.shape[0], packer.T
    st = PackingStats(T)
    st.input_samples, st.input_tokens = n, int(lengths.sum())
    rids = _null_strings(n) if record_ids is None else _as_str_array(record_ids, n, "record_ids")
    vars_ = _as_str_array(variants, n, "variants")
    e_sample, _start, e_len, _src = packer._effective(lengths, rids, vars_, st)
    sealed, open_rows, fill, first_pos = packer._placement(e_len, [])
    W = fill.shape[0]
    first_of_row = np.full(W, np.iinfo(np.int64).max, np.int64)
    if e_len.shape[0]:
        if policy.mode == "stream":
            # the piece holding each row's position 0 (rows start at multiples of T)
            at = np.searchsorted(first_pos, np.arange(W, dtype=np.int64) * T, side="right") - 1
            first_of_row = e_sample[at]
        else:
            np.minimum.at(first_of_row, first_pos // T, e_sample)
    order = np.concatenate([sealed, open_rows])
    dropped = policy.tail == "drop" and open_rows.shape[0] > 0 and fill[open_rows[-1]] < T
    return BlockPlan(first_of_row[order], int(order.shape[0]) - int(dropped), st)


def packer_states(lengths: np.ndarray, policy: PackingPolicy, at: Sequence[int], *,
                  bos_id: Optional[int] = None) -> list[PackerState]:
    """The packer's state just before each sample index of ``at`` (ascending), from the lengths."""
    packer = Packer(policy, bos_id=bos_id)
    lengths = np.asarray(lengths, np.int64).reshape(-1)
    fills: list[int] = []
    emitted = prev = 0
    out = []
    for s in at:
        s = int(s)
        if s < prev or s > lengths.shape[0]:
            raise ValueError(f"at: sample indices must be ascending and <= {lengths.shape[0]}, got {s} after {prev}")
        seg = lengths[prev:s]
        if seg.shape[0]:
            _, _, e_len, _ = packer._effective(seg, _null_strings(seg.shape[0]), _null_strings(seg.shape[0]),
                                               PackingStats(packer.T))
            sealed, open_rows, fill, _ = packer._placement(e_len, fills)
            emitted += int(sealed.shape[0])
            fills = [int(fill[r]) for r in open_rows]
        out.append(PackerState(s, emitted, tuple(fills)))
        prev = s
    return out


def block_window(part: PackedBlocks, lo: int, hi: int, *, keep_dropped: bool = False) -> PackedBlocks:
    """The blocks of ``part`` numbered in ``[lo, hi)``, with their spans and placed tokens, and
    stats counted over those blocks only (plus the dropped tail when ``keep_dropped``: it belongs
    to the window holding the last block)."""
    n, f, T = len(part), part.first_block, part.seq_len
    a = min(max(lo - f, 0), n)
    b = max(min(hi - f, n), a)
    blk = part.spans.column("block")
    spans = part.spans.filter(pc.and_(pc.greater_equal(blk, f + a), pc.less(blk, f + b)))
    keep = (part.placed_blocks >= f + a) & (part.placed_blocks < f + b)
    st = PackingStats(T)
    if keep_dropped:
        st.dropped, st.dropped_tokens = list(part.stats.dropped), part.stats.dropped_tokens
    st.blocks = b - a
    if spans.num_rows:
        length = (spans.column("end").to_numpy().astype(np.int64) - spans.column("start").to_numpy().astype(np.int64))
        pad = spans.column("pad").to_numpy(zero_copy_only=False).astype(bool)
        src_null = spans.column("src_token_start").is_null().to_numpy(zero_copy_only=False).astype(bool)
        ins = spans.column("inserted").to_numpy(zero_copy_only=False).astype(bool)
        st.content_tokens = int(length[~pad & ~src_null].sum())
        st.bos_tokens = int(length[~pad & src_null].sum())
        st.inserted_tokens = int(length[~pad & ins].sum())
        st.padding = int(length[pad].sum())
    st.label_tokens = int(np.count_nonzero(part.loss_mask[a:b]))
    return PackedBlocks(T, part.pad_id, f + a, part.tokens[a:b], part.loss_mask[a:b], part.segment_ids[a:b],
                        part.position_ids[a:b], spans, st, part.placed_samples[keep], part.placed_tokens[keep],
                        part.placed_blocks[keep])


# --- entry points -------------------------------------------------------------------------------


def pack_arrays(
    flat_ids: np.ndarray,
    flat_mask: np.ndarray,
    flat_offsets: np.ndarray,
    lengths: np.ndarray,
    record_ids: Union[Sequence[str], pa.Array],
    variants: Union[Sequence[Optional[str]], pa.Array, None],
    policy: PackingPolicy,
    bos_id: Optional[int] = None,
    *,
    chunk_tokens: int = 1 << 20,
) -> PackedBlocks:
    """Pack concatenated views (see ``Packer.add_arrays``) in one call, tail rule applied."""
    packer = Packer(policy, bos_id=bos_id, chunk_tokens=chunk_tokens)
    first = packer.add_arrays(flat_ids, flat_mask, flat_offsets, lengths, record_ids, variants)
    return PackedBlocks.concat([first, packer.finish()])


def iter_packed(
    samples: Iterable[Any],
    policy: PackingPolicy,
    *,
    bos_id: Optional[int] = None,
    chunk_tokens: int = 1 << 20,
) -> Iterator[PackedBlocks]:
    """Bounded-memory packing: one :class:`PackedBlocks` per ~``chunk_tokens`` input tokens (and a
    last one from ``finish``); parts are consecutive and their stats add up to the total."""
    packer = Packer(policy, bos_id=bos_id, chunk_tokens=chunk_tokens)
    buf: list = []
    n = 0
    for s in samples:
        size = int(s.input_ids.shape[0])
        if buf and n + size > chunk_tokens:
            yield packer.add(buf)
            buf, n = [], 0
        buf.append(s)
        n += size
    if buf:
        yield packer.add(buf)
    yield packer.finish()


def pack(
    samples: Iterable[Any],
    policy: PackingPolicy,
    *,
    bos_id: Optional[int] = None,
    chunk_tokens: int = 1 << 20,
) -> PackedBlocks:
    """All blocks of ``samples`` (``Sample`` / ``TokenView`` objects, in plan order) in one result."""
    return PackedBlocks.concat(list(iter_packed(samples, policy, bos_id=bos_id, chunk_tokens=chunk_tokens)))


# --- checks -------------------------------------------------------------------------------------


def _tiling_order(fs: np.ndarray, fe: np.ndarray, size: int) -> Optional[np.ndarray]:
    """The spans' order by start when they tile ``[0, size)`` exactly once (each non-empty, each
    ending where the next starts), else None."""
    if fs.shape[0] == 0:
        return None
    order = np.argsort(fs, kind="stable")
    a, b = fs[order], fe[order]
    if a[0] == 0 and b[-1] == size and bool((b > a).all()) and np.array_equal(a[1:], b[:-1]):
        return order
    return None


def _tiled_sums(values: np.ndarray, fs: np.ndarray, order: np.ndarray) -> np.ndarray:
    """Per-span sums of flat ``values`` for spans that tile them (``order`` from ``_tiling_order``):
    one ``reduceat`` in span order, returned in the spans' own order."""
    out = np.empty(fs.shape[0], np.int64)
    out[order] = np.add.reduceat(values, fs[order], dtype=np.int64)
    return out


def span_sums(values: np.ndarray, fs: np.ndarray, fe: np.ndarray) -> np.ndarray:
    """Sum of ``values`` (flat) over each span ``[fs, fe)``. When the spans tile
    ``[0, values.size)`` exactly (the packer's spans do), one ``reduceat`` over the values in span
    order; otherwise a running count. Either way no per-position int64 array when the spans tile:
    a running count over every position was the largest memory traffic of a packing task."""
    values = values.reshape(-1)
    if fs.shape[0] == 0:
        return np.zeros(0, np.int64)
    order = _tiling_order(fs, fe, values.size)
    if order is not None:
        return _tiled_sums(values, fs, order)
    run = np.zeros(values.size + 1, np.int64)
    np.cumsum(values, out=run[1:])
    return run[fe] - run[fs]


def _tiles_exactly(fs: np.ndarray, fe: np.ndarray, pad: np.ndarray, is_pad: np.ndarray, size: int) -> bool:
    """Do the spans (flat ``[fs, fe)``, each inside one block) cover ``[0, size)`` exactly once,
    pad spans only padding and other spans no padding? O(spans) plus one pass over the padding
    mask, instead of counting coverage per position."""
    if fs.shape[0] == 0:
        return size == 0
    order = _tiling_order(fs, fe, size)
    if order is None:
        return False
    in_pad = _tiled_sums(is_pad.reshape(-1), fs, order)
    return bool(np.array_equal(in_pad[pad], (fe - fs)[pad]) and not in_pad[~pad].any())


def coverage_check(blocks: PackedBlocks, max_examples: int = 5) -> tuple[bool, dict[str, Any]]:
    """Span coverage of ``blocks``: every position covered by exactly one span — non-pad positions
    (``segment_ids != 0``) by one non-pad span, padding by one pad span — spans inside their block,
    src ranges as long as their spans, pad spans without source, a span within one segment, and
    padding never in the loss and holding ``pad_id``. Returns ``(ok, detail)``."""
    n, T = blocks.tokens.shape
    sp = blocks.spans
    problems: list[str] = []

    def arr(name, fill=-1):
        return np.asarray(sp.column(name).fill_null(fill).to_numpy(zero_copy_only=False))

    rb = arr("block").astype(np.int64) - blocks.first_block
    s = arr("start").astype(np.int64)
    e = arr("end").astype(np.int64)
    pad = arr("pad", False).astype(bool)
    src_s = arr("src_token_start").astype(np.int64)
    src_e = arr("src_token_end").astype(np.int64)
    src_null = np.asarray(sp.column("src_token_start").is_null().to_numpy(zero_copy_only=False), bool)
    rid_null = np.asarray(sp.column("record_id").is_null().to_numpy(zero_copy_only=False), bool)
    bad_range = (rb < 0) | (rb >= n) | (s < 0) | (e > T) | (s >= e)
    if bad_range.any():
        problems.append(f"{int(bad_range.sum())} spans outside their block or empty")
    bad_src = ~src_null & (src_e - src_s != e - s)
    if bad_src.any():
        problems.append(f"{int(bad_src.sum())} spans whose source range length differs from the span length")
    bad_pad = pad & (~rid_null | ~src_null)
    if bad_pad.any():
        problems.append(f"{int(bad_pad.sum())} pad spans with a source")
    if (~pad & rid_null).any():
        problems.append(f"{int((~pad & rid_null).sum())} non-pad spans without record_id")
    good = ~bad_range
    fs, fe = rb[good] * T + s[good], rb[good] * T + e[good]
    size = n * T + 1

    def coverage(m):
        c = np.bincount(fs[m], minlength=size) - np.bincount(fe[m], minlength=size)
        return np.cumsum(c)[:-1].reshape(n, T)

    is_pad = blocks.segment_ids == 0
    if not bad_range.any() and _tiles_exactly(fs, fe, pad, is_pad, n * T):
        cov = None  # every position covered once, by a span of its own kind: no coverage problem
        uncovered = multiple = pad_by_content = pad_uncovered = content_by_pad = 0
    else:  # count each kind of problem per position (the failure path: exact figures, examples)
        cov, cov_pad = coverage(~pad[good]), coverage(pad[good])
        uncovered = int(((cov == 0) & ~is_pad).sum())
        multiple = int(((cov > 1) & ~is_pad).sum())
        pad_by_content = int(((cov > 0) & is_pad).sum())
        pad_uncovered = int(((cov_pad != 1) & is_pad).sum())
        content_by_pad = int(((cov_pad > 0) & ~is_pad).sum())
    for count, what in (
        (uncovered, "non-pad positions not covered"),
        (multiple, "non-pad positions covered more than once"),
        (pad_by_content, "pad positions covered by a non-pad span"),
        (pad_uncovered, "pad positions not covered by exactly one pad span"),
        (content_by_pad, "non-pad positions covered by a pad span"),
    ):
        if count:
            problems.append(f"{count} {what}")
    m = good & ~pad
    if m.any():
        seg = blocks.segment_ids.reshape(-1)
        a, b = seg[rb[m] * T + s[m]], seg[rb[m] * T + e[m] - 1]
        split = int(((a != b) | (a == 0)).sum())
        if split:
            problems.append(f"{split} spans crossing a segment boundary")
    pad_loss = int(blocks.loss_mask[is_pad].sum())
    if pad_loss:
        problems.append(f"{pad_loss} padding positions in the loss")
    pad_tok = int((blocks.tokens[is_pad] != blocks.pad_id).sum())
    if pad_tok:
        problems.append(f"{pad_tok} padding positions not holding pad_id")
    first_target = int(blocks.loss_mask[:, 0].sum()) if n else 0
    if first_target:
        problems.append(f"{first_target} blocks whose position 0 is a target")
    examples = []
    if cov is not None and (uncovered or multiple or pad_by_content):
        bad = np.argwhere(((cov != 1) & ~is_pad) | ((cov > 0) & is_pad))
        examples = [(int(b) + blocks.first_block, int(t)) for b, t in bad[:max_examples]]
    detail = {
        "blocks": int(n),
        "positions": int(n * T),
        "spans": int(sp.num_rows),
        "uncovered": uncovered,
        "multiply_covered": multiple,
        "pad_covered_by_content": pad_by_content,
        "problems": problems,
        "examples": examples,
    }
    return (not problems), detail
