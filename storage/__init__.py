"""Storage: the catalog's stores (in one DuckDB file), Parquet shards and the artifact store."""

from storage.artifacts import ArtifactStore
from storage.catalog import Catalog
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
from storage.stores import (
    BalanceRow,
    CarriedItems,
    DatasetStore,
    DatasetSummary,
    FeedbackStore,
    MemberTask,
    ModelRegistry,
    ReviewStore,
    RoundInfo,
    RoundStore,
    TaskStore,
    TrajectoryStore,
)

__all__ = [
    "SCHEMA_VERSION",
    "ArtifactStore",
    "BalanceRow",
    "CarriedItems",
    "Catalog",
    "CatalogError",
    "DatasetStore",
    "DatasetSummary",
    "FeedbackStore",
    "FeedbackSummary",
    "IngestReport",
    "MemberTask",
    "ModelRegistry",
    "ReviewStore",
    "RoundInfo",
    "RoundStore",
    "ShardInfo",
    "TaskStore",
    "TrajectoryStore",
    "UnknownIdError",
    "list_shards",
    "read_trajectory_shard",
    "shard_complete",
    "shard_info",
    "write_trajectory_shard",
]
