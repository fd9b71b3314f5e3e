"""``cli.launch``, the trainer under ``accelerate launch``: one process registers a
model; two processes (torchrun's, joined over gloo on the CPU, started with the documented
multi-GPU configuration) train one model with DDP and register it once; the main
process's failure before training stops every process; the configuration file is one
accelerate reads."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import datasets
import pytest
import torch
from accelerate import PartialState
from accelerate.commands.config.config_args import (
    load_config_from_file,
)
from torch.utils.data import WeightedRandomSampler
from transformers.utils import logging as hf_logging

from bench.training import freeze_members
from cli.launch import load_export, main, parse_args, plan_run, request_of
from contract import ModelRecord, TaskSpec, TrainingMethod
from envs.simulated import BACKEND as SIMULATED
from storage import Catalog
from tests.training.builders import ROUND, FrozenDataset, frozen_dataset, train_tasks
from training.base_model import load_base
from training.export import RL_TASKS, SFT
from training.sft import tokenize_rows
from training.trainer import prepare

REPO = Path(__file__).resolve().parents[2]
CONFIG = REPO / "docs" / "accelerate" / "multi-gpu.yaml"
ACCELERATE = Path(sys.executable).parent / "accelerate"
TINY_RUN = (
    "--method",
    "sft",
    "--set",
    "sft.max_steps=2",
    "--set",
    "sft.batch_size=1",
    "--set",
    "dev_tasks=2",
    "--set",
    "rl.max_steps=1",
    "--set",
    "rl.max_new_tokens=8",
)


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> FrozenDataset:
    """A frozen dataset version of two episodes (two SFT rows); each test copies it."""
    home = tmp_path_factory.mktemp("launch-pristine")
    return frozen_dataset(home, train_tasks("toggle_phone_setting", 2))


@pytest.fixture
def dataset(pristine: FrozenDataset, tmp_path: Path) -> FrozenDataset:
    home = tmp_path / "home"
    shutil.copytree(pristine.home, home)
    return FrozenDataset(home, home / pristine.catalog_path.name, pristine.version, pristine.tasks)


def _run(command: list[str], dataset: FrozenDataset, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLYWHEEL_")}
    env |= {
        "FLYWHEEL_HOME": str(dataset.home),
        "PYTHONPATH": str(REPO),
        "OMP_NUM_THREADS": "1",  # the tiny model's operations are too small to share
        "CUDA_VISIBLE_DEVICES": "",  # the CPU path (gloo) wherever the test runs
    }
    args = [*command, "--dataset", dataset.version.id, *TINY_RUN]
    done = subprocess.run(
        args, capture_output=True, text=True, env=env, cwd=cwd, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return done


def _summary(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    printed = [line for line in done.stdout.splitlines() if line.startswith("{")]
    assert len(printed) == 1, done.stdout  # the main process alone prints
    summary: dict[str, Any] = json.loads(printed[0])
    return summary


def _registered(dataset: FrozenDataset, summary: dict[str, Any]) -> ModelRecord:
    with Catalog.open(dataset.catalog_path, read_only=True) as catalog:
        models = catalog.models.every()
    assert [m.id for m in models] == [summary["model_id"]]
    record = models[0]
    assert record.dataset_id == dataset.version.id
    assert record.method is TrainingMethod.SFT
    assert record.base == "tiny"
    assert summary["path"] == record.path
    assert (Path(record.path) / "model.safetensors").is_file()
    return record


def _sft_curve(record: ModelRecord) -> list[dict[str, Any]]:
    curves = json.loads((Path(record.path) / "training.json").read_text(encoding="utf-8"))
    curve: list[dict[str, Any]] = curves["sft"]["curve"]
    assert [p["step"] for p in curve] == [1, 2]
    return curve


def test_one_process_trains_evaluates_and_registers(dataset: FrozenDataset, tmp_path: Path) -> None:
    done = _run([sys.executable, "-m", "cli.launch"], dataset, tmp_path)
    summary = _summary(done)
    assert summary["processes"] == 1
    record = _registered(dataset, summary)
    assert "dev_overall" in record.metrics and "sft_final_loss" in record.metrics
    _sft_curve(record)
    base = dataset.home / "training" / "launch" / record.name / "base"
    assert (base / "tokenizer.json").is_file()  # the tiny base every process loads


@pytest.mark.slow
def test_two_processes_train_with_ddp_and_register_one_model(
    dataset: FrozenDataset, tmp_path: Path
) -> None:
    launch = [
        str(ACCELERATE),
        "launch",
        "--config_file",
        str(CONFIG),
        "--num_processes",
        "2",
        "--mixed_precision",
        "no",
        "--main_process_port",
        "0",  # a free port
        "-m",
        "cli.launch",
    ]
    done = _run(launch, dataset, tmp_path)
    summary = _summary(done)
    assert summary["processes"] == 2
    record = _registered(dataset, summary)
    # One optimizer step took a draw in each process: the first two draws of the one
    # sequence that the run's seed gives every process (rows drawn by weight), so both
    # drawn rows' tokens.
    export = load_export(dataset.home / "training" / "exports" / dataset.version.id)
    assert len(export.sft) == 2
    base = load_base(str(dataset.home / "training" / "launch" / record.name / "base"))
    rows = tokenize_rows(base.tokenizer, export.sft, max_length=4096)
    assert rows.weights is not None
    draws = WeightedRandomSampler(rows.weights, 2, generator=torch.Generator().manual_seed(0))
    drawn = sum(len(rows.input_ids[i]) for i in draws)
    assert _sft_curve(record)[0]["tokens"] == drawn


@pytest.fixture
def in_process() -> Iterator[None]:
    """``main`` run in the test process: its accelerate state and progress bars undone."""
    shown = hf_logging.is_progress_bar_enabled()
    yield
    PartialState._reset_state()
    if shown:
        hf_logging.enable_progress_bar()  # type: ignore[no-untyped-call]


@pytest.mark.usefixtures("in_process")
def test_an_unknown_dataset_stops_before_training(
    dataset: FrozenDataset, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("FLYWHEEL_HOME", str(dataset.home))
    assert main(["--dataset", "ds-000000000000000000ff", "--method", "sft"]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert "error:" in err and "ds-000000000000000000ff" in err
    assert not (dataset.home / "training" / "launch").exists()


@pytest.mark.usefixtures("in_process")
def test_too_few_rl_tasks_for_an_update_are_refused_by_name(
    dataset: FrozenDataset, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two RL tasks cannot fill an update of three: TRL would train no step and the
    untrained base would be registered as trained."""
    monkeypatch.setenv("FLYWHEEL_HOME", str(dataset.home))
    args = ["--dataset", dataset.version.id, "--method", "rl", "--set", "rl.tasks_per_update=3"]
    assert main(args) == 1
    err = capsys.readouterr().err
    assert "rl.tasks_per_update" in err and "the export has 2" in err
    assert "allowed: 1 to 2" in err
    with Catalog.open(dataset.catalog_path, read_only=True) as catalog:
        assert catalog.models.every() == []


