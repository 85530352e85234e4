"""dbt-like SQL models: one ``.sql`` file = one model, dependencies from its template expressions.

Templates are ``ref('asset'[, 'table' | 'manifest'])``, ``ref('model')``, ``decisions()`` and
``catalog('table')``; anything else is an error. Each ref is a DuckDB view over the *current*
Parquet versions of every partition (scalar columns only, owner-only tables refused, an empty
relation with the declared columns when nothing is materialized yet); catalog rows are read
through the retrying connection of ``catalog.py``. Errors start with ``file:line``.

Template forms and rules: docs/reports.md#sql-models
"""

from __future__ import annotations

import json
import re
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator, Optional, Union

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from corpus_assets.domain.core.errors import CorpusError
from corpus_assets.domain.layers import registry
from corpus_assets.domain.layers.decisions import DECISIONS_TABLE
from corpus_assets.domain.storage.catalog import Catalog
from corpus_assets.domain.storage.layer_store import UNPARTITIONED, LayerStore

_NAME = r"'([A-Za-z0-9_]+)'"
_REF_RE = re.compile(r"\{\{\s*ref\(\s*" + _NAME + r"\s*(?:,\s*" + _NAME + r"\s*)?\)\s*\}\}")
_CATALOG_RE = re.compile(r"\{\{\s*catalog\(\s*" + _NAME + r"\s*\)\s*\}\}")
_DECISIONS_RE = re.compile(r"\{\{\s*decisions\(\s*\)\s*\}\}")
DECISIONS_VIEW = "decisions__all"
_ANY_TEMPLATE_RE = re.compile(r"\{\{.*?\}\}", re.S)
_LINE_RE = re.compile(r"LINE (\d+):")
_NAME_RE = re.compile(r"^[a-z][a-z0-9_]{0,62}$")

MANIFEST_TABLE = "manifest"  # the virtual per-partition manifest table of every layer ref

# Control-plane tables a model may read, and exactly what it sees of them: ids, statuses, counts
# and times. Free text (requester, reason, status_detail, revocation notes, consumption notes) and
# what a deletion request targets (URI, content digest) never reach a report.
CATALOG_VIEWS: dict[str, str] = {
    "deletion_requests": (
        "SELECT request_id, kind, near_duplicates, near_threshold, received_at, status, generation, updated_at "
        "FROM deletion_requests"
    ),
    "tombstones": "SELECT request_id, generation, scope, record_id, snapshot, source_id, created_at FROM tombstones",
    "release_registry": (
        "SELECT release, build_id, content_digest, status, published_at, revoked_at, successor_build_id, "
        "CAST(coalesce(json_array_length(revocation_json, '$.request_ids'), 0) AS BIGINT) AS revocation_requests, "
        "CAST(coalesce(json_array_length(revocation_json, '$.affected_runs'), 0) AS BIGINT) AS affected_runs "
        "FROM release_registry"
    ),
    "consumption": "SELECT run_id, release, build_id, consumer, consumed_at FROM consumption",
}


class SqlModelError(CorpusError, ValueError):
    """A model that cannot be parsed, resolved or executed; the message starts with file:line."""


@dataclass(frozen=True)
class Ref:
    asset: str
    table: Optional[str]
    line: int


@dataclass(frozen=True)
class CatalogRef:
    table: str
    line: int


@dataclass(frozen=True)
class SqlModel:
    name: str
    path: Path
    sql: str
    refs: tuple[Ref, ...]
    description: str
    catalog_refs: tuple[CatalogRef, ...] = ()

    @property
    def upstream(self) -> list[str]:
        return sorted({r.asset for r in self.refs})

    @property
    def catalog_tables(self) -> list[str]:
        return sorted({c.table for c in self.catalog_refs})


@dataclass(frozen=True)
class Relation:
    """What a ref reads: current Parquet files per partition, or rows held in memory.

    ``schema`` is the declared schema (types of the empty relation and of columns missing from
    older versions); ``columns`` an allow-list (None: every scalar column); ``partition_column``
    the name under which each partition's key is exposed (not added when the table has it)."""

    schema: pa.Schema
    parts: tuple[tuple[str, tuple[Path, ...]], ...] = ()
    partition_column: Optional[str] = None
    columns: Optional[tuple[str, ...]] = None
    rows: Optional[pa.Table] = None
    note: Optional[str] = None  # why the relation is empty, when the resolver knows better


