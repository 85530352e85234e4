"""The packable token views of a release, spooled to flat files per split.

Packing reads views in the mixture plan's order (any record, any number of times) and a release's
views are far larger than memory, so one streaming pass over ``token_views`` writes per split the
concatenated ids, loss masks and offsets and keeps per record only its start and length; a
chunk is gathered with ``preadv`` into its own arrays.
``gather`` returns exactly what slicing the in-memory table would, in the table's order, so the
packed bytes do not depend on this module.

``save`` / ``SplitViews.load`` let another process (a packing task on a Dask worker) open the
same spool from its directory.

Why and how: docs/packing.md#view-spool
"""

from __future__ import annotations

import os
import shutil
from array import array
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Optional

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from corpus_assets.domain.core.arrow_columns import equal_mask, strings
from corpus_assets.domain.pack.mixture_layer import packable_mask
from corpus_assets.domain.storage.layer_store import LayerVersion

_MAP_WIDTHS = {"ids": 4, "mask": 1, "offsets": 8}  # bytes per token in each map (int32, uint8, 2 x int32)
RECORD_PASS_COLUMNS = ["record_id", "variant", "split", "source_id", "domain", "cache_key", "n_tokens"]  # no tokens
TOKEN_PASS_COLUMNS = ["variant", "split", "n_tokens", "input_ids", "loss_mask", "offsets"]
VIEW_COLUMNS = ["record_id", "variant", "split", "source_id", "domain", "cache_key", "n_tokens", "input_ids", "loss_mask",
                "offsets"]

# per record: its identity, its labels, and the cache key of its view (what a shard's content key
# hashes: shard_reuse.shard_keys)
_RECORD_COLUMNS = ("record_id", "variant", "source_id", "domain", "cache_key")


