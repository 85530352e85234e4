"""An independent reader of the Megatron-LM ``IndexedDataset`` (.idx/.bin, "MMIDIDX") format, for tests.

Written from the format as megatron-core publishes it (megatron/core/datasets/indexed_dataset.py:
``_INDEX_HEADER``, ``DType``, ``_IndexWriter.write`` / ``_IndexReader``), deliberately without
importing ``corpus_assets.domain.pack.shards``, so a test comparing what this reads with the input
blocks checks our writer against the format, not against itself.

.idx, little-endian::

    9 bytes   b"MMIDIDX\\x00\\x00"
    <Q        version (1)
    <B        dtype code: 1 uint8, 2 int8, 3 int16, 4 int32, 5 int64, 6 float64, 7 float32, 8 uint16
    <Q        sequence count N
    <Q        document count D (length of the document-index array; first entry 0, last entry N)
    int32[N]  sequence lengths (in items)
    int64[N]  sequence pointers (byte offsets into .bin)
    int64[D]  document indices (sequence index where each document starts; ends with N)
    int8[N]   sequence modes — only for multimodal datasets (not read here)

.bin: the sequences' items in the dtype above, at the given byte offsets.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

HEADER = b"MMIDIDX\x00\x00"
CODES = {1: "u1", 2: "i1", 3: "<i2", 4: "<i4", 5: "<i8", 6: "<f8", 7: "<f4", 8: "<u2"}


@dataclass
class IndexedData:
    dtype: np.dtype
    lengths: np.ndarray
    pointers: np.ndarray
    document_indices: np.ndarray
    bin_path: Path

    def __len__(self) -> int:
        return len(self.lengths)

    def sequence(self, i: int) -> np.ndarray:
        with open(self.bin_path, "rb") as f:
            f.seek(int(self.pointers[i]))
            raw = f.read(int(self.lengths[i]) * self.dtype.itemsize)
        return np.frombuffer(raw, dtype=self.dtype)


def read_indexed_dataset(prefix: str | Path) -> IndexedData:
    prefix = str(prefix)
    raw = Path(prefix + ".idx").read_bytes()
    if raw[:9] != HEADER:
        raise ValueError("bad header")
    pos = 9
    (version,) = struct.unpack("<Q", raw[pos : pos + 8])
    pos += 8
    if version != 1:
        raise ValueError(f"bad version {version}")
    code = raw[pos]
    pos += 1
    dtype = np.dtype(CODES[code])
    n_seq, n_doc = struct.unpack("<QQ", raw[pos : pos + 16])
    pos += 16
    lengths = np.frombuffer(raw, dtype="<i4", count=n_seq, offset=pos)
    pos += 4 * n_seq
    pointers = np.frombuffer(raw, dtype="<i8", count=n_seq, offset=pos)
    pos += 8 * n_seq
    docs = np.frombuffer(raw, dtype="<i8", count=n_doc, offset=pos)
    pos += 8 * n_doc
    if pos != len(raw):
        raise ValueError(f"{len(raw) - pos} trailing bytes in the index (multimodal modes?)")
    return IndexedData(dtype, lengths, pointers, docs, Path(prefix + ".bin"))
