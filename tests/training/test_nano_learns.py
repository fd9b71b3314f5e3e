"""The nano base learns from a few templates' rows in minutes on a CPU: on held-out
parameter draws of those templates it calls the function the goal asks for and copies
the values the goal gives (by reference: ``training.value_refs``), so it solves tasks the
untrained model never does (README, "The nano base")."""

from __future__ import annotations

from pathlib import Path

import pytest

from agents.runner import run_episode
from contract import Outcome, TaskSpec, ToolCall
from envs.sandbox import MobileSandbox
from envs.sandbox.templates.catalog import instantiate, template_named
from storage import Catalog
from tests.training.builders import frozen_dataset, train_tasks
from training.base_model import NANO, BaseModel
from training.chat_model import LocalChatModel
from training.settings import TrainRequest
from training.sft import run_sft
from training.trainer import load_base, prepare

TEMPLATES = ("log_workout_today", "start_kitchen_timer", "set_labelled_alarm")


def held_out(trained: set[str], per_template: int) -> list[TaskSpec]:
    """Draws of ``TEMPLATES`` whose fingerprints the training rows do not hold."""
    sandbox = MobileSandbox()
    tasks: list[TaskSpec] = []
    for name in TEMPLATES:
        found: dict[str, TaskSpec] = {}
        for seed in range(20_000, 24_000):
            task = instantiate(template_named(name), seed, sandbox)
            if task.fingerprint not in trained:
                found.setdefault(task.fingerprint, task)
            if len(found) == per_template:
                break
        tasks += found.values()
    return tasks


def greedy_episodes(base: BaseModel, tasks: list[TaskSpec]) -> tuple[int, int]:
    """Of greedy episodes of ``tasks``: how many first called the reference plan's first
    function, and how many the verifier passed."""
    policy = LocalChatModel(
        base.model, base.tokenizer, name=NANO, temperature=0.0, max_new_tokens=48
    )
    sandbox = MobileSandbox()
    right = solved = 0
    for task in tasks:
        trajectory = run_episode(task, sandbox, policy, max_steps=3)
        steps = trajectory.steps
        first, wanted = steps[0].action if steps else None, task.reference_plan[0]
        right += (
            isinstance(first, ToolCall)
            and isinstance(wanted, ToolCall)
            and first.tool == wanted.tool
        )
        solved += trajectory.metadata.outcome is Outcome.SUCCESS
    return right, solved


@pytest.mark.slow
def test_nano_learns_to_solve_held_out_draws_of_its_templates(tmp_path: Path) -> None:
    tasks = [t for name in TEMPLATES for t in train_tasks(name, 40)]
    dataset = frozen_dataset(tmp_path, tasks)
    request = TrainRequest.of(
        {
            "dataset_id": dataset.version.id,
            "base": NANO,
            "sft": {"epochs": 10, "learning_rate": 3e-3, "batch_size": 4},
        }
    )
    with Catalog.open(dataset.catalog_path) as catalog:
        data = prepare(catalog, tmp_path, request)
    base = load_base(request, data)
    tests = held_out({t.fingerprint for t in tasks}, per_template=4)
    assert len(tests) >= 2 * len(TEMPLATES)

    before = greedy_episodes(base, tests)
    run_sft(base, data.sft, request.sft, tmp_path / "sft")
    right, solved = greedy_episodes(base, tests)

    assert before == (0, 0)
    assert right >= 0.75 * len(tests), f"{right} of {len(tests)} first calls right"
    assert solved >= 0.75 * len(tests), f"{solved} of {len(tests)} held-out draws solved"
