"""Identifiers that would become paths or titles are refused where they enter, by shape,
and whatever reaches a path stays inside its root."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli.main import app
from contract import (
    DATASET_ID,
    FINGERPRINT,
    MODEL_REF,
    PROJECT_PREFIX,
    ROUND_ID,
    IdShape,
    InvalidInputError,
    safe_component,
)
from flows.deployment import deployment
from flows.round import flywheel_round
from flows.round_stages import shard_path
from storage.files import path_inside
from training.settings import TrainRequest

ESCAPES = [
    "../../escaped",
    "/tmp/absolute",
    "a/b",
    "..",
    ".",
    ".hidden",
    "-flag",
    "x" * 300,
    "nul\x00byte",
    "new\nline",
    "back\\slash",
    "space in",
    "ünïcode",
    "",
]
"""What no identifier may be: it climbs out, is absolute, nests, hides, looks like an
option, is unbounded, holds a control character, a separator or a space."""


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("FLYWHEEL_HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    return tmp_path / "home"


def refused(*args: str) -> InvalidInputError:
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code != 0, result.output
    assert isinstance(result.exception, InvalidInputError), repr(result.exception)
    return result.exception


@pytest.mark.parametrize("value", ESCAPES)
@pytest.mark.parametrize(
    ("args", "field"),
    [
        (("round", "--round-id"), "--round-id"),
        (("gate", "status", "--round"), "--round"),
        (("gate", "sync", "--round"), "--round"),
        (("datasets", "show", "--"), "dataset_id"),
        (("datasets", "export", "--out", "x", "--"), "dataset_id"),
        (("feedback", "show", "--"), "report_id"),
        (("train", "--dataset"), "--dataset"),
        (("deploy", "--model"), "--model"),
    ],
    ids=lambda v: "-".join(v) if isinstance(v, tuple) else v,
)
def test_the_cli_refuses_an_identifier_by_its_shape_before_anything_is_made(
    home: Path, args: tuple[str, ...], field: str, value: str
) -> None:
    error = refused(*args, value)
    assert error.field == field
    assert "is not a" in error.problem and "like" in error.problem
    assert not home.exists()
    assert not (home.parent / "escaped").exists()


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda v: flywheel_round.fn(round_id=v), "round_id"),
        (lambda v: deployment.fn(model=v), "model"),
        (lambda v: TrainRequest.of({"dataset_id": v}), "dataset_id"),
    ],
    ids=["round", "deployment", "trainer"],
)
def test_prefect_forms_refuse_them_too(home: Path, call: object, field: str) -> None:
    """A flow's parameters arrive from the UI's forms as they are: checked in the flow."""
    for value in ESCAPES:
        with pytest.raises(InvalidInputError) as caught:
            call(value)  # type: ignore[operator]
        assert caught.value.field == field
    assert not home.exists()


@pytest.mark.parametrize(
    ("shape", "good"),
    [
        (ROUND_ID, ["round-3f2a9c1b7d0e", "r", "loop.1_a-b", "R" * 128]),
        (DATASET_ID, ["ds-" + "0123456789abcdef0123"]),
        (FINGERPRINT, ["fp-" + "a" * 20]),
        (MODEL_REF, ["latest", "candidate", "model-" + "f" * 20, "tiny-sft-rl-ds-1-2026"]),
        (PROJECT_PREFIX, ["flywheel", "Team A review", "q3.run_2"]),
    ],
)
def test_each_shape_takes_what_the_flywheel_makes(shape: IdShape, good: list[str]) -> None:
    assert all(shape.matches(v) for v in good)
    spaced = shape is PROJECT_PREFIX  # a title, not a path: "<prefix> <round>"
    assert not any(shape.matches(v) for v in ESCAPES if not (spaced and v == "space in"))


def test_a_path_built_from_parts_never_leaves_its_root(tmp_path: Path) -> None:
    root = tmp_path / "rounds"
    root.mkdir()
    (tmp_path / "outside").mkdir()
    (root / "link").symlink_to(tmp_path / "outside")
    assert path_inside(root, "r1", "shards", "s.parquet") == root.resolve() / "r1/shards/s.parquet"
    for parts in (("..", "x"), ("/etc", "passwd"), ("a", "..", "..", "x"), ("link", "file")):
        with pytest.raises(InvalidInputError, match="leads outside"):
            path_inside(root, *parts)
    with pytest.raises(InvalidInputError):
        shard_path(tmp_path, "../../escaped", "s")  # whatever got past the entry points


def test_a_model_name_from_any_base_folder_is_one_safe_component() -> None:
    for name in ("..", "my model", "ö/x", "-x", ".x", "", "a\x00b"):
        safe = safe_component(name, "base")
        assert MODEL_REF.matches(safe), safe
        assert "/" not in safe and safe not in ("..", ".")
