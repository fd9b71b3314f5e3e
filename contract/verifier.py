"""Verifier specs (declarative JSON shipped with each task) and the verdicts they produce.

A spec is a list of checks; a verdict says which were met, with evidence. Kinds follow
MobilePA-Bench: an exact tool call, predicates over the backend's final state, a prescribed
action order, a valid collaboration pattern with sub-agents, and a rubric for an LLM judge.
``ui_state`` checks the final screen of a device (element attributes, XPath predicates).
``answer`` checks what the agent told the user when it finished, clarified or refused.
``no_collateral`` checks that nothing changed in the state beyond what the task allows.
"""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import Field, JsonValue, TypeAdapter, field_validator

from contract.actions import ActionKind
from contract.base import LateFields, Record

ConditionOp = Literal["eq", "ne", "contains", "icontains", "gt", "gte", "lt", "lte", "in"]


class Condition(Record):
    """``row[field] <op> value``."""

    field: str
    op: ConditionOp = "eq"
    value: JsonValue

    def describe(self) -> str:
        return f"{self.field} {self.op} {self.value!r}"


class _Check(Record):
    weight: float = Field(default=1.0, gt=0)
    note: str = Field(default="", description="why the check exists, for annotators")


class ExactToolCallCheck(_Check):
    """A successful call of ``tool`` whose arguments match (``subset``: the listed ones)."""

    kind: Literal["exact_tool_call"] = "exact_tool_call"
    tool: str
    arguments: dict[str, JsonValue] = Field(default_factory=dict)
    match: Literal["subset", "exact"] = "subset"

    def describe(self) -> str:
        return f"called {self.tool} with {self.match} arguments {self.arguments}"


class StatePredicateCheck(_Check):
    """Rows of a state collection (e.g. ``calendar.events``) that match ``where``.

    ``exists``: at least one; ``exactly_one``; ``absent``: none; ``unchanged``: the matching
    rows are the same in the initial and the final state (no side effect).
    """

    kind: Literal["state"] = "state"
    collection: str = Field(pattern=r"^[a-z_]+\.[a-z_]+$")
    where: tuple[Condition, ...] = ()
    expect: Literal["exists", "exactly_one", "absent", "unchanged"] = "exists"

    def describe(self) -> str:
        cond = " and ".join(c.describe() for c in self.where) or "any row"
        return f"{self.collection}: {self.expect} where {cond}"


class ActionPattern(Record):
    """Matches a successful action by kind, target (tool, key, skill, agent) and arguments."""

    kind: ActionKind
    target: str | None = None
    arguments: dict[str, JsonValue] = Field(default_factory=dict)

    def describe(self) -> str:
        args = f" {self.arguments}" if self.arguments else ""
        return f"{self.kind}:{self.target or '*'}{args}"


class ActionOrderCheck(_Check):
    """The successful actions contain ``sequence`` as an ordered subsequence."""

    kind: Literal["action_order"] = "action_order"
    sequence: tuple[ActionPattern, ...] = Field(min_length=1)

    def describe(self) -> str:
        return "in order: " + " -> ".join(p.describe() for p in self.sequence)


class CollaborationCheck(_Check, LateFields):
    """A valid collaboration with a sub-agent.

    The sub-agent was called successfully (with ``arguments`` as a subset, naming every
    term of ``mentions``: it was asked about the task's subject), at most
    ``max_calls`` times; if ``then`` is given, a matching action follows that call; no
    ``forbidden_agents`` was used.
    """

    late_fields: ClassVar[frozenset[str]] = frozenset({"mentions"})
    kind: Literal["collaboration"] = "collaboration"
    agent: str
    arguments: dict[str, JsonValue] = Field(default_factory=dict)
    mentions: tuple[str, ...] = Field(
        default=(), description="terms the call's instruction or arguments must name"
    )
    then: ActionPattern | None = None
    forbidden_agents: tuple[str, ...] = ()
    max_calls: int = Field(default=3, ge=1)

    def describe(self) -> str:
        text = f"delegated to the {self.agent} agent"
        if self.then is not None:
            text += f", then {self.then.describe()}"
        return text


class AnswerCheck(_Check, LateFields):
    """The episode ended ``via`` finish / clarify / refuse, saying every term of ``contains``.

    Every value of ``shown`` appeared in a successful step's result before the end: the
    agent read the record it answers about instead of guessing.
    """

    late_fields: ClassVar[frozenset[str]] = frozenset({"shown"})
    kind: Literal["answer"] = "answer"
    via: Literal["finish", "clarify", "refuse"] = "finish"
    contains: tuple[str, ...] = ()
    shown: tuple[str, ...] = ()

    def describe(self) -> str:
        terms = f" mentioning {list(self.contains)}" if self.contains else ""
        read = f" after reading {list(self.shown)}" if self.shown else ""
        return f"ended with {self.via}{terms}{read}"


class UIStateCheck(_Check):
    """Elements of the final screen (a device's UI tree, or the sandbox's rendering of
    its GUI state) that ``xpath`` selects, e.g. ``//*[@id='perm:transit:camera']``.

    The elements that count are those selected that also carry ``attributes`` (e.g.
    ``{"checked": "true"}``, compared as text): ``exists``: at least one; ``exactly_one``;
    ``absent``: none.
    """

    kind: Literal["ui_state"] = "ui_state"
    xpath: str = Field(min_length=1, max_length=1000)
    attributes: dict[str, str] = Field(default_factory=dict)
    expect: Literal["exists", "exactly_one", "absent"] = "exists"

    @field_validator("xpath")
    @classmethod
    def _parses(cls, value: str) -> str:
        from lxml import etree

        try:
            etree.XPath(value)
        except etree.XPathSyntaxError as exc:
            raise ValueError(f"xpath {value!r} does not parse: {exc}") from None
        return value

    def describe(self) -> str:
        attrs = f" with {self.attributes}" if self.attributes else ""
        return f"screen: {self.expect} {self.xpath}{attrs}"


