"""Columns of stored records, shared by Parquet shards and the catalog.

A trajectory is split into one trajectory row (with its verdict), one row per step and
its task spec. Columns that queries filter on are typed; the parts a record is rebuilt
from are kept as canonical JSON, so a rebuilt record equals the original.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

import orjson
import pyarrow as pa

from contract import (
    TRUSTED_IDS,
    CurationRecord,
    DatasetVersion,
    RejectedTask,
    Review,
    TaskSpec,
    Trajectory,
    canonical_json,
)

_TEXT = pa.string()
_TEXTS = pa.list_(pa.string())

STEP_TYPE = pa.struct(
    [
        ("idx", pa.int32()),
        ("action_kind", _TEXT),
        ("target", _TEXT),
        ("action", _TEXT),
        ("model_output", _TEXT),
        ("observation", _TEXT),
        ("feedback", _TEXT),
        ("error_kind", _TEXT),
        ("input_tokens", pa.int32()),
        ("output_tokens", pa.int32()),
        ("injected_fault", _TEXT),
        ("artifacts", _TEXTS),
    ]
)

TASK_FIELDS: list[tuple[str, pa.DataType]] = [
    ("id", _TEXT),
    ("fingerprint", _TEXT),
    ("template", _TEXT),
    ("split", _TEXT),
    ("difficulty", _TEXT),
    ("capabilities", _TEXTS),
    ("domains", _TEXTS),
    ("source", _TEXT),
    ("goal", _TEXT),
    ("round_id", _TEXT),
    ("spec", _TEXT),
]
TASK_SCHEMA = pa.schema(TASK_FIELDS)

TRAJECTORY_FIELDS: list[tuple[str, pa.DataType]] = [
    ("id", _TEXT),
    ("round_id", _TEXT),
    ("task_id", _TEXT),
    ("shard", _TEXT),
    ("attempt", pa.int32()),
    ("device", _TEXT),
    ("policy", _TEXT),
    ("policy_version", _TEXT),
    ("model", _TEXT),
    ("backend", _TEXT),
    ("outcome", _TEXT),
    ("termination", _TEXT),
    ("failure_attribution", _TEXT),
    ("recovered", pa.bool_()),
    ("injected_faults", _TEXTS),
    ("n_steps", pa.int32()),
    ("tool_calls", pa.int32()),
    ("input_tokens", pa.int64()),
    ("output_tokens", pa.int64()),
    ("latency_ms", pa.float64()),
    ("usd", pa.float64()),
    ("seed", pa.int64()),
    ("metadata", _TEXT),
    ("cost", _TEXT),
]
"""Columns of the catalog's ``trajectories`` table."""
TRAJECTORY_COLUMNS = [name for name, _ in TRAJECTORY_FIELDS]
STEP_COLUMNS = [field.name for field in STEP_TYPE]

VERDICT_FIELDS: list[tuple[str, pa.DataType]] = [
    ("passed", pa.bool_()),
    ("score", pa.float64()),
    ("progress", pa.float64()),
    ("checks", _TEXT),
]

SHARD_SCHEMA = pa.schema(
    [
        *TRAJECTORY_FIELDS,
        *VERDICT_FIELDS,
        ("steps", pa.list_(STEP_TYPE)),
        ("task", pa.struct(TASK_FIELDS)),
    ]
)
"""One row per trajectory: its columns, its verdict, its steps nested, and its task spec
on the first row of the shard that uses the task (null on the others)."""


