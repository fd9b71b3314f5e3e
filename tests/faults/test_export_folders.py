"""``flywheel datasets export --out``: only a missing or empty folder, or an earlier export
and nothing more, is written; paths are resolved before they are checked; nothing of a
user's is removed."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agents.policies.scripted import ScriptedPolicy
from agents.runner import run_episode
from bench.training import freeze_successes
from cli.main import app
from contract import InvalidInputError, Split
from envs.sandbox import MobileSandbox
from envs.sandbox.templates.catalog import sample_tasks
from storage import Catalog
from training.export_folder import MANIFEST

Export = Callable[..., BaseException | None]
"""Runs the export with ``--out`` and flags; what it raised, if anything."""


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A state folder whose catalog holds one frozen version."""
    home = tmp_path_factory.mktemp("home")
    sandbox = MobileSandbox()
    runs = [
        run_episode(t, sandbox, ScriptedPolicy(), round_id="r")
        for t in sample_tasks(6, 2, sandbox, split=Split.TRAIN)
    ]
    with Catalog.open(home / "catalog.duckdb") as catalog:
        version = freeze_successes(catalog, runs, home / "shards", round_id="r", approver="t")
    return home, version.id


@pytest.fixture
def export(store: tuple[Path, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Export:
    home, dataset_id = store
    monkeypatch.setenv("FLYWHEEL_HOME", str(home))
    monkeypatch.chdir(tmp_path)

    def run(out: str, *flags: str) -> BaseException | None:
        result = CliRunner().invoke(app, ["datasets", "export", dataset_id, "--out", out, *flags])
        if result.exception is None:
            assert result.exit_code == 0, result.output
        return result.exception

    return run


def tree(folder: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(folder)): b"<link>" if p.is_symlink() else p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file() or p.is_symlink()
    }


def _refused(error: BaseException | None) -> InvalidInputError:
    assert isinstance(error, InvalidInputError), repr(error)
    assert error.field == "out"
    return error


def test_a_path_through_a_missing_folder_is_the_folder_it_names(
    export: Export, tmp_path: Path
) -> None:
    mine = tmp_path / "existing-folder"
    mine.mkdir()
    (mine / "thesis.tex").write_text("years of work")
    error = _refused(export("missing/../existing-folder", "--overwrite"))
    assert "that is" in str(error) and "not an earlier export" in str(error)
    assert tree(mine) == {"thesis.tex": b"years of work"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["existing-folder"]


def test_a_link_to_an_empty_folder_is_written_through(export: Export, tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    (tmp_path / "out").symlink_to(tmp_path / "empty")
    assert export("out") is None
    assert (tmp_path / "out").is_symlink()
    assert {MANIFEST, "README.md", "hf/dataset_dict.json"} <= set(tree(tmp_path / "empty"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty", "out"]


def test_what_is_not_exactly_an_earlier_export_is_never_replaced(
    export: Export, tmp_path: Path
) -> None:
    assert export("done") is None
    assert export("done", "--overwrite") is None  # an earlier export, untouched: replaced
    (tmp_path / "done" / "notes.md").write_text("mine")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "a.txt").write_text("a")
    (tmp_path / "to-full").symlink_to(tmp_path / "full")
    (tmp_path / "file").write_text("just a file")
    before = tree(tmp_path)
    for out, problem in [
        ("done", "holds files no export wrote: notes.md"),
        ("to-full", "not an earlier export"),
        ("file", "is a file, not a folder"),
        (".", "not an earlier export"),
        ("..", "not an earlier export"),
        ("done/hf/..", "holds files no export wrote"),
    ]:
        error = _refused(export(out, "--overwrite"))
        assert problem in str(error), (out, str(error))
    assert tree(tmp_path) == before


def test_the_state_folder_itself_is_refused(export: Export, store: tuple[Path, str]) -> None:
    home, _ = store
    before = tree(home)
    _refused(export(str(home), "--overwrite"))
    assert tree(home) == before
