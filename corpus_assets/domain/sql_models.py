"""dbt-like SQL models: one ``.sql`` file = one model, dependencies from ``{{ ref('...') }}``.

``{{ ref('asset') }}`` names an asset's main table, ``{{ ref('asset', 'table') }}`` another table
of it, and ``{{ ref('model') }}`` another SQL model's stored result. Each ref becomes a DuckDB
view over the *current* Parquet versions (every partition), so models always read complete
versions. Private tables (raw bytes, quarantine, private references) cannot be referenced.
Errors name the file and line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

import duckdb
import pyarrow as pa

_REF_RE = re.compile(r"\{\{\s*ref\(\s*'([A-Za-z0-9_]+)'\s*(?:,\s*'([A-Za-z0-9_]+)'\s*)?\)\s*\}\}")
_ANY_TEMPLATE_RE = re.compile(r"\{\{.*?\}\}", re.S)
_LINE_RE = re.compile(r"LINE (\d+):")
_NAME_RE = re.compile(r"^[a-z][a-z0-9_]{0,62}$")


class SqlModelError(ValueError):
    """A model that cannot be parsed, resolved or executed; the message starts with file:line."""


@dataclass(frozen=True)
class Ref:
    asset: str
    table: Optional[str]
    line: int


@dataclass(frozen=True)
class SqlModel:
    name: str
    path: Path
    sql: str
    refs: tuple[Ref, ...]
    description: str

    @property
    def upstream(self) -> list[str]:
        return sorted({r.asset for r in self.refs})


def parse_model(path: Path) -> SqlModel:
    name = path.stem
    if not _NAME_RE.fullmatch(name):
        raise SqlModelError(f"{path}: model name {name!r} must be lowercase letters, digits and '_'")
    sql = path.read_text(encoding="utf-8")
    refs = []
    for m in _REF_RE.finditer(sql):
        refs.append(Ref(m.group(1), m.group(2), sql.count("\n", 0, m.start()) + 1))
    for m in _ANY_TEMPLATE_RE.finditer(sql):
        if not _REF_RE.fullmatch(m.group(0)):
            line = sql.count("\n", 0, m.start()) + 1
            raise SqlModelError(f"{path}:{line}: unsupported template expression {m.group(0)!r}; only ref('...') is allowed")
    if not refs:
        raise SqlModelError(f"{path}:1: a model must read at least one ref('...')")
    desc_lines = []
    for line in sql.splitlines():
        if line.startswith("--"):
            desc_lines.append(line[2:].strip())
        elif line.strip():
            break
    return SqlModel(name, path, sql, tuple(refs), " ".join(desc_lines) or f"SQL model {name}")


def discover_models(folder: Path) -> list[SqlModel]:
    models = [parse_model(p) for p in sorted(Path(folder).glob("*.sql"))]
    names = {m.name for m in models}
    for m in models:
        if m.name in m.upstream:
            ref = next(r for r in m.refs if r.asset == m.name)
            raise SqlModelError(f"{m.path}:{ref.line}: a model cannot ref itself")
    _check_acyclic(models, names)
    return models


def _check_acyclic(models: list[SqlModel], names: set[str]) -> None:
    graph = {m.name: [u for u in m.upstream if u in names] for m in models}
    state: dict[str, int] = {}

    def visit(n: str, stack: list[str]) -> None:
        if state.get(n) == 1:
            raise SqlModelError(f"dbt_like_sql: cycle between models: {' -> '.join(stack + [n])}")
        if state.get(n) == 2:
            return
        state[n] = 1
        for u in graph[n]:
            visit(u, stack + [n])
        state[n] = 2

    for n in graph:
        visit(n, [])


def _error_line(message: str, sql: str) -> str:
    """Line of a DuckDB error: its own LINE marker (parser errors) or where the quoted name occurs."""
    m = _LINE_RE.search(message)
    if m:
        return m.group(1)
    first = message.splitlines()[0] if message else ""
    for name in re.findall(r'"([^"]+)"', first):
        word = re.compile(r"(?<![A-Za-z0-9_])" + re.escape(name) + r"(?![A-Za-z0-9_])")
        for i, line in enumerate(sql.splitlines(), 1):
            if word.search(line.split("--", 1)[0]):
                return str(i)
    return "?"


# A resolver returns (files, schema) for a ref: the current Parquet files and the table's schema
# (used to create an empty relation when nothing is materialized yet).
Resolver = Callable[[Ref], tuple[list[Path], pa.Schema]]


def render_and_run(model: SqlModel, resolve: Resolver) -> pa.Table:
    con = duckdb.connect()
    try:
        rendered = model.sql
        for ref in sorted(set(model.refs), key=lambda r: (r.asset, r.table or "")):
            try:
                files, schema = resolve(ref)
            except (KeyError, PermissionError, FileNotFoundError) as exc:
                raise SqlModelError(f"{model.path}:{ref.line}: ref('{ref.asset}'{', ' + repr(ref.table) if ref.table else ''}): {exc}") from None
            view = f"ref__{ref.asset}__{ref.table or 'main'}"
            if files:
                listing = ", ".join("'" + str(p).replace("'", "''") + "'" for p in files)
                drop = [n for n in schema.names if n in ("content",)]
                exclude = f" EXCLUDE ({', '.join(drop)})" if drop else ""
                con.execute(f"CREATE VIEW {view} AS SELECT *{exclude} FROM read_parquet([{listing}], union_by_name=true)")
            else:
                empty = pa.schema([f for f in schema if f.name != "content"]).empty_table()
                con.register(f"{view}__empty", empty)
                con.execute(f"CREATE VIEW {view} AS SELECT * FROM {view}__empty")
            pattern = re.compile(
                r"\{\{\s*ref\(\s*'" + re.escape(ref.asset) + r"'\s*"
                + (r",\s*'" + re.escape(ref.table) + r"'\s*" if ref.table else "")
                + r"\)\s*\}\}"
            )
            rendered = pattern.sub(view, rendered)
        try:
            return con.sql(rendered).to_arrow_table()
        except duckdb.Error as exc:
            msg = str(exc)
            first = msg.strip().splitlines()[0] if msg.strip() else type(exc).__name__
            raise SqlModelError(f"{model.path}:{_error_line(msg, model.sql)}: {first}") from None
    finally:
        con.close()
