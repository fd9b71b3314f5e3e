"""The trainer's steps without Prefect: a frozen dataset version from real scripted
episodes prepared, a tiny model trained a few SFT steps, evaluated on the development
set and registered with its lineage; and the refusals of the issue's "Bad input": an
unknown or development dataset, a base that is not a model, hyperparameters out of
range, running out of memory, and a registration that fails (never a half-registered
model)."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

import datasets
import pytest
import torch

import storage.datasets
import training.greedy_policy
import training.trainer
from agents.policies.scripted import ScriptedPolicy
from agents.runner import run_episode
from contract import (
    FeedbackReport,
    FeedbackSource,
    FlywheelError,
    InvalidInputError,
    ModelRecord,
    Split,
    TaskSpec,
    TrainingMethod,
    Trajectory,
)
from envs.sandbox import MobileSandbox
from envs.sandbox.templates.catalog import sample_tasks
from storage import Catalog, CatalogError, UnknownIdError
from storage.model_registry import DuckDBModelRegistry
from tests.storage.builders import make_version, write_shards
from tests.training.builders import FrozenDataset, frozen_dataset, train_tasks
from training.base_model import TINY, BaseModel
from training.base_model import load_base as load_model_folder
from training.chat_model import LocalChatModel
from training.evaluate import Evaluation
from training.export import RL_TASKS, SFT
from training.greedy_policy import MAX_WORKERS, MIN_WORKER_EPISODES, evaluation_processes
from training.settings import (
    BASE_DEFAULTS,
    BUILT_FROM,
    CONTINUED_DEFAULTS,
    CONTINUED_PARENT_SHARE,
    NANO,
    RlSettings,
    SftSettings,
    TrainRequest,
    built_from,
)
from training.sft import SftResult, run_sft
from training.trainer import (
    SVG_PLOTS,
    Curves,
    TrainingData,
    TrainingError,
    average_with_start,
    dev_probe,
    development_note,
    development_set,
    evaluate_model,
    load_base,
    model_name,
    out_of_memory_guard,
    prepare,
    register,
)

CREATED_AT = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
SFT_STEPS = 3
DEV_TASKS = 4

ANY_DATASET = "ds-" + "0" * 19 + "a"
"""A well-formed dataset id that no catalog of these tests holds."""
UNKNOWN_DATASET = "ds-" + "0" * 16 + "dead"


@pytest.fixture(scope="module", autouse=True)
def _one_thread() -> Iterator[None]:
    """One CPU thread: the tiny model's operations are too small to share (see test_sft)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@dataclass(frozen=True)
class Trained:
    """A frozen dataset version, its export, a tiny model trained on it a few SFT steps,
    and that model's development-set evaluation; nothing registered yet."""

    dataset: FrozenDataset
    request: TrainRequest
    data: TrainingData
    base: BaseModel
    sft: SftResult
    dev: list[TaskSpec]
    evaluation: Evaluation
    pristine: Path
    """A copy of the catalog taken before anything was registered."""

    @property
    def home(self) -> Path:
        return self.dataset.home

    @property
    def name(self) -> str:
        return model_name(self.request, CREATED_AT)

    @property
    def curves(self) -> Curves:
        return Curves(self.sft, None, self.data.mix)

    @property
    def report(self) -> FeedbackReport:
        return self.evaluation.report


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Trained:
    home = tmp_path_factory.mktemp("trainer-home")
    dataset = frozen_dataset(home, train_tasks("toggle_phone_setting", 3))
    request = TrainRequest.of(
        {
            "dataset_id": dataset.version.id,
            "method": "sft",
            "sft": {"max_steps": SFT_STEPS, "batch_size": 1, "max_length": 4096},
            "rl": {"max_steps": 2, "max_new_tokens": 16},
            "dev_tasks": DEV_TASKS,
        }
    )
    with Catalog.open(dataset.catalog_path) as catalog:
        data = prepare(catalog, home, request)
        base = load_base(request, data)
        sft = run_sft(base, data.sft, request.sft, home / "training" / "runs" / "sft")
        dev = development_set(catalog, request)
    evaluation = evaluate_model(base, dev, request, model_name(request, CREATED_AT))
    pristine = tmp_path_factory.mktemp("pristine-catalog")
    _copy_catalog(dataset.catalog_path, pristine)
    return Trained(dataset, request, data, base, sft, dev, evaluation, pristine)


