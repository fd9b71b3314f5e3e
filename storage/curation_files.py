"""Curated partitions as files: how the curate stage's jobs hand their records to the
catalog without writing to it.

A partition's job, wherever it runs, writes its records as one Parquet file of the
catalog's own curation rows (``rows.CURATION_SCHEMA``), whole or not at all, at a local
path or an object-storage URL; the catalog upserts such a file in one set-based
statement, parsing no record.
"""

from __future__ import annotations

import io
from collections.abc import Sequence

import pyarrow as pa
import pyarrow.parquet as pq

from contract import CurationRecord
from storage.errors import CatalogError
from storage.locations import Location, read_whole, write_whole
from storage.rows import CURATION_SCHEMA, curation_row

CURATION_FILE_SUFFIX = ".parquet"


def write_curation_file(records: Sequence[CurationRecord], location: Location) -> None:
    """Write ``records`` as curation rows at ``location``, whole or not at all."""
    table = pa.Table.from_pylist([curation_row(r) for r in records], schema=CURATION_SCHEMA)
    write_whole(location, lambda sink: pq.write_table(table, sink, compression="zstd"))


def read_curation_file(location: Location) -> pa.Table:
    """The curation rows at ``location``; CatalogError naming it when there is no file
    there or it does not hold curation rows."""
    try:
        data = read_whole(location)
    except FileNotFoundError:
        raise CatalogError(
            f"no curated partition at {location}: run the round's curate stage again"
        ) from None
    try:
        table = pq.read_table(io.BytesIO(data))
    except (pa.ArrowInvalid, OSError) as exc:
        raise CatalogError(f"{location} is not a curated partition: {exc}") from None
    if not table.schema.equals(CURATION_SCHEMA):
        raise CatalogError(
            f"{location} is not a curated partition: its columns are "
            f"{', '.join(table.schema.names)}, not {', '.join(CURATION_SCHEMA.names)}"
        )
    return table
