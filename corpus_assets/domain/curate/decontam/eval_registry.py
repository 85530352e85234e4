"""The frozen registry of protected evaluation items, named by its digest.

Before curation, the evaluation side hands over the benchmark items the training data must not
contain; every curated version and release manifest records the registry digest, so anyone can tell
which benchmarks a release was checked against. Input: benchmark JSONL files, one protected text
per (benchmark, item id, field); texts are kept exactly as given and sorted, so the digest changes
whenever a protected text does and never with file order. Registry files are owner-only and
re-verified on read. Format and rules: docs/curation.md#the-eval-registry
"""

from __future__ import annotations

import gzip
import io
import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Optional, Sequence

from corpus_assets.domain.core.errors import CorpusError
from corpus_assets.domain.core.atomic_files import atomic_write_bytes
from corpus_assets.domain.core.hashing import canonical_json, sha256_bytes

__all__ = [
    "DEFAULT_FIELDS",
    "REGISTRY_FORMAT",
    "BenchmarkFormatError",
    "RegistryIntegrityError",
    "EvalItem",
    "EvalRegistry",
    "load_benchmark_jsonl",
    "build_registry",
    "write_registry",
    "read_registry",
]

DEFAULT_FIELDS: tuple[str, ...] = ("question", "answer", "solution")
REGISTRY_FORMAT = "corpus.eval_registry/1"
_DIGEST_META_KEY = b"corpus.eval_registry.digest"
_FORMAT_META_KEY = b"corpus.eval_registry.format"
_MAX_NAME_LEN = 256


class BenchmarkFormatError(CorpusError, ValueError):
    """A benchmark file (or a registry built from several) is malformed; the message says where."""


class RegistryIntegrityError(CorpusError, ValueError):
    """A registry file's content does not match the digest it records."""


@dataclass(frozen=True, order=True)
class EvalItem:
    """One protected text field of one benchmark item."""

    benchmark: str
    item_id: str
    field: str
    text: str

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.benchmark, self.item_id, self.field)

    def as_dict(self) -> dict[str, str]:
        return {"benchmark": self.benchmark, "item_id": self.item_id, "field": self.field, "text": self.text}


def _registry_digest(items: Sequence[EvalItem]) -> str:
    return sha256_bytes(canonical_json([it.as_dict() for it in items]))


@dataclass(frozen=True)
class EvalRegistry:
    """Immutable, sorted set of protected items and the digest that names it.

    ``EvalRegistry(items)`` sorts the items, refuses duplicate ``(benchmark, item_id, field)``
    keys and computes the digest; there is no way to build one whose digest disagrees with its
    items.
    """

    items: tuple[EvalItem, ...]
    digest: str = field(init=False)

    def __post_init__(self) -> None:
        items = tuple(sorted(self.items, key=lambda it: it.key))
        for it in items:
            if not isinstance(it, EvalItem):
                raise TypeError(f"EvalRegistry holds EvalItem objects, got {type(it).__name__}")
        for a, b in zip(items, items[1:]):
            if a.key == b.key:
                raise BenchmarkFormatError(f"duplicate registry item {a.key!r}")
        object.__setattr__(self, "items", items)
        object.__setattr__(self, "digest", _registry_digest(items))

    def __len__(self) -> int:
        return len(self.items)

    def benchmarks(self) -> dict[str, int]:
        """Protected items per benchmark: distinct item ids (an item may protect several fields)."""
        ids = {(it.benchmark, it.item_id) for it in self.items}
        return dict(sorted(Counter(b for b, _ in ids).items()))

    def fields_per_benchmark(self) -> dict[str, dict[str, int]]:
        """Protected texts per benchmark and field."""
        out: dict[str, Counter] = {}
        for it in self.items:
            out.setdefault(it.benchmark, Counter())[it.field] += 1
        return {b: dict(sorted(c.items())) for b, c in sorted(out.items())}


# ------------------------------------------------------------------------------------------------
# benchmark JSONL