@dataclass
class SplitViews:
    """The spooled views of one split: per record its columns (Arrow arrays, in table order) and
    where its tokens start in the maps and how many there are. No Python object per record: a
    release's packing parent holds every record of every split (``rows_of`` looks ids up in Arrow)."""

    directory: Path
    starts: array = field(default_factory=lambda: array("q"))  # token offset of each record in the maps
    lengths: array = field(default_factory=lambda: array("q"))
    _parts: dict = field(default_factory=lambda: {c: [] for c in _RECORD_COLUMNS})  # appended chunks
    _columns: Optional[dict] = None  # the chunks joined, until the next append
    _files: dict = field(default_factory=dict)
    _tokens: int = 0
    _maps: Optional[dict] = None  # read descriptors of the maps, while gathering

    def __len__(self) -> int:
        return len(self.lengths)

    def column(self, name: str) -> pa.Array:
        """One record column (``record_id``, ``variant``, ``source_id``, ``domain``, ``cache_key``) of
        every record."""
        if self._columns is None:
            self._columns = {c: pa.concat_arrays(v) if v else pa.array([], pa.string()) for c, v in self._parts.items()}
            self._parts = {c: [a] for c, a in self._columns.items()}
        return self._columns[name]

    @property
    def record_ids(self) -> pa.Array:
        return self.column("record_id")

    @property
    def variants(self) -> pa.Array:
        return self.column("variant")

    @property
    def source_ids(self) -> pa.Array:
        return self.column("source_id")

    @property
    def domains(self) -> pa.Array:
        return self.column("domain")

    def rows_of(self, record_ids) -> np.ndarray:
        """The row of each of ``record_ids`` (an Arrow array, chunked array or list), -1 where the
        split has no view of it (a split holds one packable view per record). Each call hashes
        every record id of the split: look many ids up in one call."""
        if isinstance(record_ids, pa.ChunkedArray):  # one lookup table for every chunk
            record_ids = pa.chunked_array([strings(c) for c in record_ids.chunks], pa.string())
        else:
            record_ids = strings(record_ids)
        found = pc.index_in(record_ids, value_set=self.record_ids)
        return np.asarray(pc.fill_null(found, -1).to_numpy(zero_copy_only=False), dtype=np.int64)

    def label_map(self, name: str) -> dict:
        """record id -> ``source_id`` or ``domain``: for the single-process reference packer and tests
        (a dict per record; the layer's tasks build theirs per chunk)."""
        return dict(zip(self.record_ids.to_pylist(), self.column(name).to_pylist()))

    def _append(self, batch: pa.RecordBatch) -> None:
        """Append every row of ``batch`` (already one packable view per record)."""
        n, ids, mask, offs = _token_columns(batch)
        none = pa.nulls(batch.num_rows, pa.string())
        cols = {c: (strings(batch.column(c)) if c in batch.schema.names else none) for c in _RECORD_COLUMNS}
        self._append_arrays(n, ids, mask, offs, cols)

    def _append_arrays(self, n: np.ndarray, ids: np.ndarray, mask: np.ndarray, offs: np.ndarray, columns: dict) -> None:
        if not self._files:
            self.directory.mkdir(parents=True, exist_ok=True)
            self._files = {k: open(self.directory / f"{k}.bin", "wb") for k in _MAP_WIDTHS}
        self._write_maps(ids, mask, offs)
        self._add_records(columns, n)

    def _write_maps(self, ids: np.ndarray, mask: np.ndarray, offs: np.ndarray) -> None:
        for k, a in (("ids", ids), ("mask", mask), ("offsets", offs)):  # buffers as they are, no bytes copy
            self._files[k].write(memoryview(np.ascontiguousarray(a)).cast("B"))

    def _write_tokens(self, ids: np.ndarray, mask: np.ndarray, offs: np.ndarray) -> None:
        """Append tokens to the maps opened by ``_open_at`` (their records are already known)."""
        self._write_maps(ids, mask, offs)
        self._tokens += int(ids.size)

    def _add_records(self, columns: dict, n: np.ndarray) -> None:
        for c in _RECORD_COLUMNS:
            self._parts[c].append(columns[c])
        self._columns = None
        if n.size:
            self.starts.frombytes((self._tokens + np.concatenate([[0], np.cumsum(n)[:-1]])).astype(np.int64).tobytes())
            self.lengths.frombytes(np.asarray(n, dtype=np.int64).tobytes())
        self._tokens += int(n.sum())

    def _close(self) -> None:
        for f in self._files.values():
            f.close()

    def _extend_records_from(self, saved: Path) -> None:
        """Append the records of a part ``save`` wrote whose tokens a task already wrote into this
        split's maps in place (``spool_task``), in table order."""
        part = SplitViews.load(saved)
        if not len(part.lengths):
            return
        self._add_records({c: part.column(c) for c in _RECORD_COLUMNS}, np.asarray(part.lengths, dtype=np.int64))

    def _open_at(self, token_offset: int) -> None:
        """Write this spool's tokens into the split's preallocated maps from ``token_offset`` on
        (a spool task's range; ``SpooledViews._spool_tasks`` sized the files)."""
        self._files = {}
        for k, width in _MAP_WIDTHS.items():
            f = open(self.directory / f"{k}.bin", "r+b")
            f.seek(token_offset * width)
            self._files[k] = f

    @contextmanager
    def writing_at(self, token_offset: int) -> Iterator[Callable[[np.ndarray, np.ndarray, np.ndarray], None]]:
        """A writer of (ids, mask, offsets) arrays into the split's preallocated maps from
        ``token_offset`` on, in the order given; the maps are closed when the block ends."""
        self._open_at(token_offset)
        try:
            yield self._write_maps
        finally:
            self._close()
            self._files = {}

    def save(self, directory: Optional[Path] = None) -> None:
        """Write the per-record columns beside the maps (or into ``directory``), for ``load`` in
        another process."""
        directory = self.directory if directory is None else Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        table = pa.table({c: self.column(c) for c in _RECORD_COLUMNS})
        with pa.ipc.new_file(str(directory / "records.arrow"), table.schema) as w:
            w.write_table(table)
        np.save(directory / "starts.npy", np.frombuffer(self.starts, dtype=np.int64))
        np.save(directory / "lengths.npy", np.frombuffer(self.lengths, dtype=np.int64))

    @classmethod
    def load(cls, directory: Path) -> "SplitViews":
        """A read-only view of a spool ``save`` wrote (record columns memory-mapped, as Arrow
        arrays; no record index)."""
        directory = Path(directory)
        t = pa.ipc.open_file(pa.memory_map(str(directory / "records.arrow"))).read_all()
        sv = cls(directory)
        sv._parts = {c: [t.column(c).combine_chunks()] for c in _RECORD_COLUMNS}
        sv.starts = np.load(directory / "starts.npy", mmap_mode="r")
        sv.lengths = np.load(directory / "lengths.npy", mmap_mode="r")
        ids = directory / "ids.bin"
        sv._tokens = ids.stat().st_size // _MAP_WIDTHS["ids"] if ids.exists() else 0  # tokens spooled (some rows may not be)
        return sv

    def _open_for_reads(self) -> dict:
        """Read descriptors of the maps. Reads are ``preadv`` into the chunk's own arrays, not
        slices of memory maps: two packing processes faulting in the same mapped pages contend
        (and one process is faster with reads, too)."""
        if self._maps is None:
            self._maps = {k: os.open(self.directory / f"{k}.bin", os.O_RDONLY) for k in _MAP_WIDTHS} if self._tokens else {}
        return self._maps

    def close_reads(self) -> None:
        for fd in (self._maps or {}).values():
            os.close(fd)
        self._maps = None

    def token_counts(self, rows: np.ndarray) -> np.ndarray:
        """Tokens of each of ``rows`` (what a chunk of them will hold)."""
        return np.frombuffer(self.lengths, dtype=np.int64)[rows] if rows.size else np.zeros(0, np.int64)

    def gather(self, rows: np.ndarray):
        """(ids, mask, offsets, lengths, record ids, variants) of ``rows``, concatenated in that order."""
        starts = np.frombuffer(self.starts, dtype=np.int64)[rows] if rows.size else np.zeros(0, np.int64)
        lengths = np.frombuffer(self.lengths, dtype=np.int64)[rows] if rows.size else np.zeros(0, np.int64)
        total = int(lengths.sum())
        if (starts < 0).any():
            raise RuntimeError(f"view spool {self.directory}: row {int(rows[np.flatnonzero(starts < 0)[0]])} has no "
                               "tokens spooled (it was not asked for)")
        ids, mask, offs = np.empty(total, np.int32), np.empty(total, np.uint8), np.empty((total, 2), np.int32)
        if total:
            fds = self._open_for_reads()
            for key, out in (("ids", ids), ("mask", mask), ("offsets", offs)):
                fd, width, buf = fds[key], _MAP_WIDTHS[key], memoryview(out).cast("B")
                at = 0
                for s0, n in zip(starts.tolist(), lengths.tolist()):
                    want = n * width
                    got = os.preadv(fd, [buf[at:at + want]], s0 * width)
                    if got != want:
                        raise RuntimeError(f"view spool {self.directory}/{key}.bin: short read at token {s0} "
                                           f"({got} of {want} bytes)")
                    at += want
        take = pa.array(np.asarray(rows, dtype=np.int64), pa.int64())
        return ids, mask, offs, lengths, self.record_ids.take(take), self.variants.take(take)


