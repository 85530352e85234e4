"""Search every byte under a data root for a text, in every form the project stores it.

Deletion tests use it to show that a purged text is nowhere: not in raw bytes (JSON-escaped or
not), not in any Parquet column once decoded (strings, binaries, token-id lists decoded with each
tokenizer found), not in any DuckDB table, not in any Megatron shard decoded with each tokenizer.
Whitespace is ignored when comparing decoded text, since a BPE round trip may change spacing.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from typing import Iterable

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
from tokenizers import Tokenizer

from megatron_format_reader import read_indexed_dataset


def squash(text: str) -> str:
    return "".join(text.split())


def tokenizers_under(home: Path, extra: Iterable[Path] = ()) -> list[Tokenizer]:
    """Every tokenizer the data root holds (the tokenizer layer's ``tokenizer_json``) and ``extra`` files."""
    found: dict[str, Tokenizer] = {}
    for p in extra:
        found.setdefault(Path(p).read_text(), Tokenizer.from_file(str(p)))
    for f in sorted(home.rglob("*.parquet")):
        try:
            schema = pq.read_schema(f)
        except (OSError, pa.ArrowInvalid):
            continue
        if "tokenizer_json" in schema.names:
            for text in pq.read_table(f, columns=["tokenizer_json"]).column(0).to_pylist():
                if text:
                    found.setdefault(text, Tokenizer.from_str(text))
    return list(found.values())


def _texts_of_column(col: pa.ChunkedArray, tokenizers: list[Tokenizer]) -> Iterable[str]:
    t = col.type
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        yield from (v for v in col.to_pylist() if v)
    elif pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
        yield from (v.decode("utf-8", "replace") for v in col.to_pylist() if v)
    elif (pa.types.is_list(t) or pa.types.is_large_list(t)) and pa.types.is_integer(t.value_type):
        for ids in col.to_pylist():
            if ids:
                for tok in tokenizers:
                    yield _decode(tok, ids)


def _decode(tok: Tokenizer, ids: list[int]) -> str:
    size = tok.get_vocab_size(with_added_tokens=True)
    return tok.decode([i for i in ids if 0 <= i < size], skip_special_tokens=False)


def _parquet_texts(path: Path, tokenizers: list[Tokenizer]) -> Iterable[str]:
    table = pq.read_table(path)
    for name in table.column_names:
        yield from _texts_of_column(table.column(name), tokenizers)


def _duckdb_texts(path: Path) -> Iterable[str]:
    with tempfile.TemporaryDirectory() as tmp:  # a copy: never contend with a writer's lock
        copy = Path(tmp) / path.name
        shutil.copyfile(path, copy)
        wal = path.with_name(path.name + ".wal")
        if wal.exists():
            shutil.copyfile(wal, copy.with_name(copy.name + ".wal"))
        conn = duckdb.connect(str(copy))
        try:
            cols = conn.execute(
                "SELECT table_schema, table_name, column_name, data_type FROM information_schema.columns "
                "WHERE data_type IN ('VARCHAR', 'BLOB', 'JSON')").fetchall()
            for schema, table, column, dtype in cols:
                for (v,) in conn.execute(f'SELECT "{column}" FROM "{schema}"."{table}" WHERE "{column}" IS NOT NULL').fetchall():
                    yield v.decode("utf-8", "replace") if isinstance(v, (bytes, bytearray)) else str(v)
        finally:
            conn.close()


def _shard_texts(bin_path: Path, tokenizers: list[Tokenizer]) -> Iterable[str]:
    data = read_indexed_dataset(bin_path.with_suffix(""))
    for i in range(len(data)):
        ids = [int(x) for x in data.sequence(i)]
        for tok in tokenizers:
            yield _decode(tok, ids)


def find_text(home: Path, needles: Iterable[str], tokenizers: list[Tokenizer]) -> dict[str, set[str]]:
    """``{relative path: {how}}`` of every file under ``home`` that holds one of ``needles``:
    ``bytes`` (the plain or JSON-escaped UTF-8), ``parquet``, ``duckdb`` or ``shard`` (decoded)."""
    needles = list(needles)
    plain = [n.encode() for n in needles] + [json.dumps(n)[1:-1].encode() for n in needles]
    squashed = [squash(n) for n in needles]
    hits: dict[str, set[str]] = {}

    def hit(path: Path, how: str) -> None:
        hits.setdefault(str(path.relative_to(home)), set()).add(how)

    def any_in(texts: Iterable[str]) -> bool:
        return any(any(s in squash(t) for s in squashed) for t in texts)

    for path in sorted(home.rglob("*")):
        if not path.is_file() or path.is_symlink():
            continue
        data = path.read_bytes()
        if any(p in data for p in plain):
            hit(path, "bytes")
        if path.suffix == ".parquet":
            if any_in(_parquet_texts(path, tokenizers)):
                hit(path, "parquet")
        elif path.suffix == ".duckdb":
            if any_in(_duckdb_texts(path)):
                hit(path, "duckdb")
        elif path.suffix == ".bin" and path.with_suffix(".idx").is_file():
            if any_in(_shard_texts(path, tokenizers)):
                hit(path, "shard")
    return hits
