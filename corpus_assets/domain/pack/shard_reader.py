"""A resumable streaming reader over shards: shard-level shuffle + bounded shuffle buffer, numpy batches.

``ShardStreamReader`` iterates over ``Batch`` objects (blocks) of shards written by ``pack.shards``;
the order is a pure function of the seed and the shard list (per-epoch shard permutation, then
one buffer RNG for the whole stream). ``state_dict()`` is plain JSON holding block references,
never token copies, and ``load_state_dict`` continues with exactly the remaining sequence. Memory
is bounded by the buffer (blocks are read with ``os.preadv``, not memory maps); each shard is
re-hashed before its first block is read. ``torch_iterable_dataset`` wraps it for one rank.

Order, state, memory and integrity: docs/packing.md#shard-reader
"""

from __future__ import annotations

import hashlib
import json
import os
from collections import OrderedDict
from pathlib import Path
from typing import Any, Iterator, Mapping, NamedTuple, Optional, Sequence, Union

import numpy as np

from corpus_assets.domain.pack.shards import ShardIntegrityError, array_dtypes, check_shard, load_shard_manifest

__all__ = [
    "READER_STATE_VERSION",
    "Batch",
    "ShardStreamReader",
    "shards_from_manifest",
    "torch_iterable_dataset",
]

READER_STATE_VERSION = 1
_PHASES = ("stream", "drain", "epoch_end", "done")
_CONFIG_KEYS = ("seed", "batch_size", "buffer_size", "epochs", "shuffle_shards", "drop_last")

Ref = tuple[int, int]  # (shard index in the reader's list, block index within the shard)


class Batch(NamedTuple):
    tokens: np.ndarray  # (b, T), the shards' token dtype
    loss_mask: np.ndarray  # (b, T) uint8
    segment_ids: np.ndarray  # (b, T) int32
    position_ids: Optional[np.ndarray]  # (b, T) int32 when every shard has them
    refs: np.ndarray  # (b, 2) int64: (shard index, block index)
    epoch: int


def shards_from_manifest(out_dir: Union[str, Path]) -> list[tuple[Path, dict]]:
    """``(directory, metadata)`` for every shard listed in ``<out_dir>/shards.json``, in order."""
    d = Path(out_dir)
    return [(d, meta) for meta in load_shard_manifest(d)["shards"]]


def _same(metas: Sequence[Mapping], key: str) -> Any:
    values = {json.dumps(m[key]) for m in metas}
    if len(values) != 1:
        raise ValueError(f"shards disagree on {key!r}: {sorted(values)}")
    return metas[0][key]


def _fingerprint(metas: Sequence[Mapping]) -> str:
    ident = [[m["name"], int(m["blocks"]), {r: f["sha256"] for r, f in sorted(m["files"].items())}]
             for m in metas]
    return hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()


def _buffer_rng(seed: int) -> np.random.Generator:
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence(seed, spawn_key=(0,))))


def _shard_order(seed: int, epoch: int, n: int, shuffle: bool) -> list[int]:
    if not shuffle:
        return list(range(n))
    g = np.random.Generator(np.random.PCG64(np.random.SeedSequence(seed, spawn_key=(1, epoch))))
    return [int(i) for i in g.permutation(n)]


def _rng_state_to_json(rng: np.random.Generator) -> dict:
    st = rng.bit_generator.state
    return {
        "bit_generator": st["bit_generator"],
        "state": str(st["state"]["state"]),
        "inc": str(st["state"]["inc"]),
        "has_uint32": int(st["has_uint32"]),
        "uinteger": int(st["uinteger"]),
    }


def _rng_state_from_json(d: Mapping) -> dict:
    if d.get("bit_generator") != "PCG64":
        raise ValueError(f"reader state rng: expected a PCG64 state, got {d.get('bit_generator')!r}")
    return {
        "bit_generator": "PCG64",
        "state": {"state": int(d["state"]), "inc": int(d["inc"])},
        "has_uint32": int(d["has_uint32"]),
        "uinteger": int(d["uinteger"]),
    }