def _token_columns(batch: pa.RecordBatch) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """n_tokens, and the flat ids, masks and (n, 2) offsets of a batch of views (zero-copy)."""
    n = np.asarray(batch.column("n_tokens").to_numpy(zero_copy_only=False), dtype=np.int64)
    ids = np.asarray(batch.column("input_ids").flatten().to_numpy(zero_copy_only=False), dtype=np.int32)
    mask = np.asarray(batch.column("loss_mask").flatten().to_numpy(zero_copy_only=False), dtype=np.uint8)
    offs = np.asarray(batch.column("offsets").flatten().to_numpy(zero_copy_only=False), dtype=np.int32)
    return checked_tokens(n, ids, mask, offs, "token_views")


def checked_tokens(n: np.ndarray, ids: np.ndarray, mask: np.ndarray, offs: np.ndarray,
                   what: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(n, ids, mask, offsets as (n, 2))`` of rows whose flat token arrays agree with their
    n_tokens, or a ValueError naming ``what`` the rows came from."""
    if ids.size != int(n.sum()) or mask.size != ids.size or offs.size != 2 * ids.size:
        raise ValueError(f"{what} rows whose n_tokens, input_ids, loss_mask and offsets disagree")
    return n, ids, mask, offs.reshape(-1, 2)


class SpooledViews:
    """Every split's packable views (each split with its records' source and domain)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.splits: dict[str, SplitViews] = {}

    @classmethod
    def spool(cls, token_views: LayerVersion, directory: Path, split_names: Iterable[str], *,
              batch_size: int = 2048, log: Callable[[str], None] = lambda _m: None,
              engine: Optional[Any] = None) -> "SpooledViews":
        """Spool in one pass; with ``engine`` (``core.compute.Engine``), ranges of row groups are
        spooled by tasks (``spool_task``) and appended in range order: the same files."""
        out = cls(directory)
        wanted = set(split_names)
        for i, name in enumerate(sorted(wanted)):
            out.splits[name] = SplitViews(directory / f"split-{i}")
        if engine is not None:
            out._spool_records(token_views, batch_size, engine)
            out.fill({}, engine, log=log)
            return out
        try:
            for batch in token_views.iter_batches("views", batch_size=batch_size, columns=VIEW_COLUMNS):
                out._route(batch, wanted)
        finally:
            for sv in out.splits.values():
                sv._close()
        log("token views spooled: " + ", ".join(f"{k} {len(v)} records / {v._tokens} tokens" for k, v in sorted(out.splits.items())))
        return out

    @classmethod
    def spool_records(cls, token_views: LayerVersion, directory: Path, split_names: Iterable[str], *, engine: Any,
                      batch_size: int = 2048) -> "SpooledViews":
        """Every split's records and lengths, without tokens (``fill`` spools those): planning and
        shard keys need only these, and a rebuild that keeps shards spools only what it packs."""
        out = cls(directory)
        for i, name in enumerate(sorted(set(split_names))):
            out.splits[name] = SplitViews(directory / f"split-{i}")
        out._spool_records(token_views, batch_size, engine)
        return out

    def _spool_records(self, token_views: LayerVersion, batch_size: int, engine: Any) -> None:
        """Ranges of row groups as tasks, light columns only; records appended in range order (so
        in table order), and each range's row count per split kept for ``fill``."""
        files = [str(p) for p in token_views.table_files("views")]
        groups, sizes = [], []
        for fi, p in enumerate(files):
            meta = pq.ParquetFile(p).metadata
            for g in range(meta.num_row_groups):
                groups.append((fi, g))
                sizes.append(meta.row_group(g).total_byte_size)
        ranges = balanced_ranges(groups, sizes, spool_ranges(engine.workers))
        names = sorted(self.splits)
        tasks = [SpoolTask(tuple(files), r, str(self.directory / f"part-{k:05d}"), tuple(names), batch_size,
                           records_only=True) for k, r in enumerate(ranges)]
        parts = engine.map(spool_task, tasks, name="view-spool-records")
        counts = []  # per row group, in table order: its packable rows per split
        try:
            for part in parts:
                for i, name in enumerate(names):
                    self.splits[name]._extend_records_from(Path(part) / f"split-{i}")
                counts.append(np.load(Path(part) / "group_counts.npy").reshape(-1, len(names)))
        finally:
            for part in parts:
                shutil.rmtree(part, ignore_errors=True)
        self._layout = (tuple(files), ranges, np.concatenate(counts) if counts else np.zeros((0, len(names)), np.int64),
                        batch_size)

    def fill(self, need: dict, engine: Any, log: Callable[[str], None] = lambda _m: None,
             tails: Optional[Any] = None) -> None:
        """Spool the tokens of the rows each split needs (``need[split]``: a bool mask over its
        rows; a split not in ``need``: every row) as tasks over the same ranges of row groups. The
        parent sizes every split's maps from the lengths first, so each task writes its tokens
        straight into the maps at its own offsets; rows not needed get no tokens (start -1), and a row
        group without a needed row is not read. ``tails`` (``view_tail.PreviousTails``): needed rows
        the previous build's tails hold with the same view are copied from there (after the rows
        read from token_views in the maps), not read from token_views."""
        files, ranges, counts, batch_size = self._layout  # counts: per row group and split
        names = sorted(self.splits)
        row_starts = np.cumsum(counts, axis=0) - counts
        tokens = np.zeros((counts.shape[0], len(names)), np.int64)  # needed tokens per row group and split
        from_tails: dict[str, tuple] = {}
        for i, name in enumerate(names):
            sv = self.splits[name]
            lengths = np.frombuffer(sv.lengths, dtype=np.int64) if len(sv) else np.zeros(0, np.int64)
            mask = np.ones(len(sv), bool) if need.get(name) is None else np.asarray(need[name], bool)
            if mask.shape != lengths.shape:
                raise ValueError(f"view spool of {name}: need mask of {mask.size} rows, the split has {lengths.size}")
            tail_rows, rows = tails.match(name, sv) if tails is not None else (np.zeros(0, np.int64),) * 2
            keep = mask[rows]
            tail_rows, rows = tail_rows[keep], rows[keep]
            mask = mask.copy()
            mask[rows] = False  # read from token_views: the needed rows no tail holds
            wanted = np.where(mask, lengths, 0)
            ends = np.cumsum(wanted)
            starts = np.where(mask, ends - wanted, -1)
            first = int(ends[-1]) if ends.size else 0
            taken = lengths[rows]
            starts[rows] = first + np.cumsum(taken) - taken  # tail rows after them, in the tails' order
            sv.starts = starts.astype(np.int64)
            sv._tokens = first + int(taken.sum())
            if rows.size:
                from_tails[name] = (tail_rows, first, int(taken.sum()))
            bounds = np.concatenate([[0], ends])
            tokens[:, i] = bounds[row_starts[:, i] + counts[:, i]] - bounds[row_starts[:, i]]
            sv.directory.mkdir(parents=True, exist_ok=True)
            np.save(sv.directory / "need.npy", mask)
            for k, width in _MAP_WIDTHS.items():
                with open(sv.directory / f"{k}.bin", "wb") as f:
                    f.truncate(sv._tokens * width)
        offsets = np.cumsum(tokens, axis=0) - tokens
        tasks, g0 = [], 0
        for k, r in enumerate(ranges):  # each range's row groups that hold a needed row; the others are not read
            idx = [g0 + j for j in range(len(r)) if tokens[g0 + j].any()]
            if idx:
                tasks.append(SpoolTask(
                    files, tuple(r[i - g0] for i in idx), str(self.directory / f"part-{k:05d}"), tuple(names), batch_size,
                    tuple(str(self.splits[n].directory) for n in names), tuple(int(x) for x in offsets[idx[0]]),
                    tuple(int(x) for x in tokens[idx].sum(axis=0)),
                    tuple(tuple(int(x) for x in row_starts[i]) for i in idx)))
            g0 += len(r)
        engine.map(spool_task, tasks, name="view-spool")  # need.npy stays with the spool (removed with it)
        if from_tails:
            self._fill_from_tails(tails, from_tails)
        log("token views spooled: " + ", ".join(
            f"{k} {int(np.count_nonzero(np.frombuffer(v.starts, dtype=np.int64) >= 0)) if len(v) else 0}/{len(v)} records "
            f"/ {v._tokens} tokens" for k, v in sorted(self.splits.items()))
            + (f" ({sum(r.size for r, _f, _t in from_tails.values())} records from the previous build's tails)"
               if tails is not None else ""))

    def _fill_from_tails(self, tails: Any, plan: dict[str, tuple]) -> None:
        """Write the tokens ``plan[split] = (tail rows, first map token, tokens)`` takes from the
        previous build's tails into each split's maps from that token on, in the tails' order."""
        written = {name: 0 for name in plan}
        with ExitStack() as stack:
            writers: dict[str, Callable] = {}
            for name, _n, ids, mask, offs in tails.tokens({name: rows for name, (rows, _f, _t) in plan.items()}):
                if name not in writers:
                    writers[name] = stack.enter_context(self.splits[name].writing_at(plan[name][1]))
                writers[name](ids, mask, offs)
                written[name] += int(ids.size)
        for name, (_rows, _first, want) in plan.items():
            if written[name] != want:
                raise RuntimeError(f"view spool of {name}: {written[name]} tokens taken from the previous build's "
                                   f"tails, {want} expected")

    def _route(self, batch: pa.RecordBatch, wanted: set) -> None:
        """Append each wanted split's packable rows of ``batch`` (one view per record, as the
        mixture plan counts them: ``mixture_layer.packable_views``), slicing the flat token
        columns with a mask instead of filtering the list columns (a copy of every list)."""
        n, ids, mask, offs = _token_columns(batch)
        cols = {c: strings(batch.column(c)) for c in _RECORD_COLUMNS}
        for name, rows in _split_rows(batch, wanted):
            if rows.all():
                self.splits[name]._append_arrays(n, ids, mask, offs, cols)
                continue
            tok = np.repeat(rows, n)
            pick = pa.array(np.flatnonzero(rows), pa.int64())
            self.splits[name]._append_arrays(n[rows], ids[tok], mask[tok], offs[tok], {c: a.take(pick) for c, a in cols.items()})

    def _route_records(self, batch: pa.RecordBatch) -> None:
        """Append each split's packable rows of ``batch`` as records with their lengths, no tokens."""
        n = np.asarray(batch.column("n_tokens").to_numpy(zero_copy_only=False), dtype=np.int64)
        cols = {c: strings(batch.column(c)) for c in _RECORD_COLUMNS}
        for name, rows in _split_rows(batch, set(self.splits)):
            pick = pa.array(np.flatnonzero(rows), pa.int64())
            self.splits[name]._add_records({c: a.take(pick) for c, a in cols.items()}, n[rows])

    def remove(self) -> None:
        self.splits.clear()
        shutil.rmtree(self.directory, ignore_errors=True)


