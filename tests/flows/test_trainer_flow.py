"""The trainer flow against the real Prefect server, as a user runs it: a round, then
``flywheel train`` on the version it froze, then the next plan reads the training report."""

from __future__ import annotations

import base64
import subprocess
from pathlib import Path

import pytest

from storage import Catalog
from tests.flows.commands import FLYWHEEL, command_env, flywheel_json, run_round
from tests.flows.prefect_api import post
from tests.training.builders import frozen_dataset, train_tasks

TINY_TRAINING = (
    "--set",
    "sft.max_steps=3",
    "--set",
    "sft.batch_size=1",
    "--set",
    "rl.updates=1",
    "--set",
    "rl.group_size=2",
    "--set",
    "rl.tasks_per_update=1",
    "--set",
    "rl.max_steps=2",
    "--set",
    "rl.max_new_tokens=16",
    "--set",
    "rl.probe_tasks=0",  # the tiny model gives RL no signal: run its plumbing anyway
    "--set",
    "dev_tasks=4",
)


def _fails(home: Path, api: str, *args: str) -> str:
    result = subprocess.run(
        [FLYWHEEL, "train", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env=command_env(home, api),
        check=False,
    )
    assert result.returncode == 1, result.stdout + result.stderr
    return result.stderr


@pytest.mark.slow
def test_train_registers_a_model_and_the_next_plan_reads_its_report(
    prefect_api_url: str, tmp_path: Path
) -> None:
    first = run_round(tmp_path, prefect_api_url, "--tasks", "12", "--seed", "1")
    dataset = first["dataset_version"]
    assert dataset

    summary = flywheel_json(
        tmp_path,
        prefect_api_url,
        "train",
        "--dataset",
        "latest",
        *TINY_TRAINING,
        OMP_NUM_THREADS="1",  # one xdist worker per core: see tests/training/conftest.py
    )

    assert summary["dataset_id"] == dataset and summary["method"] == "sft+rl"
    folder = Path(summary["path"])
    for name in ("config.json", "training.json", "evaluation.json", "sft_loss.svg"):
        assert (folder / name).is_file(), name
    shown = flywheel_json(tmp_path, prefect_api_url, "models", "show", summary["model_id"])
    assert shown["dataset_id"] == dataset and shown["base"] == "tiny"
    assert shown["feedback_id"] == summary["feedback_id"]
    assert shown["hyperparameters"]["sft"]["max_steps"] == 3
    assert shown["hyperparameters"]["rl"]["group_size"] == 2
    assert "sft_final_loss" in shown["metrics"] and "dev_mean_cost" in shown["metrics"]
    listed = flywheel_json(tmp_path, prefect_api_url, "models", "list")
    assert [m["id"] for m in listed] == [summary["model_id"]]

    with Catalog.open(tmp_path / "catalog.duckdb", read_only=True) as catalog:
        report = catalog.feedback.latest()
    assert report is not None and report.id == summary["feedback_id"]
    assert report.source.value == "trainer" and report.model == summary["name"]
    plan = flywheel_json(tmp_path, prefect_api_url, "plan", "show", "--tasks", "24")
    assert plan["source"] == f"feedback {report.id}"

    artifacts = post(
        prefect_api_url,
        "/artifacts/filter",
        {"artifacts": {"flow_run_id": {"any_": [summary["flow_run_id"]]}}},
    )
    by_key = {a["key"]: a for a in artifacts if a["key"]}
    assert {"trainer-report", "trainer-development", "trainer-rl-curve", "trainer-sft"} <= set(
        by_key
    )
    markdown = by_key["trainer-report"]["data"]
    prefix = "data:image/svg+xml;base64,"
    assert markdown.count(prefix) >= 2  # the SFT loss and the RL reward plots at least
    encoded = markdown.split(prefix, 1)[1].split(")", 1)[0]
    assert base64.b64decode(encoded).decode().startswith("<svg")


def test_bad_training_input_is_refused_by_name_before_any_run(
    prefect_api_url: str, tmp_path: Path
) -> None:
    with Catalog.open(tmp_path / "catalog.duckdb"):
        pass  # an empty catalog: no dataset version yet
    assert "no dataset version" in _fails(tmp_path, prefect_api_url, "--dataset", "latest")
    dataset = frozen_dataset(tmp_path, train_tasks("toggle_phone_setting", 2)).version.id
    refusals = {
        "ds-missing": ("--dataset", "ds-missing"),
        "sft.learning_rate": ("--dataset", dataset, "--set", "sft.learning_rate=0"),
        "rl.group_size": ("--dataset", dataset, "--set", "rl.group_size=1"),
        "p_low": ("--dataset", dataset, "--set", "rl.p_low=0.9"),
        "rl.updats": ("--dataset", dataset, "--set", "rl.updats=2"),
        "--set": ("--dataset", dataset, "--set", "sft.max_steps"),
        "method": ("--dataset", dataset, "--method", "dpo"),
        "base: /no/such/model": ("--dataset", dataset, "--base", "/no/such/model"),
    }
    for named, args in refusals.items():
        assert named in _fails(tmp_path, prefect_api_url, *args), named
    assert flywheel_json(tmp_path, prefect_api_url, "models", "list") == []
    assert not (tmp_path / "models").exists()


def test_the_prefect_form_of_the_trainer_has_typed_parameters() -> None:
    from prefect.utilities.callables import parameter_schema

    from flows.trainer import trainer

    schema = parameter_schema(trainer.fn).model_dump_for_openapi()
    properties = schema["properties"]
    assert properties["dataset_id"]["type"] == "string"
    assert properties["dataset_id"]["default"] == "latest"
    assert not schema.get("required"), "every field has a default: the form runs as it is"
    definitions = schema["definitions"]
    assert definitions["TrainingMethod"]["enum"] == ["sft", "rl", "sft+rl"]
    sft = definitions["SftSettings"]["properties"]
    assert sft["learning_rate"]["exclusiveMinimum"] == 0 and sft["max_steps"]["default"] == 30
    rl = definitions["RlSettings"]["properties"]
    assert {"group_size", "epsilon_low", "epsilon_high", "lambda_eff", "p_high"} <= set(rl)


def test_the_trainer_and_the_loop_take_every_field_of_a_request() -> None:
    """A request field the flows do not take would be accepted by ``--set`` and then
    dropped on the way to the trainer."""
    from prefect.utilities.callables import parameter_schema

    from flows.loop import loop
    from flows.trainer import trainer
    from training.settings import TrainRequest

    fields = set(TrainRequest.model_fields)
    assert fields <= set(parameter_schema(trainer.fn).properties)
    assert fields - {"dataset_id"} <= set(parameter_schema(loop.fn).properties), (
        "each turn trains on its own round's version"
    )
