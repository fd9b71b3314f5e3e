"""``flywheel loop`` and ``flywheel deploy``: bad input is refused by name before any flow
run (and before the Prefect API is even looked for); the records read from the catalog."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from cli.main import app, main
from contract import InvalidInputError
from storage import Catalog, CatalogError

runner = CliRunner()


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A state folder named by ``FLYWHEEL_HOME``, an empty settings file, and a Prefect
    API that fails the test if anything asks for it."""
    for name in list(os.environ):
        if name.startswith("FLYWHEEL_"):
            monkeypatch.delenv(name)
    config = tmp_path / "flywheel.toml"
    config.write_text("")
    monkeypatch.setenv("FLYWHEEL_CONFIG", str(config))
    monkeypatch.setenv("FLYWHEEL_HOME", str(tmp_path / "home"))

    def no_prefect(*args: object, **kwargs: object) -> str:
        raise AssertionError("the command reached the Prefect API")

    monkeypatch.setattr("cli.deploy.live_prefect_api", no_prefect)
    return tmp_path / "home"


def _catalog(home: Path) -> Path:
    path = home / "catalog.duckdb"
    Catalog.open(path).close()
    return path


def _refused(args: list[str]) -> InvalidInputError:
    result: Result = runner.invoke(app, args)
    assert result.exit_code == 1, result.output
    assert isinstance(result.exception, InvalidInputError), repr(result.exception)
    return result.exception


@pytest.mark.parametrize(
    ("args", "field", "needle"),
    [
        (["loop", "--set", "dataset_id=ds-x"], "--set", "each turn trains on its round's"),
        (["loop", "--collect-with", "nobody"], "collect-with", "'nobody'"),
        (["loop", "--set", "sft.learning_rate=0"], "sft.learning_rate", ""),
        (["loop", "--set", "rl.group_size=1"], "rl.group_size", ""),
        (["loop", "--set", "nothing"], "--set", "is not KEY=VALUE"),
        (["deploy", "--approval", "maybe"], "approval", "'maybe'"),
        (["serve", "--pool", "Flywheel_Pool"], "--pool", "lowercase letters, digits and '-'"),
        (["worker", "--pool", "../pool"], "--pool", "not a Prefect work pool name"),
    ],
)
def test_bad_input_is_refused_by_name_before_any_flow_run(
    home: Path, args: list[str], field: str, needle: str
) -> None:
    refused = _refused(args)
    assert refused.field == field
    assert needle in str(refused)
    assert not home.exists()  # no catalog, no server state: nothing ran


def test_the_allowed_values_are_listed(home: Path) -> None:
    assert _refused(["loop", "--collect-with", "nobody"]).allowed == ("champion", "settings")
    assert _refused(["deploy", "--approval", "maybe"]).allowed == ("auto", "person")


def test_deploy_list_of_a_fresh_catalog_is_empty(home: Path) -> None:
    _catalog(home)
    result = runner.invoke(app, ["deploy", "list", "--json"])
    assert result.exit_code == 0, f"{result.output}\n{result.exception!r}"
    assert json.loads(result.stdout) == []
    assert result.stdout == "[]\n"

    result = runner.invoke(app, ["deploy", "list"])
    assert result.exit_code == 0, f"{result.output}\n{result.exception!r}"
    assert result.stdout == "no deployments yet\n"


def test_deploy_show_of_an_unknown_deployment_names_deployment_id(home: Path) -> None:
    _catalog(home)
    refused = _refused(["deploy", "show", "dep-nope"])
    assert refused.field == "deployment_id"
    assert "'dep-nope' is not a deployment in the catalog (the catalog has none yet)" in str(
        refused
    )


def test_deploy_list_without_a_catalog_says_to_run_a_round(home: Path) -> None:
    result = runner.invoke(app, ["deploy", "list"])
    assert result.exit_code == 1
    assert isinstance(result.exception, CatalogError)
    assert "run a round first" in str(result.exception)