def spool_ranges(workers: int) -> int:
    """How many ranges of row groups the spool cuts ``token_views`` into: with several workers
    eight per worker, small enough that they finish together; with one (the synchronous
    scheduler) one, since a range only costs its task's set-up there (on the 34k-record
    benchmark release the records pass took 129 ms in eight ranges, 62 ms in one). Task memory
    does not grow with a range: the records pass keeps the light columns the parent gathers
    anyway, the token pass writes each batch into the maps. The spool does not depend on the cut."""
    return 8 * workers if workers > 1 else 1


def balanced_ranges(items: list, sizes: list[int], n: int) -> list[tuple]:
    """``items`` cut into at most ``n`` runs of consecutive items of about equal total size (each
    cut at the item boundary nearest its share of the running size), so the last task a worker
    picks up is not one range twice the others. The spool's files do not depend on the cut."""
    if not items:
        return []
    ends = np.cumsum(np.asarray(sizes, dtype=np.float64))
    if ends[-1] <= 0:
        ends = np.arange(1, len(items) + 1, dtype=np.float64)
    n = max(1, min(n, len(items)))
    cuts = {len(items)}
    for target in ends[-1] * np.arange(1, n) / n:
        i = int(np.searchsorted(ends, target, side="left"))
        if i > 0 and target - ends[i - 1] <= ends[i] - target:
            i -= 1
        cuts.add(i + 1)
    cuts = sorted(cuts)
    out, lo = [], 0
    for hi in cuts:
        hi = min(hi, len(items))
        if hi > lo:
            out.append(tuple(items[lo:hi]))
            lo = hi
    return out