def _open_text_lines(path: Path) -> Iterator[tuple[int, bytes]]:
    opener = gzip.open if path.name.endswith(".gz") else open
    try:
        with opener(path, "rb") as fh:
            for lineno, raw in enumerate(fh, start=1):
                yield lineno, raw
    except (OSError, EOFError) as exc:
        if isinstance(exc, FileNotFoundError):
            raise BenchmarkFormatError(f"{path}: benchmark file not found") from exc
        raise BenchmarkFormatError(f"{path}: cannot read benchmark file: {exc}") from exc


def _check_name(where: str, what: str, value: object) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise BenchmarkFormatError(f"{where}: {what} must be a string, got {type(value).__name__}")
    text = str(value)
    if not text.strip():
        raise BenchmarkFormatError(f"{where}: {what} is empty")
    if len(text) > _MAX_NAME_LEN:
        raise BenchmarkFormatError(f"{where}: {what} is longer than {_MAX_NAME_LEN} characters")
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in text):
        raise BenchmarkFormatError(f"{where}: {what} contains control characters")
    return text


def _load_located(
    path: Path, benchmark: Optional[str], fields: Sequence[str]
) -> list[tuple[EvalItem, str]]:
    """Items of one benchmark file, each with its ``file:line`` location."""
    path = Path(path)
    fields = tuple(fields)
    if not fields:
        raise ValueError("at least one protected field is required")
    if benchmark is not None:
        benchmark = _check_name(str(path), "benchmark argument", benchmark)
    out: list[tuple[EvalItem, str]] = []
    seen: dict[tuple[str, str, str], str] = {}
    for lineno, raw in _open_text_lines(path):
        where = f"{path}:{lineno}"
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise BenchmarkFormatError(f"{where}: not valid UTF-8 ({exc.reason} at byte {exc.start})") from exc
        if lineno == 1:
            line = line.removeprefix("\ufeff")
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise BenchmarkFormatError(f"{where}: invalid JSON: {exc.msg} (column {exc.colno})") from exc
        if not isinstance(row, dict):
            raise BenchmarkFormatError(f"{where}: a row must be a JSON object, got {type(row).__name__}")
        row_bench = row.get("benchmark")
        if row_bench is None:
            if benchmark is None:
                raise BenchmarkFormatError(f"{where}: missing 'benchmark' (and no benchmark given for the file)")
            bench = benchmark
        else:
            bench = _check_name(where, "'benchmark'", row_bench)
            if benchmark is not None and bench != benchmark:
                raise BenchmarkFormatError(
                    f"{where}: row says benchmark {bench!r} but the file was loaded as {benchmark!r}"
                )
        if "item_id" not in row or row["item_id"] is None:
            raise BenchmarkFormatError(f"{where}: missing 'item_id'")
        item_id = _check_name(where, "'item_id'", row["item_id"])
        protected = 0
        for fname in fields:
            value = row.get(fname)
            if value is None:
                continue
            if not isinstance(value, str):
                raise BenchmarkFormatError(
                    f"{where}: field {fname!r} of item {item_id!r} must be a string, got {type(value).__name__}"
                )
            if not value.strip():
                continue
            item = EvalItem(bench, item_id, fname, value)
            if item.key in seen:
                raise BenchmarkFormatError(f"{where}: duplicate item {item.key!r} (first at {seen[item.key]})")
            seen[item.key] = where
            out.append((item, where))
            protected += 1
        if protected == 0:
            raise BenchmarkFormatError(
                f"{where}: item {item_id!r} has none of the protected fields {list(fields)} (or all are blank)"
            )
    return out


def load_benchmark_jsonl(
    path: Path | str,
    *,
    benchmark: Optional[str] = None,
    fields: Sequence[str] = DEFAULT_FIELDS,
) -> list[EvalItem]:
    """The protected items of one benchmark JSONL file, in file order (see docs/curation.md#the-eval-registry)."""
    return [item for item, _ in _load_located(Path(path), benchmark, fields)]


def build_registry(files: Sequence[Path | str], fields: Sequence[str] = DEFAULT_FIELDS) -> EvalRegistry:
    """One registry from several benchmark files; a key seen twice (in any files) is an error."""
    seen: dict[tuple[str, str, str], str] = {}
    items: list[EvalItem] = []
    for f in files:
        for item, where in _load_located(Path(f), None, fields):
            if item.key in seen:
                raise BenchmarkFormatError(f"{where}: duplicate item {item.key!r} (first at {seen[item.key]})")
            seen[item.key] = where
            items.append(item)
    return EvalRegistry(tuple(items))


