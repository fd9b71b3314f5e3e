"""Comparing a candidate with the champion: the harness a registered model carries, when
its registered report stands for an evaluation, and the rows of the comparison."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import pytest

from contract import (
    Capability,
    FeedbackReport,
    InvalidInputError,
    ModelRecord,
    TaskSpec,
    TrainingMethod,
)
from envs.sandbox import MobileSandbox
from envs.sandbox.templates.catalog import instantiate, sample_tasks, template_named
from training.care import Budget
from training.comparison import CHAT_FORMAT, Harness, capability_rows, report_for, reusable
from training.settings import TrainRequest

EXAMPLE = Path(__file__).parents[2] / "docs" / "examples" / "feedback-report.json"
T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
SMALL = {
    "rl": {
        "max_steps": 3,
        "max_new_tokens": 12,
        "max_context": 512,
        "token_weight": 0.25,
        "token_budget": 40,
    },
    "eval_samples": 2,
}
SMALL_HARNESS = Harness(
    max_steps=3,
    samples=2,
    max_new_tokens=12,
    max_context=512,
    token_weight=0.25,
    token_budget=40,
)


def _hyperparameters(values: dict[str, Any]) -> dict[str, Any]:
    """What ``training.trainer.register`` stores of a request."""
    request = TrainRequest.of({"dataset_id": "ds-00000000000000000abc", "method": "sft", **values})
    return request.model_dump(mode="json", exclude={"dataset_id", "base", "method"})


def _record(values: dict[str, Any], **changes: Any) -> ModelRecord:
    fields: dict[str, Any] = {
        "name": "mobile-planner-r1",
        "dataset_id": "ds-00000000000000000abc",
        "base": "tiny",
        "method": TrainingMethod.SFT,
        "hyperparameters": _hyperparameters(values),
        "path": "/nonexistent/models/mobile-planner-r1",
        "created_at": T0,
    }
    return ModelRecord(**(fields | changes))


def _report(
    scores: dict[str, float], overall: float | None, fingerprints: list[str]
) -> FeedbackReport:
    data = orjson.loads(EXAMPLE.read_bytes())
    tasks = [
        {"fingerprint": f, "attempts": 2, "successes": 1, "mean_cost": 0.2} for f in fingerprints
    ]
    data |= {"capability_scores": scores, "overall": overall, "tasks": tasks}
    return FeedbackReport.model_validate(data)


@pytest.fixture(scope="module")
def dev() -> list[TaskSpec]:
    """Three tasks of distinct fingerprints."""
    tasks = {t.fingerprint: t for t in sample_tasks(12, 3, MobileSandbox())}
    found = list(tasks.values())[:3]
    assert len(found) == 3
    return found


def _measured(tasks: list[TaskSpec]) -> FeedbackReport:
    return _report({"tool_use": 0.5}, 0.25, [t.fingerprint for t in tasks])


def test_the_harness_is_read_from_the_training_request() -> None:
    assert Harness.of_model(_record(SMALL)) == SMALL_HARNESS
    # How it was trained is no part of how it is evaluated.
    trained_otherwise = {**SMALL, "sft": {"max_steps": 5}, "seed": 3, "dev_tasks": 2}
    assert Harness.of_model(_record(trained_otherwise)) == SMALL_HARNESS
    assert SMALL_HARNESS.budget_for(_task(9)) == Budget(output_tokens=40, tool_calls=3)


def _task(max_steps: int | None) -> TaskSpec:
    task = instantiate(template_named("text_contact"), 1, MobileSandbox())
    return TaskSpec.model_validate(task.model_dump() | {"id": "", "max_steps": max_steps})


def test_without_a_token_budget_an_episode_may_spend_every_reply() -> None:
    values = {"rl": {"max_steps": 4, "max_new_tokens": 10}}
    harness = Harness.of_model(_record(values))
    assert harness.budget_for(_task(9)) == Budget(output_tokens=40, tool_calls=4)  # 10 x 4


def test_without_a_step_override_each_task_keeps_its_own_budget() -> None:
    harness = Harness.of_model(_record({"rl": {"max_new_tokens": 10}}))
    assert harness.max_steps is None
    assert harness.budget_for(_task(9)) == Budget(output_tokens=90, tool_calls=9)
    assert harness.budget_for(_task(None)) == Budget(output_tokens=150, tool_calls=15)


def test_a_record_with_no_hyperparameters_has_the_default_harness() -> None:
    harness = Harness.of_model(_record({}, hyperparameters={}))
    assert harness == Harness(
        max_steps=None,
        samples=1,
        max_new_tokens=96,
        max_context=8192,
        token_weight=0.5,
        token_budget=None,
    )


def test_the_harness_does_not_need_the_base_the_model_started_from() -> None:
    record = _record(SMALL, base="/gone/base-model", method=TrainingMethod.SFT_RL)
    assert Harness.of_model(record) == SMALL_HARNESS


def test_the_harness_as_the_trace_records_it() -> None:
    assert SMALL_HARNESS.to_json() == {
        "max_steps": 3,
        "samples": 2,
        "max_new_tokens": 12,
        "max_context": 512,
        "token_weight": 0.25,
        "token_budget": 40,
        "policy": "greedy local model",
        "chat_format": CHAT_FORMAT,
    }


def test_a_report_is_reusable_for_the_same_harness_and_the_same_tasks(
    dev: list[TaskSpec],
) -> None:
    report = _measured(dev)
    assert reusable(report, SMALL_HARNESS, SMALL_HARNESS, dev)
    assert reusable(report, SMALL_HARNESS, SMALL_HARNESS, list(reversed(dev)))  # any order


def test_a_report_is_not_reusable_otherwise(dev: list[TaskSpec]) -> None:
    report = _measured(dev)
    longer = Harness.of_model(_record({**SMALL, "eval_samples": 3}))
    assert not reusable(None, SMALL_HARNESS, SMALL_HARNESS, dev)
    assert not reusable(report, SMALL_HARNESS, longer, dev)
    assert not reusable(report, longer, SMALL_HARNESS, dev)
    assert not reusable(report, SMALL_HARNESS, SMALL_HARNESS, dev[:2])  # a task it has more
    assert not reusable(_measured(dev[:2]), SMALL_HARNESS, SMALL_HARNESS, dev)  # one missing
    assert not reusable(_measured([]), SMALL_HARNESS, SMALL_HARNESS, dev)


def test_a_reusable_report_is_returned_without_an_evaluation(dev: list[TaskSpec]) -> None:
    record = _record(SMALL)  # its folder does not exist: evaluating it would fail
    report = _measured(dev)
    assert report_for(record, report, SMALL_HARNESS, dev) == (report, True)


def test_a_gone_folder_is_refused_naming_the_model(dev: list[TaskSpec]) -> None:
    record = _record(SMALL)
    report = _measured(dev)
    other = Harness.of_model(_record({**SMALL, "eval_samples": 3}))
    for registered, harness, reevaluate in [
        (None, SMALL_HARNESS, False),
        (report, other, False),
        (report, SMALL_HARNESS, True),  # reusable, but asked to evaluate again
    ]:
        with pytest.raises(InvalidInputError) as refused:
            report_for(record, registered, harness, dev, reevaluate=reevaluate)
        assert refused.value.field == "model"
        assert record.id in str(refused.value) and record.path in str(refused.value)


def test_a_file_where_the_folder_was_is_refused_too(tmp_path: Path, dev: list[TaskSpec]) -> None:
    path = tmp_path / "model"
    path.write_text("not a folder")
    with pytest.raises(InvalidInputError, match="is gone") as refused:
        report_for(_record(SMALL, path=str(path)), None, SMALL_HARNESS, dev)
    assert refused.value.field == "model"


def test_capability_rows_against_a_champion() -> None:
    candidate = _report({"tool_use": 0.6, "memory": 0.4}, 0.5, ["fp-" + "1" * 20])
    champion = _report({"tool_use": 0.5, "skills": 0.3}, 0.4, ["fp-" + "1" * 20])
    assert capability_rows(candidate, champion) == [
        {"capability": "memory", "candidate": 0.4, "champion": None},
        {"capability": "skills", "candidate": None, "champion": 0.3},
        {"capability": "tool_use", "candidate": 0.6, "champion": 0.5},
        {"capability": "overall", "candidate": 0.5, "champion": 0.4},
    ]


def test_capability_rows_without_a_champion() -> None:
    candidate = _report(
        {"tool_use": 0.6, "subagent": 0.1, "skills": 0.2, "memory": 0.4}, 0.5, ["fp-" + "1" * 20]
    )
    rows = capability_rows(candidate, None)
    assert [r["capability"] for r in rows] == [
        "memory",
        "skills",
        "subagent",
        "tool_use",
        "overall",
    ]
    assert [r["candidate"] for r in rows] == [0.4, 0.2, 0.1, 0.6, 0.5]
    assert all(r["champion"] is None for r in rows)


def test_capability_rows_of_an_unmeasured_candidate() -> None:
    candidate = _report({}, None, [])
    champion = _report({"memory": 0.3}, None, [])
    assert capability_rows(candidate, champion) == [
        {"capability": Capability.MEMORY.value, "candidate": None, "champion": 0.3},
        {"capability": "overall", "candidate": None, "champion": None},
    ]


def test_a_model_the_trainer_did_not_register_is_refused_naming_the_model() -> None:
    record = _record({}, hyperparameters={"learning_rate": 2e-5, "lora": None})
    with pytest.raises(InvalidInputError) as caught:
        Harness.of_model(record)
    assert caught.value.field == "model"
    assert record.id in str(caught.value) and "learning_rate" in str(caught.value)