def _split_rows(batch: pa.RecordBatch, wanted: set):
    """(split, mask of its packable rows in ``batch``) for each wanted split the batch holds rows of."""
    packable = _packable(batch.column("variant"))
    split = batch.column("split")
    for name in sorted(set(pc.unique(split).to_pylist()) & wanted):
        rows = packable & equal_mask(split, name)
        if rows.any():
            yield name, rows


def _packable(variants) -> np.ndarray:
    """One view per record, as the mixture plan counts them (``mixture_layer.packable_mask``)."""
    return np.asarray(packable_mask(strings(variants)).to_numpy(zero_copy_only=False), dtype=bool)


@dataclass(frozen=True)
class SpoolTask:
    """Row groups of the ``views`` table to spool, one ``split-<i>`` per name. ``records_only``:
    the records and lengths of each split into ``directory``. Otherwise tokens of the rows each
    split needs (its ``need.npy``, from row ``row_offsets`` on) into its maps in ``split_dirs``
    from ``token_offsets`` on."""

    files: tuple[str, ...]
    groups: tuple[tuple[int, int], ...]  # (file index, row group), in table order
    directory: str
    splits: tuple[str, ...]  # every wanted split, sorted
    batch_size: int = 2048
    split_dirs: tuple[str, ...] = ()
    token_offsets: tuple[int, ...] = ()  # where this range's tokens start in each split's maps
    tokens: tuple[int, ...] = ()  # how many tokens this range holds per split (as sized)
    row_offsets: tuple[tuple[int, ...], ...] = ()  # per group of ``groups``: the split row of its first row, per split
    records_only: bool = False