# ------------------------------------------------------------------------------------------------
# registry files




def _is_parquet(path: Path) -> bool:
    return path.suffix.lower() in (".parquet", ".pq")


def write_registry(registry: EvalRegistry, path: Path | str) -> Path:
    """Write the registry (Parquet for ``.parquet``, JSONL otherwise), atomically and owner-only."""
    path = Path(path)
    if _is_parquet(path):
        import pyarrow as pa
        import pyarrow.parquet as pq

        schema = pa.schema(
            [("benchmark", pa.string()), ("item_id", pa.string()), ("field", pa.string()), ("text", pa.string())],
            metadata={_DIGEST_META_KEY: registry.digest.encode(), _FORMAT_META_KEY: REGISTRY_FORMAT.encode()},
        )
        cols = list(zip(*[(i.benchmark, i.item_id, i.field, i.text) for i in registry.items])) or [[], [], [], []]
        table = pa.Table.from_arrays([pa.array(list(c), pa.string()) for c in cols], schema=schema)
        buf = io.BytesIO()
        pq.write_table(table, buf, compression="zstd")
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(path, buf.getvalue(), mode=0o600)
    else:
        header = {"format": REGISTRY_FORMAT, "digest": registry.digest, "items": len(registry.items)}
        lines = [json.dumps(header, sort_keys=True, ensure_ascii=False)]
        lines += [json.dumps(it.as_dict(), sort_keys=True, ensure_ascii=False) for it in registry.items]
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(path, ("\n".join(lines) + "\n").encode("utf-8"), mode=0o600)
    return path


def read_registry(path: Path | str) -> EvalRegistry:
    """Read a registry file and verify its recorded digest against its content."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: registry file not found")
    if _is_parquet(path):
        import pyarrow.parquet as pq

        table = pq.read_table(path)
        meta = table.schema.metadata or {}
        if meta.get(_FORMAT_META_KEY) != REGISTRY_FORMAT.encode() or _DIGEST_META_KEY not in meta:
            raise RegistryIntegrityError(f"{path}: not a {REGISTRY_FORMAT} file (no format/digest metadata)")
        recorded = meta[_DIGEST_META_KEY].decode()
        cols = {name: table.column(name).to_pylist() for name in ("benchmark", "item_id", "field", "text")}
        items = [EvalItem(*row) for row in zip(cols["benchmark"], cols["item_id"], cols["field"], cols["text"])]
        expected_count = len(items)
    else:
        with open(path, "rb") as fh:
            lines = fh.read().decode("utf-8").splitlines()
        if not lines:
            raise RegistryIntegrityError(f"{path}:1: empty registry file (no header)")
        try:
            header = json.loads(lines[0])
        except json.JSONDecodeError as exc:
            raise RegistryIntegrityError(f"{path}:1: invalid header: {exc.msg}") from exc
        if not isinstance(header, dict) or header.get("format") != REGISTRY_FORMAT or "digest" not in header:
            raise RegistryIntegrityError(f"{path}:1: not a {REGISTRY_FORMAT} file")
        recorded = header["digest"]
        expected_count = header.get("items")
        items = []
        for lineno, line in enumerate(lines[1:], start=2):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                items.append(EvalItem(str(row["benchmark"]), str(row["item_id"]), str(row["field"]), str(row["text"])))
            except (json.JSONDecodeError, KeyError, TypeError) as exc:
                raise RegistryIntegrityError(f"{path}:{lineno}: malformed registry row ({exc})") from exc
    try:
        registry = EvalRegistry(tuple(items))
    except BenchmarkFormatError as exc:
        raise RegistryIntegrityError(f"{path}: {exc}") from exc
    if expected_count is not None and expected_count != len(registry.items):
        raise RegistryIntegrityError(f"{path}: header says {expected_count} items, file holds {len(registry.items)}")
    if registry.digest != recorded:
        raise RegistryIntegrityError(
            f"{path}: content digest {registry.digest} does not match the recorded digest {recorded}"
        )
    return registry
