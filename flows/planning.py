"""The generation plan of the next round: from the latest feedback report, or the even mix.

The plan reads only what is stable while a round runs (the report, and the stored tasks
the report names), so rerunning a round after a crash computes the same plan, hence the
same round id, and resumes it.
"""

from __future__ import annotations

from pathlib import Path

from contract import GenerationPlan, default_plan
from curation.planning import PlanningConfig, plan_from_feedback
from flows.settings import FlywheelSettings, planning_config
from storage import Catalog


def next_plan(settings: FlywheelSettings, tasks: int) -> GenerationPlan:
    """The plan for a round of ``tasks`` new tasks under ``settings.round.plan``."""
    if settings.round.plan == "default" or not settings.catalog_path.exists():
        return default_plan(tasks)
    return plan_from_catalog(settings.catalog_path, tasks, planning_config(settings.planning))


def plan_from_catalog(
    path: Path, tasks: int, config: PlanningConfig | None = None
) -> GenerationPlan:
    """From the catalog's latest feedback report, under the rules ``config`` (the
    defaults when None); the even mix while there is none."""
    with Catalog.open(path, read_only=True) as catalog:
        report = catalog.feedback.latest()
        if report is None:
            return default_plan(tasks)
        named = catalog.tasks.with_fingerprints(s.fingerprint for s in report.tasks)
    return plan_from_feedback(report, named, tasks, config)
