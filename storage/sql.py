"""Small helpers over a DuckDB connection, shared by the catalog's modules."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

import duckdb
import pyarrow as pa

RECENT = 5
"""How many existing ids an unknown-id error lists."""


def now() -> datetime:
    """Naive UTC: the catalog's TIMESTAMP columns hold UTC."""
    return datetime.now(UTC).replace(tzinfo=None)


def utc(value: datetime | None) -> datetime | None:
    """A TIMESTAMP read back, marked as the UTC it is."""
    return value.replace(tzinfo=UTC) if value is not None else None


def dicts(con: duckdb.DuckDBPyConnection, query: str, params: Sequence[Any] = ()) -> list[Any]:
    """Rows of a read-only ``query`` as dicts (``list[Any]`` so callers index them freely)."""
    relation = con.sql(query, params=list(params))
    if relation is None:
        return []
    rows: list[Any] = relation.to_arrow_table().to_pylist()
    return rows


def shared_rows(table: pa.Table, distinct: Iterable[str] = ()) -> list[tuple[Any, ...]]:
    """Rows of ``table`` as tuples in column order, in which equal values of a column share
    one object, except in the ``distinct`` columns (ids: every value differs). A column of
    a few categories then costs a pointer per row, not a string: balancing 19,938
    trajectories took 0.085 GB as plain rows, 0.064 GB so."""
    unique = set(distinct)
    columns: list[list[Any]] = []
    for name in table.column_names:
        values = table.column(name).to_pylist()
        if name not in unique:
            seen: dict[Any, Any] = {}
            values = [seen.setdefault(v, v) for v in values]
        columns.append(values)
    return list(zip(*columns, strict=True))


def scalar(con: duckdb.DuckDBPyConnection, query: str, params: Sequence[Any] = ()) -> int:
    """The one integer a statement returns: a count, or the rows an INSERT or UPDATE
    touched (0 for none)."""
    rows = con.execute(query, list(params)).fetchall()
    return int(rows[0][0]) if rows and rows[0][0] is not None else 0


def insert_rows(
    con: duckdb.DuckDBPyConnection,
    table: str,
    rows: Sequence[Mapping[str, Any]],
    schema: pa.Schema,
    conflict: str = "DO NOTHING",
) -> int:
    """Insert ``rows`` (the columns of ``schema``) in one set-based statement through
    Arrow; the number of rows added or changed."""
    if not rows:
        return 0
    return insert_table(con, table, pa.Table.from_pylist(list(rows), schema=schema), conflict)


def insert_table(
    con: duckdb.DuckDBPyConnection, table: str, rows: pa.Table, conflict: str = "DO NOTHING"
) -> int:
    """Insert the Arrow table ``rows`` (columns named as ``table``'s) in one set-based
    statement; the number of rows added or changed."""
    if not rows.num_rows:
        return 0
    columns = ", ".join(rows.schema.names)
    with registered(con, "_batch", rows):
        return scalar(
            con,
            f"INSERT INTO {table} ({columns}) SELECT {columns} FROM _batch ON CONFLICT {conflict}",
        )


@contextmanager
def registered(con: duckdb.DuckDBPyConnection, name: str, table: pa.Table) -> Iterator[None]:
    """``table`` queryable as ``name`` inside the block (unregistered however it ends)."""
    con.register(name, table)
    try:
        yield
    finally:
        con.unregister(name)


def ids_table(ids: Sequence[str]) -> pa.Table:
    """One string column ``id``: what ``WHERE x IN (SELECT id FROM ...)`` reads."""
    return pa.table({"id": pa.array(list(ids), pa.string())})


def recent_ids(con: duckdb.DuckDBPyConnection, table: str, column: str = "id") -> list[str]:
    """The last ``RECENT`` ids written to ``table``, newest first."""
    rows = con.execute(
        f"SELECT {column} FROM {table} ORDER BY rowid DESC LIMIT {RECENT}"
    ).fetchall()
    return [str(row[0]) for row in rows]


def unique(rows: Iterable[dict[str, Any]], key: str) -> list[dict[str, Any]]:
    """One row per key, the last one winning: a batch must not conflict with itself."""
    return list({row[key]: row for row in rows}.values())
