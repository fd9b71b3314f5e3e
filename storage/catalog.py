"""The DuckDB catalog: one file that holds every store.

``Catalog.open`` opens the file once (creating and upgrading it) and gives one narrow store
per subject on the same connection helper: ``rounds``, ``tasks``, ``trajectories``,
``reviews``, ``datasets``, ``feedback`` and ``models``. Code that needs one subject takes
that store's protocol (``storage.stores``), not the catalog.
"""

from __future__ import annotations

from pathlib import Path
from types import TracebackType
from typing import Self

from storage.connection import DEFAULT_LOCK_WAIT_S, CatalogFile
from storage.dataset_store import DuckDBDatasetStore
from storage.feedback_store import DuckDBFeedbackStore
from storage.model_registry import DuckDBModelRegistry
from storage.review_store import DuckDBReviewStore
from storage.round_store import DuckDBRoundStore
from storage.sql import scalar
from storage.stores import (
    DatasetStore,
    FeedbackStore,
    ModelRegistry,
    ReviewStore,
    RoundStore,
    TaskStore,
    TrajectoryStore,
)
from storage.task_store import DuckDBTaskStore
from storage.trajectory_store import DuckDBTrajectoryStore

TABLES = (
    "rounds",
    "tasks",
    "rejected_tasks",
    "trajectories",
    "steps",
    "verdicts",
    "curations",
    "reviews",
    "dataset_versions",
    "dataset_members",
    "dataset_approvals",
    "shards",
    "carry_over",
    "feedback_reports",
    "feedback_tasks",
    "models",
    "model_aliases",
    "model_alias_history",
    "deployments",
    "goal_sketches",
)


class Catalog:
    """The stores of one DuckDB catalog file. Build it with ``Catalog.open``."""

    rounds: RoundStore
    tasks: TaskStore
    trajectories: TrajectoryStore
    reviews: ReviewStore
    datasets: DatasetStore
    feedback: FeedbackStore
    models: ModelRegistry

    def __init__(self, file: CatalogFile) -> None:
        self._file = file
        self.rounds = DuckDBRoundStore(file)
        self.tasks = DuckDBTaskStore(file)
        self.trajectories = DuckDBTrajectoryStore(file)
        self.reviews = DuckDBReviewStore(file)
        self.datasets = DuckDBDatasetStore(file)
        self.feedback = DuckDBFeedbackStore(file)
        self.models = DuckDBModelRegistry(file)

    @classmethod
    def open(
        cls, path: Path, *, read_only: bool = False, lock_wait_s: float = DEFAULT_LOCK_WAIT_S
    ) -> Catalog:
        """Open the catalog at ``path``, creating and upgrading it unless ``read_only``.

        Raises CatalogError for a missing file (read-only), an unwritable folder, a file
        that is not a catalog, a schema newer than this code, or a file that another
        process holds for longer than ``lock_wait_s`` (it holds it for one operation).
        """
        return cls(CatalogFile.open(path, read_only=read_only, lock_wait_s=lock_wait_s))

    @property
    def path(self) -> Path:
        return self._file.path

    @property
    def read_only(self) -> bool:
        return self._file.read_only

    @property
    def lock_wait_s(self) -> float:
        return self._file.lock_wait_s

    def stats(self) -> dict[str, int]:
        """Rows per table."""
        with self._file.read() as con:
            return {table: scalar(con, f"SELECT count(*) FROM {table}") for table in TABLES}

    def close(self) -> None:
        """Refuse further operations (no connection is held between operations)."""
        self._file.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