def test_the_export_reads_back_without_the_catalog(dataset: FrozenDataset) -> None:
    request = request_of(parse_args(["--dataset", dataset.version.id]))
    with Catalog.open(dataset.catalog_path) as catalog:
        prepared = prepare(catalog, dataset.home, request)
    loaded = load_export(prepared.path)
    assert loaded.rl_tasks == prepared.rl_tasks
    assert loaded.rl_weights == prepared.rl_weights and prepared.rl_weights is not None
    assert set(prepared.rl_weights) == {t.id for t in prepared.rl_tasks}
    assert loaded.sft.to_list() == prepared.sft.to_list()


def test_the_launcher_leaves_out_rl_tasks_on_simulated_tools_as_prepare_does(
    dataset: FrozenDataset, tmp_path: Path
) -> None:
    """RL on a simulated tool would learn what the simulating model accepts: neither the
    flow's trainer nor the launcher's processes take such a task from an export."""
    request = request_of(parse_args(["--dataset", dataset.version.id]))
    with Catalog.open(dataset.catalog_path) as catalog:
        prepared = prepare(catalog, dataset.home, request)
    saved = datasets.load_from_disk(str(prepared.path / "hf"))
    first = saved[RL_TASKS][0]
    fields = TaskSpec.model_validate_json(first["task_spec"]).model_dump(
        mode="json", exclude={"id"}
    )
    fields["initial_conditions"]["backend"] = SIMULATED
    simulated = TaskSpec.model_validate(fields)
    extra = datasets.Dataset.from_list(
        [{**first, "task_spec": simulated.model_dump_json()}], features=saved[RL_TASKS].features
    )
    rl = datasets.concatenate_datasets([saved[RL_TASKS], extra])
    datasets.DatasetDict({SFT: saved[SFT], RL_TASKS: rl}).save_to_disk(str(tmp_path / "hf"))
    loaded = load_export(tmp_path)
    assert len(rl) == len(prepared.rl_tasks) + 1
    assert loaded.rl_tasks == prepared.rl_tasks