def test_the_flywheel_command_prints_the_refusal_and_exits_1(
    home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sys, "argv", ["flywheel", "deploy", "--approval", "maybe"])
    with pytest.raises(SystemExit) as exited:
        main()
    assert exited.value.code == 1
    assert capsys.readouterr().err == (
        "error: approval: unknown approval mode 'maybe' (allowed: auto, person)\n"
    )


def test_the_loop_passes_only_the_settings_given_so_each_turn_takes_its_own_defaults(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first turn trains nano from scratch and later ones continue the champion with
    other defaults (``CONTINUED_DEFAULTS``): a first turn's defaults carried into the
    settings every turn gets would replace a continuation's."""
    from contextlib import nullcontext

    import flows.loop
    from training.settings import (
        CONTINUED_DEFAULTS,
        NANO,
        RlSettings,
        SftSettings,
        TrainRequest,
    )

    called: dict[str, object] = {}

    def loop(**kwargs: object) -> dict[str, object]:
        called.update(kwargs)
        return {"flow_run_id": "run-1", "turns": []}

    monkeypatch.setattr("cli.deploy.live_prefect_api", lambda settings: "http://127.0.0.1:1")
    monkeypatch.setattr("cli.deploy.flow_runs", lambda settings, api: nullcontext())
    monkeypatch.setattr(flows.loop, "loop", loop)
    args = ["loop", "--set", "base=nano", "--set", "sft.seed=3", "--set", "rl.updates=2"]
    result = runner.invoke(app, [*args, "--json"])
    assert result.exit_code == 0, f"{result.output}\n{result.exception!r}"

    sft, rl = called["sft"], called["rl"]
    assert isinstance(sft, SftSettings) and isinstance(rl, RlSettings)
    assert sft.model_fields_set == {"seed"} and rl.model_fields_set == {"updates"}
    assert called["base"] == NANO and called.get("parent_share") is None
    champion = home.parent / "champion"  # a later turn's start: a model trained from nano
    champion.mkdir()
    (champion / "config.json").write_text(json.dumps({"flywheel_base": NANO}))
    (champion / "tokenizer.json").write_text("{}")
    later = TrainRequest.of(
        {"dataset_id": "ds-" + "a" * 20, "base": str(champion), "sft": sft, "rl": rl}
    )
    assert later.sft.learning_rate == CONTINUED_DEFAULTS[NANO]["sft"]["learning_rate"]
    assert (later.sft.seed, later.rl.updates) == (3, 2)

    more = ["--set", "parent_share=0.25", "--set", "eval_samples=2", "--set", "dev_seed=5"]
    called.clear()
    runner.invoke(app, [*args, *more, "--json"])
    assert [called[k] for k in ("parent_share", "eval_samples", "dev_seed")] == [0.25, 2, 5]


def test_every_train_setting_given_reaches_the_trainer_flow(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The flow run itself is replaced (``tests/flows/test_trainer_flow.py`` runs it on the
    real Prefect server); the catalog the command resolves ``latest`` in is a real one."""
    from contextlib import nullcontext

    import flows.trainer
    from tests.training.builders import frozen_dataset, train_tasks

    dataset = frozen_dataset(home, train_tasks("toggle_phone_setting", 2)).version.id
    called: dict[str, object] = {}

    def trainer(**kwargs: object) -> dict[str, object]:
        called.update(kwargs)
        return {"flow_run_id": "run-1"}

    monkeypatch.setattr("cli.train.live_prefect_api", lambda settings: "http://127.0.0.1:1")
    monkeypatch.setattr("cli.train.flow_runs", lambda settings, api: nullcontext())
    monkeypatch.setattr(flows.trainer, "trainer", trainer)
    given = {"dev_seed": 3, "parent_share": 0.2, "eval_samples": 2, "dev_tasks": 9, "seed": 4}
    args = [arg for key, value in given.items() for arg in ("--set", f"{key}={value}")]
    result = runner.invoke(app, ["train", "--dataset", "latest", *args, "--json"])
    assert result.exit_code == 0, f"{result.output}\n{result.exception!r}"
    assert {key: called[key] for key in given} == given
    assert called["dataset_id"] == dataset