@dataclass
class ModelRun:
    table: pa.Table
    notes: list[str] = field(default_factory=list)


# A resolver returns the Relation of a ref (or, the older form, (files, schema)).
Resolver = Callable[[Ref], Union[Relation, tuple[list[Path], pa.Schema]]]
# A catalog resolver returns the rows of one CATALOG_VIEWS table (already restricted) and a note
# (e.g. "catalog.duckdb does not exist yet") or None.
CatalogResolver = Callable[[str], tuple[pa.Table, Optional[str]]]


def _line_of(sql: str, pos: int) -> int:
    return sql.count("\n", 0, pos) + 1


def parse_model(path: Path) -> SqlModel:
    name = path.stem
    if not _NAME_RE.fullmatch(name):
        raise SqlModelError(f"{path}: model name {name!r} must be lowercase letters, digits and '_'")
    sql = path.read_text(encoding="utf-8")
    refs, catalog_refs = [], []
    for m in _ANY_TEMPLATE_RE.finditer(sql):
        line = _line_of(sql, m.start())
        ref, cat = _REF_RE.fullmatch(m.group(0)), _CATALOG_RE.fullmatch(m.group(0))
        if ref:
            refs.append(Ref(ref.group(1), ref.group(2), line))
        elif _DECISIONS_RE.fullmatch(m.group(0)):
            # every registered layer's decisions table: a ref of each, so deps and checks follow
            refs.extend(Ref(la.asset, DECISIONS_TABLE, line) for la in registry.decision_layers())
        elif cat:
            if cat.group(1) not in CATALOG_VIEWS:
                raise SqlModelError(
                    f"{path}:{line}: catalog({cat.group(1)!r}): unknown catalog table "
                    f"(readable: {', '.join(sorted(CATALOG_VIEWS))})"
                )
            catalog_refs.append(CatalogRef(cat.group(1), line))
        else:
            raise SqlModelError(
                f"{path}:{line}: unsupported template expression {m.group(0)!r}; "
                "only ref('...'), decisions() and catalog('...') are allowed"
            )
    if not refs and not catalog_refs:
        raise SqlModelError(f"{path}:1: a model must read at least one ref('...') or catalog('...')")
    desc_lines = []
    for line in sql.splitlines():
        if line.startswith("--"):
            desc_lines.append(line[2:].strip())
        elif line.strip():
            break
    return SqlModel(name, path, sql, tuple(refs), " ".join(desc_lines) or f"SQL model {name}", tuple(catalog_refs))


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


# --- relations ------------------------------------------------------------------------------


def _scalar(t: pa.DataType) -> bool:
    return not (
        pa.types.is_nested(t)
        or pa.types.is_binary(t)
        or pa.types.is_large_binary(t)
        or pa.types.is_fixed_size_binary(t)
    )


def exposed_schema(rel: Relation) -> pa.Schema:
    """The columns a model sees of a relation: allow-listed, scalar, never raw ``content``; plus the
    partition key column."""
    names = rel.columns if rel.columns is not None else tuple(rel.schema.names)
    fields = [rel.schema.field(n) for n in names if n != "content" and _scalar(rel.schema.field(n).type)]
    if rel.partition_column and rel.partition_column not in {f.name for f in fields}:
        if rel.partition_column in rel.schema.names:  # the table holds it: keep the stored value
            fields.append(rel.schema.field(rel.partition_column))
        else:
            fields.append(pa.field(rel.partition_column, pa.string()))
    return pa.schema(fields)


