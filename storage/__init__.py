"""Storage: the DuckDB catalog, Parquet shards and the artifact store."""

from storage.artifacts import ArtifactStore
from storage.catalog import CarriedItems, Catalog, DatasetSummary, RoundInfo
from storage.errors import CatalogError, UnknownIdError
from storage.feedback import FeedbackSummary
from storage.ingest import IngestReport
from storage.migrations import SCHEMA_VERSION
from storage.shards import (
    ShardInfo,
    list_shards,
    read_trajectory_shard,
    shard_complete,
    shard_info,
    write_trajectory_shard,
)

__all__ = [
    "SCHEMA_VERSION",
    "ArtifactStore",
    "CarriedItems",
    "Catalog",
    "CatalogError",
    "DatasetSummary",
    "FeedbackSummary",
    "IngestReport",
    "RoundInfo",
    "ShardInfo",
    "UnknownIdError",
    "list_shards",
    "read_trajectory_shard",
    "shard_complete",
    "shard_info",
    "write_trajectory_shard",
]
