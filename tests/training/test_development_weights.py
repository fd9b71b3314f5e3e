"""Template weights in the development set's scores: each weight is how far its
template alone moves the Overall, and the default set rests on many templates."""

from __future__ import annotations

import math

import pytest

from contract import Capability, Split
from envs.sandbox import MobileSandbox
from envs.sandbox.templates.development import DevelopmentSet, draw_development_set, part_of
from envs.sandbox.templates.registry import ALL_TEMPLATES
from training.development_weights import (
    concentration,
    development_concentration,
    template_weights,
)
from training.evaluate import capability_scores, overall_score

SANDBOX = MobileSandbox()


@pytest.fixture(scope="module")
def default_set() -> DevelopmentSet:
    """The trainer's default draw, at the size the loop benchmarks use."""
    return draw_development_set(240, 7, SANDBOX)


def test_a_weight_is_how_far_its_template_alone_moves_the_overall(
    default_set: DevelopmentSet,
) -> None:
    seen = [t for t in default_set.tasks if part_of(t) == "seen"]
    weights = template_weights(seen)
    assert math.isclose(sum(weights.values()), 1.0)
    assert set(weights) == {t.template for t in seen}
    for template in sorted(weights)[::5]:
        rates = {t.fingerprint: float(t.template == template) for t in seen}
        overall = overall_score(capability_scores(seen, rates))
        assert overall is not None
        assert math.isclose(overall, weights[template]), template


def test_effective_templates_count_equal_weights_and_shrink_with_a_heavy_one() -> None:
    even = concentration({"a": 0.25, "b": 0.25, "c": 0.25, "d": 0.25}, tasks=8)
    assert math.isclose(even.effective_templates, 4.0)
    assert (even.templates, even.tasks, even.heaviest) == (4, 8, "a")
    heavy = concentration({"a": 0.7, "b": 0.1, "c": 0.1, "d": 0.1}, tasks=8)
    assert heavy.effective_templates < 2.0
    assert (heavy.heaviest, heavy.heaviest_weight) == ("a", 0.7)


def test_each_part_reports_its_overall_and_the_capabilities_it_measures(
    default_set: DevelopmentSet,
) -> None:
    parts = development_concentration(default_set.tasks)
    assert set(parts) == {"seen", "unseen"}
    seen = parts["seen"]
    assert list(seen) == ["overall", *(c.value for c in Capability)]
    assert seen["overall"].tasks == sum(part_of(t) == "seen" for t in default_set.tasks)
    for capability in Capability:
        having = [
            t for t in default_set.tasks if part_of(t) == "seen" and capability in t.capabilities
        ]
        assert seen[capability.value].tasks == len(having)
        assert seen[capability.value].templates == len({t.template for t in having})


def test_the_default_seen_part_rests_on_many_templates(default_set: DevelopmentSet) -> None:
    """Every training template of a capability offers enough held-out parameter draws
    that no one template decides a capability's score (README, "Runs of one recipe,
    measured": with two templates holding most of skills, one template moved the Overall
    by up to 0.09 between trainings of one recipe)."""
    seen = development_concentration(default_set.tasks)["seen"]
    assert seen["overall"].effective_templates >= 15
    assert seen["overall"].heaviest_weight <= 0.10
    for capability in (Capability.MEMORY, Capability.SKILLS, Capability.SUBAGENT):
        trained = {
            t.name for t in ALL_TEMPLATES if t.split is Split.TRAIN and capability in t.capabilities
        }
        assert seen[capability].templates == len(trained), capability
        assert seen[capability].effective_templates >= 4.5, capability