ChangeOp = Literal["created", "updated", "deleted"]


class AllowedChange(Record):
    """A change of the state a task may make without it counting as collateral damage.

    ``created``: up to ``at_most`` new rows of ``collection`` (None: any number);
    ``updated``: the rows ``ids`` (empty: any row), changing only ``fields`` (empty: any);
    ``deleted``: the rows ``ids`` (empty: any row).
    """

    collection: str = Field(pattern=r"^[a-z_]+\.[a-z_]+$")
    op: ChangeOp
    ids: tuple[str, ...] = ()
    fields: tuple[str, ...] = ()
    at_most: int | None = Field(default=None, ge=1)
    reason: str = Field(default="", description="where the allowance comes from")

    def describe(self) -> str:
        if self.op == "created":
            count = "any number of" if self.at_most is None else f"up to {self.at_most}"
            return f"{count} new {self.collection}"
        rows = ", ".join(self.ids) if self.ids else "any row"
        fields = f" ({', '.join(self.fields)})" if self.fields else ""
        return f"{self.op} {self.collection} {rows}{fields}"


class CollateralCheck(_Check):
    """Every difference between the initial and the final state is one of ``allowed``.

    The allowances come from the reference plan's own changes plus declared tolerances,
    so the check is data: a stored trajectory can be checked again against it.
    """

    kind: Literal["no_collateral"] = "no_collateral"
    allowed: tuple[AllowedChange, ...] = ()

    def describe(self) -> str:
        return "no collateral changes"


class RubricCheck(_Check):
    """What rules cannot check, judged by an LLM; unmet when no judge is configured."""

    kind: Literal["rubric"] = "rubric"
    criteria: str = Field(min_length=1)

    def describe(self) -> str:
        return f"rubric: {self.criteria}"


class BfclCheck(_Check):
    """BFCL's multi-turn check of the BFCL task ``task``: after each user turn with
    ground-truth calls, every involved instance's state equals the ground truth's and the
    ground truth's results were produced (``envs.bfcl.verify``; the episode's calls are
    split into turns at its finish and clarify actions)."""

    kind: Literal["bfcl"] = "bfcl"
    task: str = Field(pattern=r"^multi_turn_[a-z_]+_\d+$")

    def describe(self) -> str:
        return f"BFCL {self.task}: state and results after every user turn"


Check = Annotated[
    ExactToolCallCheck
    | StatePredicateCheck
    | ActionOrderCheck
    | CollaborationCheck
    | AnswerCheck
    | UIStateCheck
    | CollateralCheck
    | RubricCheck
    | BfclCheck,
    Field(discriminator="kind"),
]
CHECK_KINDS: tuple[str, ...] = (
    "exact_tool_call",
    "state",
    "action_order",
    "collaboration",
    "answer",
    "ui_state",
    "no_collateral",
    "rubric",
    "bfcl",
)
check_adapter: TypeAdapter[Check] = TypeAdapter(Check)


class VerifierSpec(Record):
    """The completion criteria of a task: passed when every check is met."""

    checks: tuple[Check, ...] = Field(min_length=1)


class CheckResult(Record, LateFields):
    kind: str
    description: str
    met: bool
    weight: float = 1.0
    evidence: JsonValue = None
    credit: float | None = Field(default=None, ge=0.0, le=1.0)
    """How much of an unmet check the episode did (``envs.verification``: the share of a
    state check's conditions its best changed row meets, the share of an order's steps
    done in order, the share of an exact call's arguments a call of that tool had); None
    when nothing of it was done, or the check was met."""

    late_fields: ClassVar[frozenset[str]] = frozenset({"credit"})

    @property
    def earned(self) -> float:
        """1 for a met check, else its partial credit."""
        return 1.0 if self.met else (self.credit or 0.0)


GATE_KINDS: frozenset[str] = frozenset({"no_collateral"})
"""Checks that are conditions of passing, not progress: doing nothing meets them."""


class Verdict(Record):
    """Passed, a weighted score, progress (the share of checks met), evidence.

    Passed needs every check met. Score and progress count the checks of what the task
    asks for; gates (``GATE_KINDS``) only decide passing, so an episode that does nothing
    gains no progress from having done no harm. ``partial_progress`` (CARE's R_prog) also
    counts what was done of the checks not met."""

    passed: bool
    score: float = Field(ge=0.0, le=1.0)
    progress: float = Field(ge=0.0, le=1.0)
    checks: tuple[CheckResult, ...] = ()

    @classmethod
    def from_checks(cls, results: tuple[CheckResult, ...]) -> Verdict:
        if not results:
            return cls(passed=False, score=0.0, progress=0.0)
        counted = [r for r in results if r.kind not in GATE_KINDS] or list(results)
        met = [r for r in counted if r.met]
        total_weight = sum(r.weight for r in counted)
        return cls(
            passed=all(r.met for r in results),
            score=round(sum(r.weight for r in met) / total_weight, 6),
            progress=round(len(met) / len(counted), 6),
            checks=results,
        )

    @property
    def partial_progress(self) -> float:
        """The mean of what each counted check earned (``CheckResult.earned``): an
        episode that booked the right table for the wrong time is ahead of one that
        booked nothing, though neither met the check."""
        counted = [r for r in self.checks if r.kind not in GATE_KINDS] or list(self.checks)
        if not counted:
            return 0.0
        return round(sum(r.earned for r in counted) / len(counted), 6)

    @property
    def harmed(self) -> bool:
        """A gate failed: the episode changed what its task does not allow."""
        return any(r.kind in GATE_KINDS and not r.met for r in self.checks)