class _ShardFiles:
    """Open file descriptors of one shard's array files; a block is read with one ``preadv`` per
    file straight into the batch arrays (no memory maps: resident memory stays at the batch)."""

    def __init__(self, directory: Path, meta: Mapping) -> None:
        self.name = str(meta["name"])
        self.seq_len = int(meta["seq_len"])
        self.dtypes = array_dtypes(meta)
        self.paths = {role: directory / meta["files"][role]["path"] for role in self.dtypes}
        self.fds: dict[str, int] = {}
        try:
            for role, path in self.paths.items():
                self.fds[role] = os.open(path, os.O_RDONLY)
        except OSError as exc:
            self.close()
            raise ShardIntegrityError(f"shard {self.name!r}: cannot open {exc.filename}: {exc.strerror}") from exc

    def read_block(self, k: int, out: Mapping[str, np.ndarray], row: int) -> None:
        for role, dst_arr in out.items():
            fd, dst = self.fds[role], dst_arr[row]
            want = dst.nbytes
            got = os.preadv(fd, [memoryview(dst).cast("B")], k * want)
            if got != want:
                raise ShardIntegrityError(
                    f"shard {self.name!r}: {role} file {self.paths[role]} is shorter than its metadata (block {k})"
                )

    def close(self) -> None:
        for fd in self.fds.values():
            os.close(fd)
        self.fds = {}


