"""The command's help: every option with a fixed set of values shows them, taken from
where the values are defined."""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from typing import Any, get_args

import typer
from typer.testing import CliRunner

from cli.main import app
from cli.output import BUILT_BASES, COLLECTORS, EXPORT_FORMATS, choices
from contract import TrainingMethod
from envs.bfcl.tasks import CATEGORIES, SUITE
from flows.loop import loop
from flows.settings import APPROVAL_MODES, DEVICE_ROUTES, GateName, PolicyName
from training import export, settings

FREE_TEXT = {
    ("verify", "--round"),
    ("verify", "--dataset"),
    ("round", "--round-id"),
    ("train", "--dataset"),
    ("train", "--base"),  # tiny, nano or a model folder
    ("train", "--set"),
    ("loop", "--set"),
    ("tasks strength", "--template"),
    ("bench loop", "--set"),
    ("bench seeds", "--set"),
    ("datasets export", "--push-to-hub"),
    ("gate status", "--round"),
    ("gate sync", "--round"),
    ("deploy rollback", "--reason"),
    ("serve", "--pool"),  # a work pool's name
    ("worker", "--pool"),
}
"""Options whose values are open: ids, names, folders, assignments, free text."""


def _options() -> Iterator[tuple[str, Any]]:
    command = typer.main.get_command(app)

    def walk(node: Any, path: list[str]) -> Iterator[tuple[str, Any]]:
        if hasattr(node, "commands"):
            for name, sub in node.commands.items():
                yield from walk(sub, [*path, name])
            return
        for param in node.params:
            if param.param_type_name == "option":
                yield " ".join(path), param

    yield from walk(command, [])


def test_every_option_of_fixed_values_lists_them() -> None:
    context = typer.Context(typer.main.get_command(app))
    shown = {
        (path, option.opts[0]): str(option.metavar or option.display_type(context))
        for path, option in _options()
    }
    free = {key for key, shown_as in shown.items() if "str" in shown_as}
    assert free == FREE_TEXT, "a text option without its choices, or a stale allow-list"
    expected = {
        ("episode", "--policy"): get_args(PolicyName),
        ("round", "--policy"): get_args(PolicyName),
        ("round", "--gate"): get_args(GateName),
        ("round", "--approval"): APPROVAL_MODES,
        ("round", "--devices"): DEVICE_ROUTES,
        ("train", "--method"): tuple(m.value for m in TrainingMethod),
        ("loop", "--collect-with"): get_args(
            inspect.signature(loop.fn).parameters["collect_with"].annotation
        ),
        ("bench loop", "--base"): settings.BUILT_BASES,
        ("bench seeds", "--base"): settings.BUILT_BASES,
        ("datasets export", "--format"): export.FORMATS,
        ("eval", "--suite"): (SUITE,),
        ("eval", "--policy"): get_args(PolicyName),
        ("eval", "--category"): CATEGORIES,
    }
    for key, values in expected.items():
        assert shown[key] == choices(values), key
    assert (
        expected["loop", "--collect-with"],
        settings.BUILT_BASES,
        export.FORMATS,
    ) == (COLLECTORS, BUILT_BASES, EXPORT_FORMATS)


WIDE = {"COLUMNS": "200", "TERMINAL_WIDTH": "200"}
"""A terminal wide enough for a sentence of help on one line."""


def test_help_reads_as_text_not_as_source() -> None:
    """Docstrings become paragraphs (no line broken where the source broke it), code
    marks and TOML tables show as written."""
    runner = CliRunner()
    paths = sorted({tuple(path.split()) for path, _ in _options()})
    for path in [(), *paths]:
        shown = runner.invoke(app, [*path, "--help"], env=WIDE).output
        assert "``" not in shown, path
    top = runner.invoke(app, ["--help"], env=WIDE).output
    assert "construct, collect, curate, gate, propose, approve, freeze" in top
    assert "as the Prefect flow trainer: SFT and/or online RL" in top
    devices = runner.invoke(app, ["devices", "--help"], env=WIDE).output
    assert "The device pool ([[devices.pool]])" in devices


WITHOUT_JSON = {
    "serve": "serves deployments until stopped",
    "worker": "runs flow runs until stopped",
    "contract schema": "prints JSON Schema already",
    "feedback schema": "prints JSON Schema already",
}
"""Commands without ``--json``, and why."""


def test_every_command_but_the_long_running_and_the_schemas_takes_json() -> None:
    def walk(node: Any, path: list[str]) -> Iterator[tuple[str, Any]]:
        if hasattr(node, "commands"):
            for name, sub in node.commands.items():
                yield from walk(sub, [*path, name])
        else:
            yield " ".join(path), node

    commands = dict(walk(typer.main.get_command(app), []))
    lacking = {
        path
        for path, command in commands.items()
        if not any("--json" in getattr(p, "opts", ()) for p in command.params)
    }
    assert len(commands) > 40 and "bench curation" in commands
    assert lacking == set(WITHOUT_JSON)