def spool_task(task: SpoolTask) -> str:
    """Spool a range of row groups (a task on the release engine); returns its directory."""
    opened: dict[int, pq.ParquetFile] = {}

    def batches(columns, groups):
        for fi, g in groups:
            pf = opened.get(fi) or opened.setdefault(fi, pq.ParquetFile(task.files[fi]))
            yield from pf.read_row_group(g, columns=columns).to_batches(max_chunksize=task.batch_size)

    if task.records_only:
        out = SpooledViews(Path(task.directory))
        for i, name in enumerate(task.splits):
            out.splits[name] = SplitViews(Path(task.directory) / f"split-{i}")
        counts = np.zeros((len(task.groups), len(task.splits)), np.int64)
        for j, group in enumerate(task.groups):
            before = [len(out.splits[n]) for n in task.splits]
            for batch in batches(RECORD_PASS_COLUMNS, [group]):
                out._route_records(batch)
            counts[j] = [len(out.splits[n]) - b for n, b in zip(task.splits, before)]
        for i, name in enumerate(task.splits):
            out.splits[name].save(Path(task.directory) / f"split-{i}")
        np.save(Path(task.directory) / "group_counts.npy", counts)
        return task.directory
    views: dict[str, SplitViews] = {}
    needs: dict[str, list] = {}
    for i, name in enumerate(task.splits):
        sv = views[name] = SplitViews(Path(task.split_dirs[i]))
        sv._open_at(task.token_offsets[i])
        needs[name] = [np.load(Path(task.split_dirs[i]) / "need.npy", mmap_mode="r"), 0]
    try:
        for j, group in enumerate(task.groups):
            for i, name in enumerate(task.splits):
                needs[name][1] = task.row_offsets[j][i]
            for batch in batches(TOKEN_PASS_COLUMNS, [group]):
                _route_tokens(batch, views, needs)
    finally:
        for sv in views.values():
            sv._close()
    for i, name in enumerate(task.splits):
        if views[name]._tokens != task.tokens[i]:
            raise RuntimeError(f"view spool of {name}: {views[name]._tokens} tokens in row groups {task.groups[:1]}..., "
                               f"{task.tokens[i]} sized (token_views changed while packing?)")
    return task.directory


def _route_tokens(batch: pa.RecordBatch, views: dict, needs: dict) -> None:
    """Write the tokens of each split's needed packable rows of ``batch`` (``needs[split]``: the
    split's need mask and the split row of the batch's first row of it, advanced here)."""
    n, ids, mask, offs = _token_columns(batch)
    for name, rows in _split_rows(batch, set(views)):
        count = int(np.count_nonzero(rows))
        need, at = needs[name]
        take = np.asarray(need[at:at + count], bool)
        needs[name][1] = at + count
        if not take.any():
            continue
        pick = np.flatnonzero(rows)[take]
        if pick.size == n.size:
            views[name]._write_tokens(ids, mask, offs)
            continue
        sel = np.zeros(n.size, bool)
        sel[pick] = True
        tok = np.repeat(sel, n)
        views[name]._write_tokens(ids[tok], mask[tok], offs[tok])