class ShardStreamReader:
    """Iterator of ``Batch``\\ es; see docs/packing.md#shard-reader for the order, the state and the checks."""

    def __init__(
        self,
        shards: Sequence[tuple[Union[str, Path], Mapping]],
        *,
        batch_size: int,
        buffer_size: int,
        seed: int,
        epochs: Optional[int] = 1,
        shuffle_shards: bool = True,
        drop_last: bool = False,
        verify: bool = True,
        max_open_shards: int = 64,
    ) -> None:
        if not shards:
            raise ValueError("shards must not be empty")
        for name, v in (("batch_size", batch_size), ("buffer_size", buffer_size), ("max_open_shards", max_open_shards)):
            if int(v) < 1:
                raise ValueError(f"{name} must be >= 1, got {v}")
        if epochs is not None and int(epochs) < 1:
            raise ValueError(f"epochs must be >= 1 or None (forever), got {epochs}")
        if int(seed) < 0:
            raise ValueError(f"seed must be >= 0, got {seed}")
        self._dirs = [Path(d) for d, _ in shards]
        self._metas = [dict(m) for _, m in shards]
        self.seq_len = int(_same(self._metas, "seq_len"))
        self.dtype = np.dtype(_same(self._metas, "dtype")).newbyteorder("<")
        first = array_dtypes(self._metas[0])
        # on disk: as the shards record it (segment / position ids uint16 for seq_len <= 65535, int32
        # in shards written before); batches always hold int32 segment and position ids
        self._dtypes = {"bin": self.dtype, "loss_mask": np.dtype("<u1"), "segment_ids": first["segment_ids"],
                        "position_ids": first.get("position_ids", np.dtype("<i4"))}
        for m in self._metas:
            for role, dt in array_dtypes(m).items():
                if dt != self._dtypes[role]:
                    raise ValueError(f"shard {m['name']!r}: {role} dtype {dt}, expected {self._dtypes[role]}")
        self.tokenizer = _same(self._metas, "tokenizer")
        self._has_positions = all("position_ids" in m["files"] for m in self._metas)
        self._n_blocks = [int(m["blocks"]) for m in self._metas]
        self.seed, self.batch_size, self.buffer_size = int(seed), int(batch_size), int(buffer_size)
        self.epochs = None if epochs is None else int(epochs)
        self.shuffle_shards, self.drop_last, self.verify = bool(shuffle_shards), bool(drop_last), bool(verify)
        self.max_open_shards = int(max_open_shards)
        if self.drop_last and self.blocks_per_epoch < self.batch_size:
            raise ValueError(
                f"drop_last with batch_size {self.batch_size} > {self.blocks_per_epoch} blocks per epoch "
                "would never yield a batch"
            )
        self._fingerprint = _fingerprint(self._metas)
        self._open: OrderedDict[int, _ShardFiles] = OrderedDict()
        self._verified: set[int] = set()
        self._reset()

    # --- stream state -------------------------------------------------------------------------

    def _reset(self) -> None:
        self._epoch = 0
        self._phase = "stream"
        self._order = _shard_order(self.seed, 0, len(self._metas), self.shuffle_shards)
        self._order_pos = 0
        self._block_pos = 0
        self._rng = _buffer_rng(self.seed)
        self._buffer: list[Ref] = []
        self._pending: list[Ref] = []
        self._pending_epoch = 0
        self._batches = 0
        self._blocks = 0

    @property
    def n_shards(self) -> int:
        return len(self._metas)

    @property
    def blocks_per_epoch(self) -> int:
        return sum(self._n_blocks)

    @property
    def epoch(self) -> int:
        return self._epoch

    def buffer_len(self) -> int:
        return len(self._buffer)

    def _start_epoch(self, epoch: int) -> None:
        self._epoch = epoch
        self._order = _shard_order(self.seed, epoch, len(self._metas), self.shuffle_shards)
        self._order_pos = 0
        self._block_pos = 0
        self._phase = "stream"

    def _next_ref(self) -> Optional[Ref]:
        """The next block of the stream, or None at the end of an epoch (and when done).

        Every check that can fail (opening / verifying a shard) runs before the state changes."""
        while True:
            if self._phase == "stream":
                if self._order_pos >= len(self._order):
                    self._phase = "drain"
                    continue
                shard = self._order[self._order_pos]
                if self._block_pos >= self._n_blocks[shard]:
                    self._order_pos += 1
                    self._block_pos = 0
                    continue
                if self._block_pos == 0:
                    self._view(shard)  # verify before the first block of the shard enters the stream
                ref = (shard, self._block_pos)
                if len(self._buffer) < self.buffer_size:
                    self._buffer.append(ref)
                    self._block_pos += 1
                    continue
                j = int(self._rng.integers(self.buffer_size))
                out, self._buffer[j] = self._buffer[j], ref
                self._block_pos += 1
                return out
            if self._phase == "drain":
                if not self._buffer:
                    self._phase = "epoch_end"
                    return None
                j = int(self._rng.integers(len(self._buffer)))
                out = self._buffer[j]
                last = self._buffer.pop()
                if j < len(self._buffer):
                    self._buffer[j] = last
                return out
            if self._phase == "epoch_end":
                nxt = self._epoch + 1
                if self.epochs is not None and nxt >= self.epochs:
                    self._phase = "done"
                    return None
                self._start_epoch(nxt)
                continue
            return None  # done

    # --- reading ------------------------------------------------------------------------------

    def _view(self, shard: int) -> _ShardFiles:
        v = self._open.get(shard)
        if v is not None:
            self._open.move_to_end(shard)
            return v
        check = self.verify and shard not in self._verified
        check_shard(self._dirs[shard], self._metas[shard], verify=check)
        if check:
            self._verified.add(shard)
        v = _ShardFiles(self._dirs[shard], self._metas[shard])
        self._open[shard] = v
        while len(self._open) > self.max_open_shards:
            _, old = self._open.popitem(last=False)
            old.close()
        return v

    def _materialize(self, refs: Sequence[Ref], epoch: int) -> Batch:
        b, T = len(refs), self.seq_len
        roles = ("bin", "loss_mask", "segment_ids") + (("position_ids",) if self._has_positions else ())
        arrays = {role: np.empty((b, T), dtype=self._dtypes[role]) for role in roles}
        for i, (s, k) in enumerate(refs):
            self._view(s).read_block(k, arrays, i)
        i32 = np.dtype("<i4")
        pos = arrays.get("position_ids")
        return Batch(
            arrays["bin"],
            arrays["loss_mask"],
            arrays["segment_ids"].astype(i32, copy=False),
            None if pos is None else pos.astype(i32, copy=False),
            np.asarray(refs, dtype=np.int64).reshape(b, 2),
            epoch,
        )

    def __iter__(self) -> Iterator[Batch]:
        return self

    def __next__(self) -> Batch:
        while True:
            while len(self._pending) < self.batch_size:
                ref = self._next_ref()
                if ref is None:
                    break
                if not self._pending:
                    self._pending_epoch = self._epoch
                self._pending.append(ref)
            if not self._pending:
                if self._phase == "done":
                    raise StopIteration
                continue  # an epoch ended exactly on a batch boundary
            if len(self._pending) < self.batch_size and self.drop_last:
                self._pending = []
                continue
            batch = self._materialize(self._pending, self._pending_epoch)
            self._batches += 1
            self._blocks += len(self._pending)
            self._pending = []
            return batch

    def close(self) -> None:
        """Close the shards' files (the reader reopens them if iterated again)."""
        while self._open:
            _, v = self._open.popitem()
            v.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    # --- state --------------------------------------------------------------------------------

    def _config(self) -> dict:
        return {k: getattr(self, k) for k in _CONFIG_KEYS}

    def state_dict(self) -> dict:
        """JSON-serializable state; see docs/packing.md#shard-reader."""
        return {
            "version": READER_STATE_VERSION,
            "config": self._config(),
            "shards": {"count": len(self._metas), "fingerprint": self._fingerprint},
            "epoch": self._epoch,
            "phase": self._phase,
            "order_pos": self._order_pos,
            "block_pos": self._block_pos,
            "rng": _rng_state_to_json(self._rng),
            "buffer": [[s, k] for s, k in self._buffer],
            "pending": [[s, k] for s, k in self._pending],
            "pending_epoch": self._pending_epoch,
            "batches_emitted": self._batches,
            "blocks_emitted": self._blocks,
        }

    def _check_refs(self, key: str, refs: Any, limit: int) -> list[Ref]:
        if not isinstance(refs, list) or len(refs) > limit:
            raise ValueError(f"reader state {key!r}: expected a list of at most {limit} [shard, block] pairs")
        out = []
        for r in refs:
            s, k = int(r[0]), int(r[1])
            if not (0 <= s < len(self._metas) and 0 <= k < self._n_blocks[s]):
                raise ValueError(f"reader state {key!r}: block reference {[s, k]} is not a block of these shards")
            out.append((s, k))
        return out

    def _check_header(self, state: Mapping) -> None:
        if state.get("version") != READER_STATE_VERSION:
            raise ValueError(f"reader state version {state.get('version')!r}, expected {READER_STATE_VERSION}")
        cfg = state.get("config", {})
        for k in _CONFIG_KEYS:
            if cfg.get(k) != getattr(self, k):
                raise ValueError(
                    f"reader state was taken with {k}={cfg.get(k)!r}, this reader has {k}={getattr(self, k)!r}"
                )
        if state.get("shards", {}).get("fingerprint") != self._fingerprint:
            raise ValueError(
                "reader state was taken over a different shard list (names, block counts or digests differ)"
            )
        if state.get("phase") not in _PHASES:
            raise ValueError(f"reader state phase {state.get('phase')!r} is not one of {_PHASES}")

    def load_state_dict(self, state: Mapping) -> None:
        """Restore a ``state_dict()``; the next batches are exactly those the saved reader would have produced."""
        self._check_header(state)
        epoch = int(state["epoch"])
        order = _shard_order(self.seed, epoch, len(self._metas), self.shuffle_shards)
        order_pos, block_pos = int(state["order_pos"]), int(state["block_pos"])
        if not 0 <= order_pos <= len(order):
            raise ValueError(f"reader state order_pos {order_pos} outside [0, {len(order)}]")
        if order_pos < len(order) and not 0 <= block_pos <= self._n_blocks[order[order_pos]]:
            raise ValueError(f"reader state block_pos {block_pos} outside the current shard")
        buffer = self._check_refs("buffer", state["buffer"], self.buffer_size)
        pending = self._check_refs("pending", state["pending"], self.batch_size)
        rng = _buffer_rng(self.seed)
        rng.bit_generator.state = _rng_state_from_json(state["rng"])
        self._epoch, self._order, self._phase = epoch, order, str(state["phase"])
        self._order_pos, self._block_pos = order_pos, block_pos
        self._rng, self._buffer, self._pending = rng, buffer, pending
        self._pending_epoch = int(state.get("pending_epoch", epoch))
        self._batches, self._blocks = int(state["batches_emitted"]), int(state["blocks_emitted"])


