"""The BFCL world: tasks read from the package, calls parsed without evaluation and run
directly, failures as results, and verdicts whose evidence names what differs."""

from __future__ import annotations

import pytest

from contract import InvalidInputError
from envs.bfcl.tasks import CATEGORIES, BfclCall, function_docs, load_tasks, parse_call
from envs.bfcl.tasks import _methods as methods_of
from envs.bfcl.verify import verify_episode
from envs.bfcl.world import ERROR_PREFIX, BfclWorld

FILE_SYSTEM = ("GorillaFileSystem",)


def test_every_multi_turn_category_has_its_200_tasks_with_a_ground_truth_per_turn() -> None:
    for category in CATEGORIES:
        tasks = load_tasks(category)
        assert len(tasks) == 200
        assert all(len(t.turns) == len(t.ground_truth) for t in tasks)
    miss_param = load_tasks("miss_param")
    assert all(any(not turn for turn in t.ground_truth) for t in miss_param)
    miss_func = load_tasks("miss_func")
    assert all(t.held_back for t in miss_func)
    with pytest.raises(InvalidInputError, match="category"):
        load_tasks("memory")


def test_a_call_is_parsed_as_literals_with_positional_arguments_named() -> None:
    methods = methods_of(FILE_SYSTEM)
    assert parse_call("sort('final_report.pdf')", methods) == BfclCall(
        "sort", {"file_name": "final_report.pdf"}
    )
    assert parse_call("tail(file_name='log.txt',lines=20)", methods) == BfclCall(
        "tail", {"file_name": "log.txt", "lines": 20}
    )
    for text, why in (
        ("cd(folder=__import__('os').getcwd())", "not a literal"),
        ("shutil.rmtree('/')", "by name"),
        ("rm_rf(folder='x')", "unknown function"),
        ("cd(folder='a', nope=1)", "nope"),
        ("cd(", "not a call"),
    ):
        with pytest.raises(InvalidInputError, match=why):
            parse_call(text, methods)


def test_a_world_runs_calls_and_returns_failures_as_results() -> None:
    task = load_tasks("base")[0]
    world = BfclWorld(task)
    assert "mv" in world.functions and "post_tweet" in world.functions
    assert (
        world.call(BfclCall("cd", {"folder": "document"}))
        == '{"current_working_directory": "document"}'
    )
    assert world.call(BfclCall("no_such", {})).startswith(ERROR_PREFIX)
    assert world.call(BfclCall("cd", {"nope": 1})).startswith(ERROR_PREFIX)
    mentions = ["@a"]
    world.call(BfclCall("post_tweet", {"content": "hi", "tags": [], "mentions": mentions}))
    world.call(BfclCall("post_tweet", {"content": "ho", "tags": [], "mentions": mentions}))
    assert mentions == ["@a"], "a method gets a copy of the arguments"


def test_a_wrong_call_fails_its_turn_with_the_differing_attribute_as_evidence() -> None:
    task = load_tasks("base")[0]
    turns = [list(turn) for turn in task.ground_truth]
    assert verify_episode(task, turns).passed
    turns[0][1] = BfclCall("mkdir", {"dir_name": "tmp"})  # the task asks for "temp"
    verdict = verify_episode(task, turns)
    assert not verdict.passed
    failed = [c for c in verdict.checks if not c.met]
    assert failed[0].kind == "bfcl_state" and failed[0].description.startswith("turn 1")
    assert "GorillaFileSystem" in failed[0].evidence  # type: ignore[operator]
    late = [list(turn) for turn in task.ground_truth]
    late[-1] = late[-1][:-1]  # the last turn's diff left out
    assert 0 < verify_episode(task, late).progress < 1
    assert not verify_episode(task, turns[:-1]).passed
    empty = [list(turn) for turn in task.ground_truth]
    empty[2] = []
    unanswered = verify_episode(task, empty)
    assert next(c.evidence for c in unanswered.checks if not c.met) == {"empty_turn": True}


def test_function_documents_are_bfcls_for_the_classes_asked() -> None:
    docs = function_docs(("MathAPI", "TwitterAPI"))
    names = {d["name"] for d in docs}
    assert {"mean", "post_tweet"} <= names
    assert all("parameters" in d for d in docs)
    with pytest.raises(InvalidInputError, match="class"):
        function_docs(("MemoryAPI_kv",))