REJECTION_SCHEMA = pa.schema(
    [
        (name, _TEXT)
        for name in ("id", "round_id", "fingerprint", "template", "reason", "detail", "goal")
    ]
)
CURATION_SCHEMA = pa.schema(
    [
        ("trajectory_id", _TEXT),
        ("round_id", _TEXT),
        ("task_id", _TEXT),
        ("kept", pa.bool_()),
        ("drop_reason", _TEXT),
        ("routing", _TEXT),
        ("suggested", _TEXT),
        ("quality", pa.float64()),
        ("supported", pa.bool_()),
        ("failure_attribution", _TEXT),
        ("record", _TEXT),
    ]
)
REVIEW_SCHEMA = pa.schema(
    [
        ("id", _TEXT),
        ("trajectory_id", _TEXT),
        ("round_id", _TEXT),
        ("decision", _TEXT),
        ("reviewer", _TEXT),
        ("automatic", pa.bool_()),
        ("record", _TEXT),
        ("created_at", pa.timestamp("us")),
    ]
)
MEMBER_SCHEMA = pa.schema(
    [
        ("dataset_id", _TEXT),
        ("trajectory_id", _TEXT),
        ("task_id", _TEXT),
        ("weight", pa.float64()),
        ("position", pa.int32()),
        ("decision", _TEXT),
        ("human", pa.bool_()),
        ("masked_steps", pa.list_(pa.int32())),
        ("correction", _TEXT),
    ]
)
SHARD_RECORD_SCHEMA = pa.schema(
    [
        ("path", _TEXT),
        ("round_id", _TEXT),
        ("trajectories", pa.int32()),
        ("steps", pa.int32()),
        ("ingested_at", pa.timestamp("us")),
    ]
)
"""Columns of the catalog's ``shards`` table."""


def json_text(value: Any) -> str:
    """Canonical JSON text (sorted keys), as the catalog stores it."""
    return canonical_json(value).decode()


def _value(member: Any) -> Any:
    """An enum's value, or None."""
    return member.value if member is not None else None


def task_row(task: TaskSpec, round_id: str | None) -> dict[str, Any]:
    """The ``tasks`` row of a task first constructed in ``round_id``."""
    return {
        "id": task.id,
        "fingerprint": task.fingerprint,
        "template": task.template,
        "split": task.split.value,
        "difficulty": task.difficulty.value,
        "capabilities": [c.value for c in task.capabilities],
        "domains": list(task.domains),
        "source": task.source.value,
        "goal": task.goal,
        "round_id": round_id,
        "spec": task.to_json().decode(),
    }


def task_row_of_spec(spec: bytes, round_id: str | None) -> dict[str, Any]:
    """``task_row`` from a spec already serialized by ``TaskSpec.to_json`` (its id was
    derived when it was built), without validating it into a record again."""
    task = orjson.loads(spec)
    return {
        "id": task["id"],
        "fingerprint": task["fingerprint"],
        "template": task.get("template"),
        "split": task["split"],
        "difficulty": task["difficulty"],
        "capabilities": list(task["capabilities"]),
        "domains": list(task["domains"]),
        "source": task["source"],
        "goal": task["goal"],
        "round_id": round_id,
        "spec": spec.decode(),
    }


def step_rows(trajectory: Trajectory) -> list[dict[str, Any]]:
    """The ``steps`` rows of a trajectory (without ``trajectory_id``)."""
    rows = []
    for step in trajectory.steps:
        feedback = step.feedback
        rows.append(
            {
                "idx": step.index,
                "action_kind": step.action.kind if step.action is not None else None,
                "target": step.action.target if step.action is not None else None,
                "action": step.action.to_json().decode() if step.action is not None else None,
                "model_output": step.model_output,
                "observation": step.observation,
                "feedback": feedback.to_json().decode(),
                "error_kind": _value(feedback.error.kind if feedback.error is not None else None),
                "input_tokens": step.input_tokens,
                "output_tokens": step.output_tokens,
                "injected_fault": _value(step.injected_fault),
                "artifacts": list(step.artifacts),
            }
        )
    return rows


def trajectory_row(trajectory: Trajectory, shard: str | None) -> dict[str, Any]:
    """The ``trajectories`` row of a trajectory, with its verdict columns."""
    meta = trajectory.metadata
    cost = trajectory.cost
    verdict = trajectory.verdict
    return {
        "id": trajectory.id,
        "round_id": meta.round,
        "task_id": trajectory.task.id,
        "shard": shard,
        "attempt": meta.attempt,
        "device": meta.device,
        "policy": meta.policy.name,
        "policy_version": meta.policy.version,
        "model": meta.policy.model,
        "backend": meta.backend,
        "outcome": meta.outcome.value,
        "termination": meta.termination.value,
        "failure_attribution": _value(meta.failure_attribution),
        "recovered": meta.recovered,
        "injected_faults": [f.value for f in meta.injected_faults],
        "n_steps": len(trajectory.steps),
        "tool_calls": cost.tool_calls,
        "input_tokens": cost.input_tokens,
        "output_tokens": cost.output_tokens,
        "latency_ms": cost.latency_ms,
        "usd": cost.usd,
        "seed": meta.seed,
        "metadata": meta.to_json().decode(),
        "cost": cost.to_json().decode(),
        "passed": verdict.passed,
        "score": verdict.score,
        "progress": verdict.progress,
        "checks": json_text([c.model_dump(mode="json") for c in verdict.checks]),
    }