# --- torch adapter ------------------------------------------------------------------------------

_TORCH_DATASET_CLASS: Any = None


def _torch_dataset_class() -> Any:
    global _TORCH_DATASET_CLASS
    if _TORCH_DATASET_CLASS is not None:
        return _TORCH_DATASET_CLASS
    try:
        import torch
        from torch.utils.data import IterableDataset, get_worker_info
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError("torch_iterable_dataset needs torch, which is not installed") from exc

    class ShardIterableDataset(IterableDataset):
        """Yields dicts of tensors: tokens int64, loss_mask bool, segment_ids int32 (position_ids int32)."""

        def __init__(self, reader: ShardStreamReader) -> None:
            super().__init__()
            self.reader = reader

        def __iter__(self):
            info = get_worker_info()
            if info is not None and info.num_workers > 1:
                raise RuntimeError(
                    "ShardIterableDataset: one reader per rank; use DataLoader(num_workers<=1, batch_size=None)"
                )
            for b in self.reader:
                item = {
                    "tokens": torch.from_numpy(b.tokens.astype(np.int64)),
                    "loss_mask": torch.from_numpy(b.loss_mask.astype(np.bool_)),
                    "segment_ids": torch.from_numpy(b.segment_ids),
                }
                if b.position_ids is not None:
                    item["position_ids"] = torch.from_numpy(b.position_ids)
                yield item

        def state_dict(self) -> dict:
            return self.reader.state_dict()

        def load_state_dict(self, state: Mapping) -> None:
            self.reader.load_state_dict(state)

    _TORCH_DATASET_CLASS = ShardIterableDataset
    return ShardIterableDataset


def torch_iterable_dataset(reader: ShardStreamReader) -> Any:
    """Wrap ``reader`` as a ``torch.utils.data.IterableDataset`` (imports torch on first call)."""
    return _torch_dataset_class()(reader)