def test_a_continued_run_trains_on_the_rows_the_trainer_would_choose(tmp_path: Path) -> None:
    """Continuing from a registered model, the launcher's processes train on the rows the
    flow's trainer picks (the version's new rows and a replay share of those the model
    saw), not on every row of the version."""
    home = tmp_path / "home"
    grown = frozen_dataset(home, train_tasks("toggle_phone_setting", 6))
    members = grown.version.members
    folder = tmp_path / "first-model"  # a model folder by its files; planning never loads it
    folder.mkdir()
    for name in ("config.json", "tokenizer.json"):
        (folder / name).write_text("{}", encoding="utf-8")
    with Catalog.open(grown.catalog_path) as catalog:
        first = freeze_members(catalog, members[:4], round_id=ROUND, approver="test")
        catalog.models.register(
            ModelRecord(
                name="first",
                dataset_id=first.id,
                base="tiny",
                method=TrainingMethod.SFT,
                path=str(folder),
                created_at=datetime.now(UTC),
            )
        )
    args = ["--dataset", grown.version.id, "--base", str(folder), "--method", "sft"]
    request = request_of(parse_args([*args, "--set", "sft.replay_share=0.5"]))
    plan = plan_run(home, request)
    with Catalog.open(grown.catalog_path) as catalog:
        prepared = prepare(catalog, home, request)
    loaded = load_export(plan.export, plan.chosen, plan.mix)
    mix = plan.mix
    assert len(members) == 6 and mix is not None and mix == prepared.mix
    assert (mix.new, mix.replayed, mix.seen) == (2, 2, 4)
    assert loaded.sft.to_list() == prepared.sft.to_list()
    trained = set(loaded.sft["trajectory_id"])
    assert len(trained) == 4 and {m.trajectory_id for m in members[4:]} <= trained


def test_arguments_make_the_request() -> None:
    sets = ["rl.updates=3", "sft.learning_rate=0.01", "dev_tasks=4"]
    args = parse_args(
        ["--dataset", "ds-00000000000000000001", "--method", "rl", "--base", "tiny"]
        + [arg for assignment in sets for arg in ("--set", assignment)]
    )
    request = request_of(args)
    assert request.dataset_id == "ds-00000000000000000001"
    assert request.method is TrainingMethod.RL
    assert request.rl.updates == 3
    assert request.sft.learning_rate == 0.01
    assert request.dev_tasks == 4


def test_the_configuration_is_one_accelerate_reads() -> None:
    config = load_config_from_file(str(CONFIG))
    assert config.distributed_type.value == "MULTI_GPU"
    assert (config.num_machines, config.num_processes) == (1, 8)
    assert config.mixed_precision == "bf16"
    assert config.use_cpu is False
