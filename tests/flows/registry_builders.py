"""Registered tiny models on one development set, for the deployment and loop tests.

An untrained tiny model scores 0 on every development task, so no model trained here in
seconds is better than another. ``register_tiny`` therefore registers real tiny weights
with a report that stands for an evaluation with the given score: the real report of a
measured tiny model on the catalog's development set (its tasks, costs and counts), with
its success rates set to ``overall``. The deployment flow reuses a registered report made
under the candidate's harness on that set, so the gate then compares those scores.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from contract import FeedbackReport, ModelRecord, TaskSpec
from storage import Catalog
from tests.training.builders import frozen_dataset, train_tasks
from training.evaluate import ensure_development_set
from training.settings import TrainRequest
from training.trainer import Curves, TrainingData, evaluate_model, load_base, prepare, register

DEV_TASKS = 4
EPOCH = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


@dataclass(frozen=True)
class Registry:
    """A state folder with a frozen dataset, a development set and a measured report."""

    home: Path
    request: TrainRequest
    data: TrainingData
    dev: tuple[TaskSpec, ...]
    measured: FeedbackReport

    @property
    def catalog_path(self) -> Path:
        return self.home / "catalog.duckdb"


def registry_home(home: Path) -> Registry:
    """``home`` with a dataset version, a development set of ``DEV_TASKS`` tasks and the
    real evaluation of a tiny model on it under a small harness."""
    dataset = frozen_dataset(home, train_tasks("toggle_phone_setting", 2))
    request = TrainRequest.of(
        {
            "dataset_id": dataset.version.id,
            "method": "sft",
            "rl": {"max_steps": 2, "max_new_tokens": 8},
            "dev_tasks": DEV_TASKS,
        }
    )
    with Catalog.open(dataset.catalog_path) as catalog:
        data = prepare(catalog, home, request)  # its tokenizer corpus: the export's rows
        dev = ensure_development_set(catalog, request.dev_tasks, request.dev_seed)
    measured = evaluate_model(load_base(request, data), dev, request, "measured").report
    return Registry(home, request, data, tuple(dev), measured)


def scored(report: FeedbackReport, overall: float, model: str) -> FeedbackReport:
    """``report`` with every measured capability's success, and the Overall, at ``overall``."""
    values = report.model_dump(mode="json") | {
        "id": "",
        "model": model,
        "overall": overall,
        "capability_scores": dict.fromkeys((c.value for c in report.capability_scores), overall),
    }
    return FeedbackReport.model_validate(values)


def register_tiny(registry: Registry, name: str, *, overall: float, seed: int) -> ModelRecord:
    """Tiny weights from ``seed`` registered as ``name`` with a report at ``overall``."""
    created_at = EPOCH + timedelta(minutes=seed)
    request = registry.request.model_copy(update={"seed": seed})
    with Catalog.open(registry.catalog_path) as catalog:
        return register(
            catalog,
            registry.home,
            load_base(request, registry.data),
            request,
            name,
            created_at,
            Curves(None, None),
            scored(registry.measured, overall, name),
        )