def _step(row: Mapping[str, Any]) -> dict[str, Any]:
    action = row["action"]
    return {
        "index": row["idx"],
        "observation": row["observation"],
        "model_output": row["model_output"],
        "action": orjson.loads(action) if action is not None else None,
        "feedback": orjson.loads(row["feedback"]),
        "input_tokens": row["input_tokens"],
        "output_tokens": row["output_tokens"],
        "injected_fault": row["injected_fault"],
        "artifacts": row["artifacts"],
    }


def rebuild_trajectory(
    row: Mapping[str, Any],
    task: TaskSpec,
    steps: Iterable[Mapping[str, Any]],
    *,
    verify_id: bool = True,
) -> Trajectory:
    """The exact trajectory of a row, its task and its step rows (in index order).

    Validation recomputes the content id, so a row that drifted from its id is refused;
    ``verify_id=False`` skips that (a third of the cost) for bulk reads.
    """
    return Trajectory.model_validate(
        {
            "id": row["id"],
            "task": task,
            "steps": [_step(s) for s in steps],
            "verdict": {
                "passed": row["passed"],
                "score": row["score"],
                "progress": row["progress"],
                "checks": orjson.loads(row["checks"]),
            },
            "cost": orjson.loads(row["cost"]),
            "metadata": orjson.loads(row["metadata"]),
        },
        context=None if verify_id else {TRUSTED_IDS: True},
    )


def group_steps(
    rows: Sequence[Mapping[str, Any]], key: str = "trajectory_id"
) -> dict[str, list[Mapping[str, Any]]]:
    """Step rows grouped by trajectory id, in the order given."""
    groups: dict[str, list[Mapping[str, Any]]] = {}
    for row in rows:
        groups.setdefault(row[key], []).append(row)
    return groups


def rejection_row(rejection: RejectedTask) -> dict[str, Any]:
    return {name: getattr(rejection, name) for name in REJECTION_SCHEMA.names} | {
        "reason": rejection.reason.value
    }


def curation_row(record: CurationRecord) -> dict[str, Any]:
    return {
        "trajectory_id": record.trajectory_id,
        "round_id": record.round_id,
        "task_id": record.task_id,
        "kept": record.kept,
        "drop_reason": _value(record.drop_reason),
        "routing": record.routing.value,
        "suggested": record.suggested.value,
        "quality": record.quality,
        "supported": record.supported,
        "failure_attribution": _value(record.failure_attribution),
        "record": record.to_json().decode(),
    }


def review_row(review: Review, created_at: datetime) -> dict[str, Any]:
    return {
        "id": review.id,
        "trajectory_id": review.trajectory_id,
        "round_id": review.round_id,
        "decision": review.decision.value,
        "reviewer": review.reviewer,
        "automatic": review.automatic,
        "record": review.to_json().decode(),
        "created_at": created_at,
    }


def member_rows(version: DatasetVersion) -> list[dict[str, Any]]:
    """The ``dataset_members`` rows of a version; ``position`` keeps the members' order."""
    return [
        {
            "dataset_id": version.id,
            "trajectory_id": m.trajectory_id,
            "task_id": m.task_id,
            "weight": m.weight,
            "position": i,
            "decision": m.decision.value,
            "human": m.human,
            "masked_steps": list(m.masked_steps),
            "correction": m.correction,
        }
        for i, m in enumerate(version.members)
    ]


def dataset_record_json(version: DatasetVersion) -> str:
    """The version without its members (they are rows of ``dataset_members``)."""
    return json_text(version.model_dump(mode="json", exclude={"members"}))