def _quote_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _quote_str(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def _create_view(con: duckdb.DuckDBPyConnection, view: str, rel: Relation) -> bool:
    """Create ``view``; returns False when the relation is empty because nothing is materialized."""
    schema = exposed_schema(rel)
    cols = ", ".join(_quote_ident(n) for n in schema.names)
    con.register(f"{view}__schema", schema.empty_table())
    if rel.rows is not None:
        rows = rel.rows.select([n for n in schema.names if n in rel.rows.schema.names])
        con.register(f"{view}__rows", rows)
        con.execute(
            f"CREATE VIEW {view} AS SELECT {cols} FROM "
            f"(SELECT * FROM {view}__schema UNION ALL BY NAME SELECT * FROM {view}__rows)"
        )
        return rel.rows.num_rows > 0 or rel.note is None  # a resolver's note explains an empty set of rows
    parts = [(key, files) for key, files in rel.parts if files]
    if not parts:
        con.execute(f"CREATE VIEW {view} AS SELECT {cols} FROM {view}__schema")
        return False
    present: list[str] = []
    file_part: list[tuple[str, str]] = []
    for key, files in parts:
        names = set(pq.read_schema(files[0]).names)  # one version's files share their schema
        present += [n for n in schema.names if n in names and n not in present]
        file_part += [(str(p), key) for p in files]
    pcol = rel.partition_column
    add_key = pcol is not None and pcol not in present and pcol in schema.names
    listing = ", ".join(_quote_str(str(p)) for _, files in parts for p in files)
    data_cols = ", ".join(f"t.{_quote_ident(n)}" for n in present if not (add_key and n == pcol)) or "NULL AS __corpus_none"
    if add_key:
        con.register(f"{view}__parts", pa.table({"file": [f for f, _ in file_part], "part": [k for _, k in file_part]}))
        source = (
            f"SELECT {data_cols}, p.part AS {_quote_ident(pcol)} "
            f"FROM read_parquet([{listing}], union_by_name=true, filename='__corpus_file') AS t "
            f"JOIN {view}__parts AS p ON t.__corpus_file = p.file"
        )
    else:
        source = f"SELECT {data_cols} FROM read_parquet([{listing}], union_by_name=true) AS t"
    con.execute(
        f"CREATE VIEW {view} AS SELECT {cols} FROM (SELECT * FROM {view}__schema UNION ALL BY NAME {source})"
    )
    return True


def _as_relation(value) -> Relation:
    if isinstance(value, Relation):
        return value
    files, schema = value
    return Relation(schema=schema, parts=(("", tuple(files)),))


def _ref_text(ref: Ref) -> str:
    return f"ref('{ref.asset}'" + (f", '{ref.table}'" if ref.table else "") + ")"


def _render(sql: str, pattern: re.Pattern, view: str) -> str:
    # keep the line structure: a template spanning lines leaves its newlines behind
    return pattern.sub(lambda m: view + "\n" * m.group(0).count("\n"), sql)


def run_model(model: SqlModel, resolve: Resolver, resolve_catalog: Optional[CatalogResolver] = None) -> ModelRun:
    """Render the model's templates into DuckDB views and run it; notes say which inputs were empty."""
    con = duckdb.connect()
    notes: list[str] = []
    try:
        rendered = model.sql
        for ref in sorted(set(model.refs), key=lambda r: (r.asset, r.table or "", r.line)):
            view = f"ref__{ref.asset}__{ref.table or 'main'}"
            pattern = re.compile(
                r"\{\{\s*ref\(\s*'" + re.escape(ref.asset) + r"'\s*"
                + (r",\s*'" + re.escape(ref.table) + r"'\s*" if ref.table else "")
                + r"\)\s*\}\}"
            )
            if view not in {v[0] for v in con.execute("SELECT view_name FROM duckdb_views()").fetchall()}:
                try:
                    rel = _as_relation(resolve(ref))
                except (KeyError, PermissionError, FileNotFoundError) as exc:
                    msg = exc.args[0] if exc.args else str(exc)
                    raise SqlModelError(f"{model.path}:{ref.line}: {_ref_text(ref)}: {msg}") from None
                if not _create_view(con, view, rel):
                    notes.append(rel.note or f"{_ref_text(ref)}: nothing materialized yet (no current version of any "
                                             f"partition of {ref.asset}); read as an empty table")
            rendered = _render(rendered, pattern, view)
        if _DECISIONS_RE.search(rendered):
            _create_decisions_view(con)
            rendered = _render(rendered, _DECISIONS_RE, DECISIONS_VIEW)
        for cref in sorted(set(model.catalog_refs), key=lambda c: (c.table, c.line)):
            view = f"catalog__{cref.table}"
            pattern = re.compile(r"\{\{\s*catalog\(\s*'" + re.escape(cref.table) + r"'\s*\)\s*\}\}")
            if view not in {v[0] for v in con.execute("SELECT view_name FROM duckdb_views()").fetchall()}:
                if resolve_catalog is None:
                    raise SqlModelError(f"{model.path}:{cref.line}: catalog('{cref.table}'): no catalog is configured")
                try:
                    rows, note = resolve_catalog(cref.table)
                except (KeyError, PermissionError, FileNotFoundError, duckdb.Error) as exc:
                    raise SqlModelError(f"{model.path}:{cref.line}: catalog('{cref.table}'): {exc}") from None
                _create_view(con, view, Relation(schema=rows.schema, rows=rows))
                if note:
                    notes.append(f"catalog('{cref.table}'): {note}")
            rendered = _render(rendered, pattern, view)
        try:
            table = con.sql(rendered).to_arrow_table()
        except duckdb.Error as exc:
            msg = str(exc)
            first = msg.strip().splitlines()[0] if msg.strip() else type(exc).__name__
            raise SqlModelError(f"{model.path}:{_error_line(msg, model.sql)}: {first}") from None
        return ModelRun(table, sorted(set(notes)))
    finally:
        con.close()


def _create_decisions_view(con: duckdb.DuckDBPyConnection) -> None:
    """``decisions()``: the decisions of every registered layer in one relation, in data-flow
    order, with the layer's name, its position (``step``), its partitioning and the partition key."""
    parts = []
    for step, la in enumerate(registry.LAYERS, 1):
        if la not in registry.decision_layers():
            continue
        view = f"ref__{la.asset}__{DECISIONS_TABLE}"
        parts.append(
            f"SELECT {_quote_str(la.asset)} AS layer, {step} AS step, {_quote_str(la.partitioning.value)} AS partitioning, "
            f"{_quote_ident(la.partition_column)} AS partition, * FROM {view}"
        )
    con.execute(f"CREATE VIEW {DECISIONS_VIEW} AS " + " UNION ALL BY NAME ".join(parts))


def render_and_run(model: SqlModel, resolve: Resolver, resolve_catalog: Optional[CatalogResolver] = None) -> pa.Table:
    return run_model(model, resolve, resolve_catalog).table


# --- catalog --------------------------------------------------------------------------------


@contextmanager
def _memory_connection() -> Iterator[duckdb.DuckDBPyConnection]:
    conn = duckdb.connect()
    try:
        yield conn
    finally:
        conn.close()


def read_catalog_table(catalog: Optional[Catalog], table: str) -> pa.Table:
    """The rows of ``CATALOG_VIEWS[table]`` as Arrow, copied out in one short transaction (the
    catalog's retrying connection waits while another process writes). ``catalog=None`` gives the
    empty table with the same columns (no catalog file yet)."""
    if table not in CATALOG_VIEWS:
        raise KeyError(f"unknown catalog table {table!r} (readable: {', '.join(sorted(CATALOG_VIEWS))})")
    cat = catalog if catalog is not None else Catalog(_memory_connection)
    with cat.transaction() as conn:
        return conn.sql(CATALOG_VIEWS[table]).to_arrow_table()


def catalog_resolver(path: Path | str) -> CatalogResolver:
    """Resolve ``catalog('table')`` against the catalog file at ``path``; a missing file reads as
    empty tables with a note (reports never create the catalog)."""
    path = Path(path)

    def resolve(table: str) -> tuple[pa.Table, Optional[str]]:
        if not path.is_file():
            return read_catalog_table(None, table), f"{path.name} does not exist yet; read as an empty table"
        return read_catalog_table(Catalog.at(path), table), None

    return resolve


# --- resolving refs against the layer store ---------------------------------------------------

RESULT_TABLE = "result"  # a model's stored result (one table, unpartitioned)
# catalog table -> the asset whose materializations write it (a dependency of models reading it)
CATALOG_WRITERS: dict[str, Optional[str]] = {
    "release_registry": registry.RELEASE_MANIFEST,
    "consumption": registry.RELEASE_MANIFEST,
    "deletion_requests": None,  # written by the deletion_requests sensor, not by an asset
    "tombstones": None,
}
_MANIFEST_BASE = ("layout_version", "asset", "partition", "version", "content_digest", "tables", "build_spec")


def ref_layer(asset: str) -> Optional[registry.Layer]:
    """The registered layer a model may ref under this name, else None."""
    return registry.layer(asset) if registry.is_layer(asset) and registry.layer(asset).refable else None


def _ref_tables(layer: registry.Layer) -> dict[str, registry.Table]:
    """The tables a ref may name: the readable ones, and the private ones (to refuse them by name)."""
    return {name: t for name, t in layer.tables.items() if t.readable or t.private}


def check_ref(ref: Ref, models: set[str]) -> None:
    """Raise KeyError / PermissionError for a ref no model may use (unknown asset, unreadable or
    owner-only table)."""
    layer = ref_layer(ref.asset)
    if layer is None:
        if ref.asset in models:
            if ref.table not in (None, RESULT_TABLE):
                raise KeyError(f"model {ref.asset} has only the table {RESULT_TABLE!r}")
            return
        raise KeyError(f"unknown asset or model {ref.asset!r}")
    table = ref.table or layer.main_table
    if table == MANIFEST_TABLE:
        return
    tables = _ref_tables(layer)
    if table not in tables:
        raise KeyError(f"{ref.asset} has no readable table {table!r} (tables: {', '.join(sorted(tables))}, {MANIFEST_TABLE})")
    if tables[table].private:
        raise PermissionError(f"{ref.asset}.{table} is owner-only and cannot be read by report models")


def check_models(models: list[SqlModel]) -> None:
    """Every ref of every model resolves (names the file and line of the first that does not)."""
    names = {m.name for m in models}
    for m in models:
        for r in m.refs:
            try:
                check_ref(r, names)
            except (KeyError, PermissionError) as exc:
                raise SqlModelError(f"{m.path}:{r.line}: {exc.args[0]}") from None


def _manifest_relation(store: LayerStore, asset: str, layer: registry.Layer) -> Relation:
    pcol = layer.partition_column
    schema = pa.schema([(pcol, pa.string()), ("version", pa.string()), ("content_digest", pa.string()),
                        ("rows_json", pa.string()), ("build_spec_json", pa.string()), ("extra_json", pa.string())])
    rows = []
    for part in store.partitions(asset):
        v = store.current(asset, part)
        if v is None:
            continue
        m = v.manifest
        rows.append({
            pcol: part, "version": v.version, "content_digest": v.content_digest,
            "rows_json": json.dumps({t: meta["rows"] for t, meta in m["tables"].items()}, sort_keys=True),
            "build_spec_json": json.dumps(m.get("build_spec", {}), sort_keys=True),
            "extra_json": json.dumps({k: val for k, val in m.items() if k not in _MANIFEST_BASE}, sort_keys=True),
        })
    note = None if rows else f"ref('{asset}', '{MANIFEST_TABLE}'): nothing materialized yet; read as an empty table"
    return Relation(schema=schema, rows=pa.Table.from_pylist(rows, schema=schema), note=note)


def make_resolver(store: LayerStore, models: dict[str, SqlModel]) -> Resolver:
    """Resolve refs to the current versions of registered layers and the stored results of models."""
    def resolve(ref: Ref) -> Relation:
        check_ref(ref, set(models))
        layer = ref_layer(ref.asset)
        if layer is not None:
            table = ref.table or layer.main_table
            if table == MANIFEST_TABLE:
                return _manifest_relation(store, ref.asset, layer)
            parts = []
            for part in store.partitions(ref.asset):
                files = store.current_files(ref.asset, table, [part])
                if files:
                    parts.append((part, tuple(files)))
            t = layer.tables[table]
            return Relation(schema=t.schema, parts=tuple(parts), partition_column=layer.partition_column, columns=t.columns)
        version = store.current(ref.asset, UNPARTITIONED)
        if version is None:
            raise FileNotFoundError(f"model {ref.asset} has not been materialized yet")
        files = version.table_files(RESULT_TABLE)
        return Relation(schema=pq.read_schema(files[0]), parts=((UNPARTITIONED, tuple(files)),))

    return resolve
