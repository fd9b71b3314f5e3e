"""The loop benchmark keeps its state folder only where it is told, and only a fresh one
(the benchmark's figures themselves are measured, never asserted: README)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from bench.loop import run_loop_benchmark
from cli.main import app
from contract import InvalidInputError


@pytest.mark.parametrize("kind", ["folder with a file", "file"])
def test_a_workdir_that_is_not_an_empty_folder_is_refused_untouched(
    tmp_path: Path, kind: str
) -> None:
    workdir = tmp_path / "state"
    if kind == "file":
        workdir.write_text("notes")
        kept = workdir
    else:
        workdir.mkdir()
        kept = workdir / "catalog.duckdb"
        kept.write_text("an earlier loop")
    with pytest.raises(InvalidInputError) as refused:
        run_loop_benchmark(rounds=1, tasks=10, workdir=workdir)
    assert refused.value.field == "workdir" and str(workdir) in str(refused.value)
    assert kept.read_text() in {"notes", "an earlier loop"}, "nothing there is touched"

    result = CliRunner().invoke(app, ["bench", "loop", "--workdir", str(workdir)])
    assert result.exit_code == 1 and isinstance(result.exception, InvalidInputError)
    assert result.exception.field == "workdir"


def test_the_parent_share_is_the_one_trainer_setting_beside_sft_and_rl_and_a_seed_replicates(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    called: dict[str, object] = {}

    def run(*args: object, **kwargs: object) -> dict[str, object]:
        called.update(kwargs)
        return {"base": "nano", "turns": []}

    monkeypatch.setattr("bench.loop.run_loop_benchmark", run)
    runner = CliRunner()
    ran = runner.invoke(app, ["bench", "loop", "--set", "parent_share=0.3", "--json"])
    assert ran.exit_code == 0, f"{ran.output}\n{ran.exception!r}"
    assert called["parent_share"] == 0.3 and called.pop("seed") == 0
    replicate = runner.invoke(app, ["bench", "loop", "--seed", "2", "--json"])
    assert replicate.exit_code == 0 and called.pop("seed") == 2, replicate.output
    assert runner.invoke(app, ["bench", "loop", "--seed", "-1"]).exit_code == 2

    for args, field, says in [
        (["--set", "parent_share=1.5"], "parent_share", "less than 1"),
        (["--set", "dev_tasks=3"], "--set", "sets sft.*, rl.*, parent_share"),
    ]:
        refused = runner.invoke(app, ["bench", "loop", *args])
        assert isinstance(refused.exception, InvalidInputError), refused.output
        assert refused.exception.field == field and says in str(refused.exception)
    seeds = runner.invoke(app, ["bench", "seeds", "--set", "parent_share=0.3"])
    assert isinstance(seeds.exception, InvalidInputError)
    assert "the benchmark sets sft.*, rl.*" in str(seeds.exception)