def _register(catalog: Catalog, home: Path, trained: Trained, **changes: Any) -> ModelRecord:
    arguments: dict[str, Any] = {
        "base": trained.base,
        "request": trained.request,
        "name": trained.name,
        "curves": trained.curves,
        "report": trained.report,
    } | changes
    return register(
        catalog,
        home,
        arguments["base"],
        arguments["request"],
        arguments["name"],
        CREATED_AT,
        arguments["curves"],
        arguments["report"],
        flow_run_id="run-123",
    )


def _copy_catalog(source: Path, folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for path in source.parent.glob(f"{source.name}*"):  # the .wal too, when there is one
        shutil.copy2(path, folder / path.name)
    return folder / source.name


def _catalog_copy(trained: Trained, folder: Path) -> Path:
    """The module's catalog as it was before anything was registered (the dataset version
    and the development set in it), for a test that must not change the shared one."""
    return _copy_catalog(trained.pristine / trained.dataset.catalog_path.name, folder)


def _listing(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*")) if folder.exists() else []


def _nothing_registered(catalog: Catalog, home: Path, name: str) -> None:
    """No model folder, no staging folder (``.<name>.*.partial``), no record."""
    assert not (home / "models" / name).exists()
    assert _listing(home / "models") == []
    assert catalog.models.every() == []


# -- the happy path ----------------------------------------------------------------------


@dataclass(frozen=True)
class Registered:
    record: ModelRecord
    models: list[ModelRecord]
    stored: ModelRecord
    latest_feedback: FeedbackReport | None

    @property
    def folder(self) -> Path:
        return Path(self.record.path)


@pytest.fixture(scope="module")
def registered(trained: Trained) -> Registered:
    """The trained model registered in the module's catalog."""
    with Catalog.open(trained.dataset.catalog_path) as catalog:
        record = _register(catalog, trained.home, trained)
        return Registered(
            record, catalog.models.every(), catalog.models.get(record.id), catalog.feedback.latest()
        )


def test_the_steps_train_and_evaluate_on_the_development_set(trained: Trained) -> None:
    report = trained.report
    assert [t.split for t in trained.dev] == [Split.DEV] * DEV_TASKS
    assert len({t.fingerprint for t in trained.dev}) == DEV_TASKS
    with Catalog.open(trained.dataset.catalog_path, read_only=True) as catalog:
        assert development_set(catalog, trained.request) == trained.dev  # stored once
    assert (report.source, report.model) == (FeedbackSource.TRAINER, trained.name)
    assert report.produced_by == "flywheel-trainer"
    assert len(trained.evaluation.trajectories) == DEV_TASKS * trained.request.eval_samples
    assert all(len(t.steps) <= 2 for t in trained.evaluation.trajectories)  # rl.max_steps
    assert [p["step"] for p in trained.sft.curve] == list(range(1, SFT_STEPS + 1))
    assert trained.sft.rows_used == len(trained.data.sft) > 0


def _episode(trajectory: Trajectory) -> dict[str, Any]:
    """The whole episode but what differs between any two runs (its id, the latency)."""
    return trajectory.model_dump(mode="json", exclude={"id": True, "cost": {"latency_ms"}})


def test_worker_processes_evaluate_the_model_as_this_process_does(
    trained: Trained, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two single-threaded workers, each loading a saved copy of the trained model: every
    reply, token for token, and every number of the report are this process's, and the
    copy is deleted afterwards."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    here = trained.evaluation  # four tasks: too few for workers, evaluated in this process
    workers = evaluate_model(trained.base, trained.dev, trained.request, trained.name, processes=2)

    assert [_episode(t) for t in workers.trajectories] == [_episode(t) for t in here.trajectories]
    assert workers.report.model_dump(exclude={"id", "created_at"}) == here.report.model_dump(
        exclude={"id", "created_at"}
    )
    assert sum(len(step.model_output) for t in here.trajectories for step in t.steps) > 0
    assert list(tmp_path.iterdir()) == []


def test_a_small_model_on_the_cpu_is_evaluated_by_a_worker_a_core_given_enough_episodes(
    trained: Trained, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = trained.base.model
    cores = os.cpu_count() or 1
    assert evaluation_processes(model, MIN_WORKER_EPISODES - 1) == 1
    assert evaluation_processes(model, MIN_WORKER_EPISODES) == min(cores, MAX_WORKERS)
    parameters = sum(p.numel() for p in model.parameters())
    monkeypatch.setattr(training.greedy_policy, "SMALL_MODEL_PARAMETERS", parameters)
    assert evaluation_processes(model, MIN_WORKER_EPISODES) == 1  # not small: threads


def test_the_model_is_registered_with_its_lineage(trained: Trained, registered: Registered) -> None:
    record = registered.record
    assert registered.models == [record] and registered.stored == record
    name = f"tiny-sft-{trained.dataset.version.id}-20261201T120000Z"
    assert record.name == trained.name == name
    assert record.path == str((trained.home / "models" / name).resolve())
    assert (record.dataset_id, record.base, record.method) == (
        trained.dataset.version.id,
        TINY,
        TrainingMethod.SFT,
    )
    assert (record.created_at, record.flow_run_id, record.parent) == (CREATED_AT, "run-123", None)
    hyper = record.hyperparameters
    assert hyper["sft"] == trained.request.sft.model_dump(mode="json")
    assert hyper["rl"] == trained.request.rl.model_dump(mode="json")
    assert isinstance(hyper["rl"], dict) and hyper["rl"]["max_new_tokens"] == 16
    assert isinstance(hyper["sft"], dict) and hyper["sft"]["max_steps"] == SFT_STEPS
    assert (hyper["dev_tasks"], hyper["eval_samples"], hyper["seed"]) == (DEV_TASKS, 1, 0)
    assert not {"dataset_id", "base", "method"} & set(hyper)

    report = trained.report
    metrics = record.metrics
    assert metrics["sft_final_loss"] == trained.sft.curve[-1]["loss"]
    assert metrics["sft_tokens_per_second"] == trained.sft.tokens_per_second > 0
    assert metrics["dev_mean_cost"] == report.cost.mean_cost
    capabilities = {f"dev_success.{c.value}": s for c, s in report.capability_scores.items()}
    assert capabilities and capabilities.items() <= metrics.items()
    assert report.overall is not None and metrics["dev_overall"] == report.overall
    assert not any(key.startswith("rl_") for key in metrics)  # no RL ran

    assert record.feedback_id == report.id
    assert registered.latest_feedback == report  # what the next round plans from


def test_the_model_folder_holds_weights_curves_evaluation_and_plots(
    trained: Trained, registered: Registered
) -> None:
    folder = registered.folder
    files = {p.name for p in folder.iterdir()}
    assert {"config.json", "training.json", "evaluation.json", "sft_loss.svg"} <= files
    assert not {f"{plot}.svg" for plot in SVG_PLOTS if plot != "sft_loss"} & files
    assert [p.name for p in folder.parent.iterdir()] == [folder.name]  # no staging left
    saved = json.loads((folder / "training.json").read_text(encoding="utf-8"))
    assert saved == {
        "sft": json.loads(json.dumps(trained.sft.to_json())),
        "rows": {  # a built base: every row is new
            "new": len(trained.data.sft),
            "replayed": 0,
            "seen": 0,
            "continued_from": None,
        },
        "parent_average": None,
        "rl": None,
    }
    evaluation = FeedbackReport.model_validate_json((folder / "evaluation.json").read_bytes())
    assert evaluation == trained.report
    svg = (folder / "sft_loss.svg").read_text(encoding="utf-8")
    assert svg.lstrip().startswith("<svg") and "SFT loss" in svg


def test_the_saved_model_loads_back_with_the_same_outputs(
    trained: Trained, registered: Registered
) -> None:
    loaded = load_model_folder(registered.record.path)
    text = "Turn Wi-Fi off, please."
    ids = trained.base.tokenizer(text, return_tensors="pt")["input_ids"]
    assert loaded.tokenizer(text)["input_ids"] == ids[0].tolist()
    assert loaded.tokenizer.chat_template == trained.base.tokenizer.chat_template
    assert not trained.base.model.training and not loaded.model.training  # no dropout
    with torch.no_grad():
        want = trained.base.model(input_ids=ids.to(trained.base.model.device)).logits
        got = loaded.model(input_ids=ids.to(loaded.model.device)).logits
    assert torch.equal(got, want)


def test_a_second_prepare_reuses_the_export(
    trained: Trained, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = trained.data.path
    assert out == trained.home / "training" / "exports" / trained.dataset.version.id
    marker = out / "hf" / "dataset_dict.json"
    before = (out.stat().st_ino, marker.stat().st_ino, marker.stat().st_mtime_ns)

    def no_export(*args: object, **kwargs: object) -> None:
        raise AssertionError("the export is there already: it is reused, not written again")

    monkeypatch.setattr(training.trainer, "export_dataset", no_export)
    with Catalog.open(trained.dataset.catalog_path, read_only=True) as catalog:
        again = prepare(catalog, trained.home, trained.request)
    assert again.path == out
    assert (out.stat().st_ino, marker.stat().st_ino, marker.stat().st_mtime_ns) == before
    assert list(again.sft["trajectory_id"]) == list(trained.data.sft["trajectory_id"])
    assert again.rl_tasks == trained.data.rl_tasks
    assert {t.id for t in again.rl_tasks} == {m.task_id for m in trained.dataset.version.members}
    assert set(datasets.load_from_disk(str(out / "hf"))) == {SFT, RL_TASKS}


# -- bad input: the dataset --------------------------------------------------------------


def test_an_unknown_dataset_version_is_refused_before_anything_is_written(
    trained: Trained, tmp_path: Path
) -> None:
    request = trained.request.model_copy(update={"dataset_id": UNKNOWN_DATASET})
    with (
        Catalog.open(trained.dataset.catalog_path, read_only=True) as catalog,
        pytest.raises(UnknownIdError, match=f"unknown dataset id '{UNKNOWN_DATASET}'") as caught,
    ):
        prepare(catalog, tmp_path, request)
    assert trained.dataset.version.id in str(caught.value)  # the ids that do exist
    assert _listing(tmp_path) == []


def test_a_version_holding_a_development_task_is_refused_by_the_export(
    tmp_path: Path, sandbox: MobileSandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    (task,) = sample_tasks(1, 5, sandbox, split=Split.DEV)
    trajectory = run_episode(task, sandbox, ScriptedPolicy(), round_id="round-dev")
    write_shards([trajectory], tmp_path / "shards")
    home = tmp_path / "home"
    with Catalog.open(home / "catalog.duckdb") as catalog:
        catalog.trajectories.ingest([tmp_path / "shards"])
        version = make_version([trajectory], round_id="round-dev")
        with pytest.raises(InvalidInputError, match="development"):
            catalog.datasets.freeze(version)
        # Freezing refuses it; a version that got in anyway (a bug, an old catalog) must
        # still never be trained on.
        with monkeypatch.context() as patched:
            patched.setattr(storage.datasets, "_check_members", lambda con: None)
            assert catalog.datasets.freeze(version)
        request = TrainRequest.of({"dataset_id": version.id})
        with pytest.raises(InvalidInputError, match=f"development tasks.*{task.id}") as caught:
            prepare(catalog, home, request)
        assert caught.value.field == "members"
        assert catalog.models.every() == []
    assert _listing(home / "training" / "exports") == []
    assert not (home / "models").exists()


# -- bad input: the base -----------------------------------------------------------------


def _not_a_model(folder: Path, kind: str) -> Path:
    path = folder / "base"
    if kind == "file":
        path.write_text("weights?")
    elif kind == "empty":
        path.mkdir()
    elif kind == "junk":  # looks like a model folder, but nothing in it loads
        path.mkdir()
        (path / "config.json").write_text("{}")
        (path / "tokenizer.json").write_text("{}")
    return path


NOT_A_MODEL = [
    ("missing", "no such directory"),
    ("file", "is a file, not a model directory"),
    ("empty", "has no config.json"),
]


@pytest.mark.parametrize(("kind", "problem"), NOT_A_MODEL)
def test_a_base_that_is_not_a_model_is_refused_in_the_request(
    tmp_path: Path, kind: str, problem: str
) -> None:
    path = _not_a_model(tmp_path, kind)
    with pytest.raises(InvalidInputError) as caught:
        TrainRequest.of({"dataset_id": ANY_DATASET, "base": str(path)})
    assert caught.value.field == "base"
    assert problem in caught.value.problem and str(path) in caught.value.problem
    assert str(caught.value).startswith("base: ")


@pytest.mark.parametrize(
    ("kind", "problem"), [*NOT_A_MODEL, ("junk", "does not load as a causal LM")]
)
def test_a_base_that_is_not_a_model_is_refused_when_loading(
    tmp_path: Path, kind: str, problem: str
) -> None:
    """What the request's check cannot see (a folder gone since, or one that only looks
    like a model) ``load_base`` refuses by the same name."""
    path = _not_a_model(tmp_path, kind)
    if kind == "junk":
        assert TrainRequest.of({"dataset_id": ANY_DATASET, "base": str(path)}).base == str(path)
    request = TrainRequest.of({"dataset_id": ANY_DATASET}).model_copy(update={"base": str(path)})
    data = TrainingData(tmp_path, datasets.Dataset.from_list([{"x": 1}]), ())
    with pytest.raises(InvalidInputError) as caught:
        load_base(request, data)
    assert caught.value.field == "base"
    assert problem in caught.value.problem and str(path) in caught.value.problem
    assert str(caught.value).startswith("base: ")


# -- bad input: the hyperparameters ------------------------------------------------------


@pytest.mark.parametrize(
    ("values", "field", "says"),
    [
        ({"sft": {"learning_rate": 0}}, "sft.learning_rate", "0 < learning_rate <= 1"),
        ({"sft": {"batch_size": 0}}, "sft.batch_size", "1 <= batch_size <= 512"),
        ({"rl": {"group_size": 1}}, "rl.group_size", "2 <= group_size <= 64"),
        ({"rl": {"p_low": 0.9, "p_high": 0.5}}, "rl", "p_low 0.9 must be below p_high 0.5"),
        ({"method": "dpo"}, "method", "'dpo' is not a known value"),
        ({"eval_samples": 0}, "eval_samples", "greater than or equal to 1"),
        ({"eval_samples": 65}, "eval_samples", "less than or equal to 64"),
        ({"dev_tasks": 0}, "dev_tasks", "greater than or equal to 1"),
        ({"parent_share": 1.0}, "parent_share", "less than 1"),
        ({"parent_share": -0.5}, "parent_share", "greater than or equal to 0"),
        ({"epochs": 3}, "epochs", "is not a field of this record"),
        ({"sft": {"lr": 0.1}}, "sft.lr", "is not a setting"),
        ({"sft": "fast"}, "sft", "must be an object"),
        ({"dataset_id": ""}, "dataset_id", "does not match"),
        ({"dataset_id": "../ds-x"}, "dataset_id", "does not match"),
        ({"base": "a\x00b"}, "base", "no such directory"),
        ({"base": 3}, "base", "must be a valid string"),
        # A built base fills its defaults first: bad settings still reach their checks.
        ({"base": "nano", "sft": "fast"}, "sft", "must be an object"),
        ({"base": "nano", "sft": {"lr": 0.1}}, "sft.lr", "is not a setting"),
        ({"base": "nano", "sft": {"learning_rate": 0}}, "sft.learning_rate", "<= 1"),
    ],
)
def test_bad_parameters_are_refused_by_name(values: dict[str, Any], field: str, says: str) -> None:
    with pytest.raises(InvalidInputError) as caught:
        TrainRequest.of({"dataset_id": ANY_DATASET} | values)
    assert caught.value.field == field
    assert says in str(caught.value)
    assert str(caught.value).startswith(f"{field}: ")


def test_a_refused_method_lists_the_allowed_ones_and_good_values_pass() -> None:
    with pytest.raises(InvalidInputError) as caught:
        TrainRequest.of({"dataset_id": ANY_DATASET, "method": "dpo"})
    assert caught.value.allowed == ("sft", "rl", "sft+rl")
    with pytest.raises(InvalidInputError) as lr:
        TrainRequest.of({"dataset_id": ANY_DATASET, "sft": {"learning_rate": 2}})
    assert lr.value.allowed == ("0 < learning_rate <= 1",)

    request = TrainRequest.of(
        {
            "dataset_id": ANY_DATASET,
            "method": "sft+rl",
            "sft": SftSettings(max_steps=5),  # a record, as the flow passes it
            "rl": {"group_size": 3, "p_low": 0.1, "p_high": 0.9},
        }
    )
    assert (request.method, request.sft.max_steps, request.rl.group_size) == (
        TrainingMethod.SFT_RL,
        5,
        3,
    )
    assert request.uses_sft and request.uses_rl
    assert request.base == TINY
    only_rl = TrainRequest.of({"dataset_id": ANY_DATASET, "method": "rl"})
    assert (only_rl.uses_sft, only_rl.uses_rl) == (False, True)


def test_a_nano_request_takes_the_nano_defaults_for_what_it_leaves_unset(
    tmp_path: Path,
) -> None:
    nano = BASE_DEFAULTS[NANO]["sft"]
    request = TrainRequest.of({"dataset_id": ANY_DATASET, "base": NANO, "sft": {"batch_size": 2}})
    assert request.sft.batch_size == 2, "a value given is kept"
    assert (request.sft.epochs, request.sft.learning_rate, request.sft.swap_share) == (
        nano["epochs"],
        nano["learning_rate"],
        nano["swap_share"],
    )
    assert request.rl.max_new_tokens == BASE_DEFAULTS[NANO]["rl"]["max_new_tokens"]
    steps = TrainRequest.of({"dataset_id": ANY_DATASET, "base": NANO, "sft": {"max_steps": 7}})
    assert (steps.sft.max_steps, steps.sft.epochs) == (7, None), "given steps keep epochs out"
    tiny = TrainRequest.of({"dataset_id": ANY_DATASET, "base": TINY})
    assert tiny.sft == SftSettings(), "other bases keep the records' defaults"

    folder = tmp_path / "champion"  # a model trained from nano, as the loop continues from
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({BUILT_FROM: NANO}))
    (folder / "tokenizer.json").write_text("{}")
    assert built_from(str(folder)) == NANO
    descendant = TrainRequest.of({"dataset_id": ANY_DATASET, "base": str(folder)})
    continued = CONTINUED_DEFAULTS[NANO]["sft"]
    # Continuing trains the continuation's steps at its rate, the rest as nano does.
    assert (descendant.sft.epochs, descendant.sft.step_cap) == (
        continued["epochs"],
        continued["step_cap"],
    )
    assert (descendant.sft.epochs, descendant.sft.step_cap) != (nano["epochs"], nano["step_cap"])
    assert descendant.sft.learning_rate == continued["learning_rate"] < nano["learning_rate"]
    assert descendant.sft.replay_share == continued["replay_share"] != request.sft.replay_share
    assert descendant.sft.batch_size == nano["batch_size"], "the rest as nano trains"
    assert descendant.parent_share == CONTINUED_PARENT_SHARE[NANO] > 0
    assert request.parent_share == tiny.parent_share == 0, "a first run has no parent"
    given = TrainRequest.of({"dataset_id": ANY_DATASET, "base": str(folder), "parent_share": 0})
    assert given.parent_share == 0, "a value given is kept"
    assert request.sft.step_cap == nano["step_cap"], "from the recipe: the base's own"
    capped = TrainRequest.of(
        {"dataset_id": ANY_DATASET, "base": str(folder), "sft": {"step_cap": 50}}
    )
    assert (capped.sft.step_cap, capped.sft.epochs) == (50, continued["epochs"])
    (folder / "config.json").write_text(json.dumps({BUILT_FROM: "gpt-5"}))
    assert built_from(str(folder)) is None
    other = TrainRequest.of({"dataset_id": ANY_DATASET, "base": str(folder)})
    assert other.parent_share == 0, "another model's continuation averages only if asked"


@pytest.mark.parametrize(
    "build",
    [
        pytest.param(TrainRequest.of, id="of"),
        pytest.param(TrainRequest.model_validate, id="model_validate"),
        pytest.param(lambda values: TrainRequest(**values), id="constructor"),
        pytest.param(
            lambda values: TrainRequest.model_validate_json(json.dumps(values)), id="json"
        ),
    ],
)
def test_every_way_of_building_a_request_takes_the_base_defaults(build: Any) -> None:
    """The defaults are filled before validation: a copy returned after it is dropped by
    pydantic when the request is built with ``TrainRequest(...)``."""
    nano = BASE_DEFAULTS[NANO]["sft"]
    request = build({"dataset_id": ANY_DATASET, "base": NANO, "sft": {"learning_rate": 1e-3}})
    assert (request.sft.epochs, request.sft.step_cap) == (nano["epochs"], nano["step_cap"])
    assert request.sft.learning_rate == 1e-3, "a value given is kept"
    records = TrainRequest(
        dataset_id=ANY_DATASET, base=NANO, sft=SftSettings(batch_size=2), rl=RlSettings()
    )
    assert (records.sft.batch_size, records.sft.epochs) == (2, nano["epochs"])
    assert records.rl.max_new_tokens == BASE_DEFAULTS[NANO]["rl"]["max_new_tokens"]


# -- bad input: out of memory ------------------------------------------------------------


@pytest.mark.parametrize(
    ("error", "stage", "advice"),
    [
        (torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"), "SFT", "sft"),
        (MemoryError(), "RL", "rl"),
    ],
)
def test_running_out_of_memory_says_what_to_lower(
    error: BaseException, stage: str, advice: str
) -> None:
    lower = f"{advice}.batch_size or {advice}.max_length"
    with pytest.raises(TrainingError) as caught, out_of_memory_guard(stage, lower):
        raise error
    message = str(caught.value)
    assert message.startswith(f"{stage} ran out of memory ({type(error).__name__})")
    assert message.endswith(f"lower {lower}")
    assert "nothing was registered" in message
    assert isinstance(caught.value, FlywheelError)
    assert caught.value.__cause__ is None and caught.value.__suppress_context__


def test_other_errors_pass_through_the_memory_guard_unchanged() -> None:
    error = RuntimeError("CUDA error: device-side assert triggered")
    with pytest.raises(RuntimeError) as caught, out_of_memory_guard("SFT", "sft.batch_size"):
        raise error
    assert caught.value is error
    with out_of_memory_guard("SFT", "sft.batch_size"):
        pass  # and nothing happens without an error


# -- no half-registered model ------------------------------------------------------------


def test_a_catalog_without_the_dataset_version_registers_nothing(
    trained: Trained, tmp_path: Path
) -> None:
    with Catalog.open(tmp_path / "other" / "catalog.duckdb") as catalog:
        with pytest.raises(UnknownIdError, match=trained.dataset.version.id):
            _register(catalog, tmp_path, trained)
        _nothing_registered(catalog, tmp_path, trained.name)
        assert catalog.feedback.latest() is None  # no report of a model that is not there


def test_a_read_only_catalog_registers_nothing(trained: Trained, tmp_path: Path) -> None:
    path = _catalog_copy(trained, tmp_path / "state")
    with Catalog.open(path, read_only=True) as catalog:
        with pytest.raises(CatalogError, match="read-only"):
            _register(catalog, tmp_path, trained)
        _nothing_registered(catalog, tmp_path, trained.name)
        assert catalog.feedback.latest() is None


def test_a_failed_registration_removes_the_saved_model(
    trained: Trained, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The weights are renamed into place before the record is stored: when storing it
    fails (here: another process held the catalog too long), the folder goes too."""
    saved: list[list[str]] = []

    def locked(self: DuckDBModelRegistry, record: object, report: object = None) -> bool:
        saved.append(_listing(tmp_path / "models" / trained.name))
        raise CatalogError("the catalog is in use by another process")

    monkeypatch.setattr(DuckDBModelRegistry, "register", locked)
    with Catalog.open(_catalog_copy(trained, tmp_path / "state")) as catalog:
        with pytest.raises(CatalogError, match="in use"):
            _register(catalog, tmp_path, trained)
        _nothing_registered(catalog, tmp_path, trained.name)
    (listing,) = saved
    assert {"config.json", "training.json", "evaluation.json", "sft_loss.svg"} <= set(listing)


def test_a_failure_while_saving_leaves_no_staging_folder(
    trained: Trained, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def half_saved(base: BaseModel, path: Path) -> None:
        path.mkdir(parents=True)
        (path / "model.safetensors").write_bytes(b"half")
        raise OSError("No space left on device")

    monkeypatch.setattr(training.trainer, "save_model", half_saved)
    with Catalog.open(_catalog_copy(trained, tmp_path / "state")) as catalog:
        with pytest.raises(OSError, match="No space left"):
            _register(catalog, tmp_path, trained)
        _nothing_registered(catalog, tmp_path, trained.name)
        assert catalog.feedback.latest() is None


def test_a_diverged_run_is_refused_before_anything_is_written(
    trained: Trained, tmp_path: Path
) -> None:
    """A NaN loss makes a record the catalog cannot hold: refused by name before the
    weights are saved, not after they are in place."""
    last = trained.sft.curve[-1].copy()
    last["loss"] = math.nan
    diverged = dataclasses.replace(trained.sft, curve=(*trained.sft.curve[:-1], last))
    with Catalog.open(_catalog_copy(trained, tmp_path / "state")) as catalog:
        with pytest.raises(InvalidInputError) as caught:
            _register(catalog, tmp_path, trained, curves=Curves(diverged, None))
        assert caught.value.field == "metrics.sft_final_loss"
        _nothing_registered(catalog, tmp_path, trained.name)
        assert catalog.feedback.latest() is None


def test_an_existing_model_folder_is_never_overwritten(trained: Trained, tmp_path: Path) -> None:
    folder = tmp_path / "models" / trained.name
    folder.mkdir(parents=True)
    (folder / "config.json").write_text('{"mine": true}')
    with Catalog.open(_catalog_copy(trained, tmp_path / "state")) as catalog:
        with pytest.raises(InvalidInputError, match="never overwritten") as caught:
            _register(catalog, tmp_path, trained)
        assert caught.value.field == "name"
        assert catalog.models.every() == []
        assert catalog.feedback.latest() is None
    assert _listing(tmp_path / "models") == [trained.name, f"{trained.name}/config.json"]
    assert (folder / "config.json").read_text() == '{"mine": true}'


def test_the_schedule_probe_is_a_greedy_development_evaluation(trained: Trained) -> None:
    """What the schedule controller reads: the development success rate and mean cost of
    the model being trained, the same numbers its evaluation reports."""
    probe = dev_probe(trained.dev, trained.request)
    policy = LocalChatModel(trained.base.model, trained.base.tokenizer, name=trained.name)
    success, cost = probe(policy)
    report = trained.evaluation.report
    attempts = sum(t.attempts for t in report.tasks)
    assert success == sum(t.successes for t in report.tasks) / attempts
    assert cost == report.cost.mean_cost


def test_a_model_continued_from_a_trained_one_keeps_a_short_name(tmp_path: Path) -> None:
    dataset = "ds-" + "a" * 20
    first = model_name(TrainRequest.of({"dataset_id": dataset, "base": "nano"}), CREATED_AT)
    assert first == f"nano-sft-rl-{dataset}-20261201T120000Z"
    later = TrainRequest.model_construct(
        base=str(tmp_path / "models" / first), method=TrainingMethod.SFT, dataset_id=dataset
    )
    assert model_name(later, CREATED_AT) == f"nano-sft-{dataset}-20261201T120000Z"
    folder = TrainRequest.model_construct(
        base=str(tmp_path / "Qwen2.5-0.5B"), method=TrainingMethod.RL, dataset_id=dataset
    )
    assert model_name(folder, CREATED_AT) == f"Qwen2.5-0.5B-rl-{dataset}-20261201T120000Z"


def test_a_continued_run_is_averaged_with_its_start_and_a_first_run_is_not(
    trained: Trained, registered: Registered
) -> None:
    first = trained.request.model_copy(update={"parent_share": 0.5})
    untouched = {n: p.detach().clone() for n, p in trained.base.model.named_parameters()}
    assert average_with_start(trained.base, first) is None, "a built base: nothing to average"
    assert all(torch.equal(p, untouched[n]) for n, p in trained.base.model.named_parameters())

    continued = TrainRequest.of(
        {"dataset_id": trained.request.dataset_id, "base": str(registered.folder)}
        | {"parent_share": 0.25}
    )
    model = load_model_folder(str(registered.folder))
    with torch.no_grad():
        for param in model.model.parameters():
            param.add_(4.0)  # as if training had moved every weight by 4
    average = average_with_start(model, continued)

    assert average is not None and (average.parent, average.share) == (
        str(registered.folder),
        0.25,
    )
    for name, param in model.model.named_parameters():
        assert torch.allclose(param, untouched[name] + 3.0, atol=1e-5), name
    curves = Curves(trained.sft, None, trained.data.mix, average)
    assert curves.to_json()["parent_average"] == average.to_json()
    zero = continued.model_copy(update={"parent_share": 0.0})
    assert average_with_start(model, zero) is None


def test_a_development_set_of_another_size_is_said() -> None:
    request = TrainRequest.of({"dataset_id": "ds-" + "a" * 20, "dev_tasks": 24})
    tasks = cast(list[TaskSpec], [object()] * 13)
    note = development_note(tasks, request)
    assert note is not None and "13 tasks, not the 24 asked for" in note
    assert development_note(cast(list[TaskSpec], [object()] * 24), request) is None
