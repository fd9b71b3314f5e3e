"""``ui_state`` checks: on the sandbox's rendering of its GUI world, and on screens given
directly (no server)."""

from __future__ import annotations

from typing import Any

import pytest

from agents.policies.scripted import ScriptedPolicy
from agents.runner import run_episode
from contract import (
    Outcome,
    TaskSpec,
    Termination,
    UIStateCheck,
    VerifierSpec,
)
from envs.backend import PrivilegedEvidence
from envs.sandbox import MobileSandbox
from envs.sandbox.subagents import GUI_APPS, GUI_PERMISSIONS
from envs.sandbox.templates.catalog import instantiate, template_named
from envs.screen import PERMISSIONS, permission_id, render_gui_world
from envs.verification import verify
from tests.curation.builders import FixedPolicy

CAMERA = permission_id("transit", "camera")
GRANTED = UIStateCheck(xpath=f"//*[@id='{CAMERA}']", attributes={"checked": "true"})


def _permission_task(sandbox: MobileSandbox, *extra: UIStateCheck) -> TaskSpec:
    """Allow the transit app to use the camera, with ``extra`` checks on the screen."""
    task = instantiate(
        template_named("grant_app_permission"),
        5,
        sandbox,
        params={"app": "transit", "permission": "camera"},
    )
    checks = (*task.verifier.checks, *extra)
    # model_copy keeps the old id; validating again derives the one of the new content.
    updated = task.model_copy(update={"verifier": VerifierSpec(checks=checks), "id": ""})
    return TaskSpec.model_validate(updated.model_dump())


def _screen(**granted: bool) -> str:
    """The sandbox's GUI world as a screen, with the named transit permissions granted."""
    world = MobileSandbox().build_world(0)
    for name, on in granted.items():
        world[PERMISSIONS][f"transit:{name}"]["granted"] = on
    return render_gui_world(world)


def _check(check: UIStateCheck, screen: str | None) -> tuple[bool, Any]:
    evidence = PrivilegedEvidence(initial={}, final={}, screen=screen)
    verdict = verify(VerifierSpec(checks=(check,)), [], evidence)
    return verdict.checks[0].met, verdict.checks[0].evidence


# -- on the sandbox -----------------------------------------------------------------------


def test_the_reference_plan_passes_a_ui_state_check_on_the_sandbox() -> None:
    sandbox = MobileSandbox()
    task = _permission_task(sandbox, GRANTED)
    assert task.template == "grant_app_permission"
    trajectory = run_episode(task, sandbox, ScriptedPolicy())
    assert trajectory.metadata.outcome is Outcome.SUCCESS
    result = trajectory.verdict.checks[-1]
    assert (result.kind, result.met) == ("ui_state", True)
    assert result.description == f"screen: exists //*[@id='{CAMERA}'] with {{'checked': 'true'}}"
    assert result.evidence == {
        "selected": 1,
        "matching": 1,
        "elements": [{"id": CAMERA, "text": "camera", "checked": "true"}],
    }
    # The sandbox shows a screen only to tasks that check one.
    screen = sandbox.evidence().screen
    assert screen is not None and f'id="{CAMERA}"' in screen


def test_the_check_fails_when_the_plan_is_not_run() -> None:
    sandbox = MobileSandbox()
    task = _permission_task(sandbox, GRANTED)
    trajectory = run_episode(task, sandbox, FixedPolicy([]))  # finishes at once
    assert trajectory.metadata.termination is Termination.FINISHED
    assert trajectory.metadata.outcome is Outcome.FAILURE
    result = trajectory.verdict.checks[-1]
    assert (result.kind, result.met) == ("ui_state", False)
    assert result.evidence == {
        "selected": 1,
        "matching": 0,
        "elements": [{"id": CAMERA, "text": "camera", "checked": "false"}],
    }


def test_a_task_without_ui_state_checks_shows_no_screen() -> None:
    sandbox = MobileSandbox()
    task = _permission_task(sandbox)
    assert run_episode(task, sandbox, ScriptedPolicy()).metadata.outcome is Outcome.SUCCESS
    assert sandbox.evidence().screen is None
    # The same sandbox, on a task that checks the screen, shows one again.
    sandbox.reset(_permission_task(sandbox, GRANTED))
    assert sandbox.evidence().screen is not None


# -- expectations -------------------------------------------------------------------------


def test_exists_needs_a_selected_element_with_the_attributes() -> None:
    assert _check(GRANTED, _screen(camera=True))[0] is True
    assert _check(GRANTED, _screen())[0] is False
    missing = UIStateCheck(xpath="//*[@id='perm:transit:heart_rate']")
    met, info = _check(missing, _screen())
    assert met is False
    assert info == {"selected": 0, "matching": 0, "elements": []}


def test_exactly_one_counts_the_matching_elements() -> None:
    transit = "//toggle[starts-with(@id, 'perm:transit:')]"
    one = UIStateCheck(xpath=transit, attributes={"checked": "true"}, expect="exactly_one")
    met, info = _check(one, _screen(camera=True))
    assert met is True
    shown = min(len(GUI_PERMISSIONS), 5)
    assert (info["selected"], info["matching"]) == (len(GUI_PERMISSIONS), 1)
    assert len(info["elements"]) == shown
    assert _check(one, _screen(camera=True, location=True))[0] is False
    assert _check(one, _screen())[0] is False
    any_toggle = UIStateCheck(xpath=transit, expect="exactly_one")
    assert _check(any_toggle, _screen())[0] is False  # several selected, no attributes asked


def test_absent_is_met_when_nothing_matches() -> None:
    not_granted = UIStateCheck(
        xpath=f"//*[@id='{CAMERA}']", attributes={"checked": "true"}, expect="absent"
    )
    assert _check(not_granted, _screen())[0] is True
    assert _check(not_granted, _screen(camera=True))[0] is False
    no_such = UIStateCheck(xpath="//*[@id='perm:transit:heart_rate']", expect="absent")
    assert _check(no_such, _screen())[0] is True
    assert _check(UIStateCheck(xpath="//toggle", expect="absent"), _screen())[0] is False


def test_attributes_are_compared_as_text() -> None:
    by_text = UIStateCheck(
        xpath="//toggle", attributes={"text": "camera", "checked": "false"}, expect="exists"
    )
    met, info = _check(by_text, _screen())
    assert met is True and info["matching"] == len(GUI_APPS)  # one camera toggle per app
    shouting = UIStateCheck(xpath=f"//*[@id='{CAMERA}']", attributes={"checked": "TRUE"})
    assert _check(shouting, _screen(camera=True))[0] is False


def test_evidence_shows_at_most_five_elements() -> None:
    met, info = _check(UIStateCheck(xpath="//toggle"), _screen())
    assert met is True
    assert info["selected"] == info["matching"] > 5
    assert len(info["elements"]) == 5


# -- no screen, or a broken one -----------------------------------------------------------


def test_without_a_screen_the_check_is_unmet_with_an_error() -> None:
    met, info = _check(GRANTED, None)
    assert met is False
    assert info == {"error": "this backend has no screen"}


def test_a_screen_that_is_not_xml_is_unmet_with_an_error() -> None:
    met, info = _check(GRANTED, "<screen><toggle></screen>")
    assert met is False
    assert info["error"].startswith("ScreenError: the page source is not XML")


@pytest.mark.parametrize("expect", ["exists", "exactly_one", "absent"])
def test_every_expectation_is_unmet_without_a_screen(expect: str) -> None:
    check = UIStateCheck.model_validate({"xpath": "//toggle", "expect": expect})
    assert _check(check, None)[0] is False
