"""What a Label Studio task shows, what the curator pre-fills, and what comes back.

:func:`task_data` renders a gate item into the task's data: the trajectory as one block of
HTML (every value from the trajectory passes through :func:`html.escape`; only inline CSS,
no scripts, no external resources) plus plain fields for the Data Manager's columns.
Characters that do not show or that reorder text (bidi controls such as U+202E,
zero-width characters, NUL and other controls) are shown as their escapes (``\u202e``),
marked, and the step that holds one is flagged: a trajectory reads as what it is.
:func:`prediction` turns the curator's suggestion into a pre-annotation, and
:func:`parse_annotation` reads an annotation's ``result`` back into typed values.

Step numbers are the contract's ``Step.index`` everywhere: in the timeline, in the
``erroneous_steps`` choices, and in :attr:`AnnotationValues.erroneous_steps`.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from html import escape
from pathlib import PurePosixPath
from typing import Any

import orjson
from pydantic import JsonValue

from contract import (
    TURN_ENDING_KINDS,
    CheckResult,
    Clarify,
    CurationRecord,
    Finish,
    InvalidInputError,
    Outcome,
    Refuse,
    ReviewDecision,
    Routing,
    Step,
    ToolCall,
    Trajectory,
)
from curation.attribution import erroneous_steps
from curation.routing import SAFETY_SENSITIVE_TOOLS
from human_gate.base import GateItem
from human_gate.label_studio.labeling import (
    ANSWER,
    ERRONEOUS_STEPS,
    OBJECT_NAME,
    REJECT_REASON,
    VERDICT,
    RejectReason,
)

CURATOR_VERSION = "1"
"""Version of the curator's rules, named in the prediction's ``model_version``."""
CALL_CHARS = 140
RESULT_CHARS = 120
TEXT_CHARS = 200
EVIDENCE_CHARS = 160

ArtifactUrl = Callable[[str], str | None]
"""Maps an artifact reference (a screenshot's or page source's path in the artifact store)
to a URL the annotator's browser can load, or None to show the reference as text."""
IMAGE_SUFFIXES = frozenset({".png", ".jpg", ".jpeg", ".gif", ".webp"})
"""Artifacts shown as thumbnails; others (page sources: ``.xml``) are links."""

# -- styles (inline only: Label Studio embeds the HTML in its own page) ------------------

_FONT = "font:13px/1.45 system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;color:#1f2328"
_MONO = "font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:12px"
_MUTED = "color:#59636e"
_CELL = "padding:3px 8px;border-top:1px solid #d8dee4;vertical-align:top"
_BADGE = "display:inline-block;padding:1px 8px;margin:0 4px 2px 0;border-radius:10px;font-size:12px"
_COLORS = {
    "green": ("#dafbe1", "#116329"),
    "red": ("#ffebe9", "#a40e26"),
    "amber": ("#fff8c5", "#7d4e00"),
    "blue": ("#ddf4ff", "#0550ae"),
    "grey": ("#eff2f5", "#424a53"),
}
_ROUTING_COLOR = {
    Routing.AUTO_APPROVE: "green",
    Routing.AUTO_REJECT: "red",
    Routing.NEEDS_HUMAN: "amber",
}
_DECISION_COLOR = {
    ReviewDecision.APPROVE: "green",
    ReviewDecision.CORRECT: "blue",
    ReviewDecision.REJECT: "red",
    ReviewDecision.QUARANTINE: "amber",
}


INVISIBLE = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u00ad\u061c\u115f\u1160\u17b4\u17b5\u180e"
    "\u200b-\u200f\u2028-\u202e\u2060-\u2064\u2066-\u206f\u3164\ufeff\ufff9-\ufffb"
    "\U0001d173-\U0001d17a\U000e0000-\U000e007f]"
)
"""Characters that show nothing or change how the text around them reads: controls (not
tab and newline), bidi embeddings, overrides, isolates and marks, zero-width spaces and
joiners, invisible fillers, tags. Each is shown as its escape instead."""
_MARK = "background:#ffebe9;color:#a40e26;border:1px solid #cf222e;border-radius:3px;padding:0 2px"


def escape_code(char: str) -> str:
    """``\u202e`` for U+202E; ``\U000e0041`` beyond the basic plane."""
    point = ord(char)
    return f"\\u{point:04x}" if point <= 0xFFFF else f"\\U{point:08x}"


def visible(text: str) -> str:
    """``text`` with each invisible character replaced by its escape (plain text)."""
    return INVISIBLE.sub(lambda m: escape_code(m.group()), text)


def _html(text: str) -> str:
    """``text`` escaped for HTML, each invisible character shown as its marked escape."""

    def mark(match: re.Match[str]) -> str:
        char = match.group()
        name = unicodedata.name(char, "control character")
        title = f"invisible character U+{ord(char):04X} {name}"
        return f'<span style="{_MARK}" title="{escape(title)}">{escape_code(char)}</span>'

    return INVISIBLE.sub(mark, escape(text))


def _badge(text: str, color: str, title: str = "") -> str:
    bg, fg = _COLORS[color]
    tip = f' title="{escape(title)}"' if title else ""
    return f'<span style="{_BADGE};background:{bg};color:{fg}"{tip}>{_html(text)}</span>'


def _clip(text: str, limit: int, mono: bool = False) -> str:
    """``text`` escaped (invisible characters shown); past ``limit`` characters cut, with
    the full text in <details>."""
    style = _MONO if mono else ""
    if len(text) <= limit:
        return f'<span style="{style}">{_html(text)}</span>'
    full = (
        f'<details style="display:inline"><summary style="cursor:pointer;{_MUTED}">'
        f'full ({len(text)} chars)</summary><pre style="{_MONO};white-space:pre-wrap;'
        f'margin:4px 0;max-height:320px;overflow:auto">{_html(text)}</pre></details>'
    )
    return f'<span style="{style}">{_html(text[:limit])}…</span> {full}'


def _json(value: JsonValue) -> str:
    return orjson.dumps(value).decode()


# -- the rendered trajectory -----------------------------------------------------------


def render_html(
    item: GateItem,
    *,
    sensitive_tools: Collection[str] = SAFETY_SENSITIVE_TOOLS,
    artifact_url: ArtifactUrl | None = None,
) -> str:
    """The trajectory as one block of escaped HTML with inline styles.

    ``sensitive_tools`` are highlighted where they are offered and used; ``artifact_url``
    turns a step's screenshots into thumbnails and its page sources into links (only
    same-origin paths, and ``data:image`` URLs for images, are used; anything else stays a
    text reference).
    """
    t, rec = item.trajectory, item.curation
    parts = [
        _header(t, rec),
        _tools(t, sensitive_tools),
        _timeline(t, sensitive_tools, artifact_url),
        _final_answer(t),
        _verdict(t),
    ]
    return f'<div style="{_FONT};max-width:1280px">' + "".join(parts) + "</div>"


def _header(t: Trajectory, rec: CurationRecord) -> str:
    outcome = t.metadata.outcome
    outcome_color = "green" if outcome is Outcome.SUCCESS else "red"
    badges = [
        _badge(f"routing: {rec.routing.value}", _ROUTING_COLOR[rec.routing]),
        _badge(f"curator suggests: {rec.suggested.value}", _DECISION_COLOR[rec.suggested]),
        _badge(f"quality {rec.quality:.2f}", "grey"),
        _badge(f"outcome: {outcome.value}", outcome_color),
        _badge(f"ended: {t.metadata.termination.value}", "grey"),
    ]
    if rec.failure_attribution is not None:
        badges.append(_badge(f"failure: {rec.failure_attribution.value}", "red"))
    if INVISIBLE.search(t.task.goal):
        badges.append(_badge("⚠ invisible characters in the goal", "red", _INVISIBLE_TIP))
    meta = " · ".join(
        [
            ", ".join(c.value for c in t.task.capabilities),
            t.task.difficulty.value,
            ", ".join(t.task.domains),
            f"{t.metadata.policy.name}@{t.metadata.policy.version}",
            _ran_on(t),
            f"{len(t.steps)} step{'' if len(t.steps) == 1 else 's'}",
            t.id,
        ]
    )
    reason = f"<b>Why it is here:</b> {_clip(rec.reason, 400)}"
    if rec.judge is not None:
        reason += f"<br><b>LLM judge:</b> {_clip(_json(rec.judge), TEXT_CHARS, mono=True)}"
    return (
        f'<div style="font-size:17px;font-weight:600;margin-bottom:4px">{_html(t.task.goal)}</div>'
        f'<div style="{_MUTED};font-size:12px;margin-bottom:6px">{_html(meta)}</div>'
        f"<div>{''.join(badges)}</div>"
        f'<div style="margin:6px 0;padding:6px 10px;background:#f6f8fa;border-left:3px solid '
        f'{_COLORS[_ROUTING_COLOR[rec.routing]][1]}">{reason}</div>'
    )


def _tools(t: Trajectory, sensitive: Collection[str]) -> str:
    used = _used_tools(t)
    chips = []
    for tool in t.task.tools:
        style = f"{_MONO};white-space:nowrap;padding:0 5px;margin:0 4px 2px 0;display:inline-block;"
        style += "border-radius:4px;border:1px solid "
        style += "#cf222e;color:#a40e26" if tool in sensitive else "#d0d7de"
        weight = ";font-weight:700" if tool in used else ""
        mark = "⚠ " if tool in sensitive else ""
        chips.append(f'<span style="{style}{weight}">{mark}{_html(tool)}</span>')
    note = f'<span style="{_MUTED};font-size:11px"> (bold: used; ⚠: pays, sends or deletes)</span>'
    return f'<div style="margin:4px 0 8px"><b>Candidate tools:</b> {"".join(chips)}{note}</div>'


def _timeline(t: Trajectory, sensitive: Collection[str], artifact_url: ArtifactUrl | None) -> str:
    head = "".join(
        f'<th style="text-align:left;padding:3px 8px;{_MUTED}">{h}</th>'
        for h in ("#", "action", "feedback", "flags")
    )
    repeats = _repeats(t.steps)
    rows = []
    finished = 0
    for step in t.steps:
        rows.append(_step_row(step, sensitive, artifact_url, repeats.get(step.index)))
        if step.action is not None and step.action.kind in TURN_ENDING_KINDS:
            finished += 1
            if finished <= len(t.task.follow_ups):
                rows.append(_user_row(t.task.follow_ups[finished - 1], finished + 1))
    return (
        '<table style="border-collapse:collapse;width:100%;margin:4px 0 10px">'
        f"<thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"
    )


def _user_row(said: str, turn: int) -> str:
    """A later user turn, where the conversation heard it: after the finish before."""
    return (
        f'<tr style="background:#ddf4ff"><td colspan="4" style="{_CELL}">'
        f"<b>User, turn {turn}:</b> {_clip(said, TEXT_CHARS)}</td></tr>"
    )


def _repeats(steps: Sequence[Step]) -> dict[int, int]:
    """For each step that repeats an earlier action exactly: the first step that took it."""
    first: dict[str, int] = {}
    repeats: dict[int, int] = {}
    for step in steps:
        if step.action is None:
            continue
        seen = first.setdefault(step.action.describe(), step.index)
        if seen != step.index:
            repeats[step.index] = seen
    return repeats


def _step_row(
    step: Step, sensitive: Collection[str], artifact_url: ArtifactUrl | None, repeat_of: int | None
) -> str:
    error = step.feedback.error
    is_sensitive = isinstance(step.action, ToolCall) and step.action.tool in sensitive
    background = "#fff5f5" if error is not None else ("#fffbe6" if is_sensitive else "#ffffff")
    cells = [
        f'<td style="{_CELL};font-weight:600;width:28px">{step.index}</td>',
        f'<td style="{_CELL};width:42%">{_action_cell(step)}</td>',
        f'<td style="{_CELL}">{_feedback_cell(step)}{_artifacts(step, artifact_url)}</td>',
        f'<td style="{_CELL};white-space:nowrap">{_flags(step, is_sensitive, repeat_of)}</td>',
    ]
    return f'<tr style="background:{background}">{"".join(cells)}</tr>'


def _action_cell(step: Step) -> str:
    if step.action is None:
        cell = f'<i style="{_MUTED}">no action</i>'
    else:
        cell = _clip(step.action.describe(), CALL_CHARS, mono=True)
    said = step.model_output.strip()
    if said and (step.action is None or said != step.action.describe()):
        cell += f'<div style="{_MUTED};font-size:12px">said: {_clip(said, TEXT_CHARS)}</div>'
    if step.observation:
        screen = _clip(step.observation, TEXT_CHARS)
        cell += f'<div style="{_MUTED};font-size:12px">screen: {screen}</div>'
    return cell


def _feedback_cell(step: Step) -> str:
    feedback = step.feedback
    if feedback.error is not None:
        kind = escape(feedback.error.kind.value)
        where = f" ({_html(feedback.error.field)})" if feedback.error.field else ""
        message = _clip(feedback.error.message, TEXT_CHARS)
        return f'<span style="color:#a40e26"><b>✗ {kind}</b>{where}: {message}</span>'
    cell = '<span style="color:#116329">✓</span> '
    if feedback.result is not None:
        cell += _clip(_json(feedback.result), RESULT_CHARS, mono=True)
    changes = [f"{c.op} {c.collection}/{c.entity_id}" for c in feedback.state_changes]
    if changes:
        cell += f'<div style="color:#0550ae;font-size:12px">{_html("; ".join(changes))}</div>'
    return cell


def _flags(step: Step, is_sensitive: bool, repeat_of: int | None) -> str:
    flags = []
    if _has_invisible(step):
        flags.append(_badge("⚠ invisible characters", "red", _INVISIBLE_TIP))
    if repeat_of is not None:
        flags.append(_badge(f"↻ same as #{repeat_of}", "grey", "the same action again"))
    if is_sensitive:
        flags.append(_badge("⚠ sensitive", "amber", "pays, sends messages or deletes data"))
    if step.injected_fault is not None:
        flags.append(_badge(f"fault: {step.injected_fault.value}", "red", "injected on purpose"))
    return "".join(flags)


_INVISIBLE_TIP = "characters that show nothing or reorder text; shown as their escapes"


def _has_invisible(step: Step) -> bool:
    """Whether anything the step holds that the view shows has an invisible character
    (also where JSON shows a control character as an escape already)."""
    values: list[Any] = [step.model_output, step.observation, step.feedback.model_dump()]
    if step.action is not None:
        values.append(step.action.model_dump())
    return any(INVISIBLE.search(text) for text in _strings(values))


def _strings(value: Any) -> Iterator[str]:
    """Every string in a JSON-like value, keys included."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _strings(key)
            yield from _strings(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _strings(item)


def _ran_on(t: Trajectory) -> str:
    """Where the episode ran: the backend, and the device when it was one."""
    device = t.metadata.device
    if t.metadata.backend == "device" and device:
        return f"on device {device}"
    if t.metadata.simulated:
        return "on simulated tools (a chat model answered every call: check it is plausible)"
    return f"on {t.metadata.backend}"


def _artifacts(step: Step, artifact_url: ArtifactUrl | None) -> str:
    """Screenshots as thumbnails, other artifacts (page sources) as links, each opening in
    a new tab; references without a usable URL as text."""
    shown = []
    sources = [r for r in step.artifacts if PurePosixPath(r).suffix.lower() == ".xml"]
    for ref in step.artifacts:
        url = artifact_url(ref) if artifact_url is not None else None
        image = PurePosixPath(ref).suffix.lower() in IMAGE_SUFFIXES
        title = escape(ref, quote=True)
        if url is None or not _displayable(url, image):
            icon = "📷" if image else "📄"
            shown.append(f'<span style="{_MUTED};font-size:12px">{icon} {_html(ref)}</span> ')
            continue
        href = escape(url, quote=True)
        if image:
            shown.append(
                f'<a href="{href}" target="_blank" rel="noopener"><img src="{href}" alt="'
                f'{title}" title="{title}" loading="lazy" style="max-height:180px;'
                'max-width:260px;border:1px solid #d0d7de;margin:4px 4px 0 0"></a>'
            )
        else:
            label = "file"
            if ref in sources:  # numbered in the order the agent read the screens
                label = "page source" + (f" {sources.index(ref) + 1}" if len(sources) > 1 else "")
            shown.append(
                f'<a href="{href}" target="_blank" rel="noopener" title="{title}" '
                f'style="font-size:12px;margin-right:8px">📄 {label}</a>'
            )
    return f"<div>{''.join(shown)}</div>" if shown else ""


_ODD = re.compile(r"[\\\x00-\x1f\x7f]")


def _displayable(url: str, image: bool = True) -> bool:
    """Same-origin paths, and for images inline ones: nothing reaches another host.

    Browsers read ``/\\host`` and ``/<tab>/host`` as ``//host``: a backslash or a control
    character makes a path unusable.
    """
    same_origin = url.startswith("/") and not url.startswith("//") and not _ODD.search(url)
    return same_origin or (image and url.startswith("data:image/"))


def _final_answer(t: Trajectory) -> str:
    last = t.steps[-1].action if t.steps else None
    if isinstance(last, Finish):
        label, text = "Final answer", last.answer
    elif isinstance(last, Clarify):
        label, text = "Asked the user", last.question
    elif isinstance(last, Refuse):
        label, text = "Refused", last.reason
    else:
        return ""
    return (
        f'<div style="margin:0 0 10px;padding:6px 10px;border:1px solid #d0d7de;'
        f'border-radius:6px"><b>{label}:</b> {_clip(text or "(empty)", 600)}</div>'
    )


def _verdict(t: Trajectory) -> str:
    v = t.verdict
    met = sum(c.met for c in v.checks)
    status = _badge("passed", "green") if v.passed else _badge("failed", "red")
    summary = f"score {v.score:.2f} · {met}/{len(v.checks)} checks met"
    items = "".join(_check_item(c) for c in v.checks)
    return (
        f'<div><b>Verifier:</b> {status}<span style="{_MUTED}">{_html(summary)}</span></div>'
        f'<ul style="list-style:none;padding-left:4px;margin:4px 0">{items}</ul>'
    )


def _check_item(check: CheckResult) -> str:
    mark = '<b style="color:#116329">✓</b>' if check.met else '<b style="color:#a40e26">✗</b>'
    evidence = ""
    if check.kind == "no_collateral" and not check.met:
        evidence = _unexpected_changes(check.evidence)
    elif check.evidence is not None:
        evidence = f'<div style="{_MUTED};margin-left:18px">evidence: '
        evidence += f"{_clip(_json(check.evidence), EVIDENCE_CHARS, mono=True)}</div>"
    kind = f'<span style="{_MUTED}">[{_html(check.kind)}]</span>'
    return f"<li>{mark} {kind} {_html(check.description)}{evidence}</li>"


_HARM = (
    "color:#a40e26;background:#ffebe9;border-left:3px solid #cf222e;padding:2px 6px;margin:2px 0"
)
CHANGE_CHARS = 240


def _unexpected_changes(evidence: JsonValue) -> str:
    """Each change the task does not allow, in red: collection, row, before and after."""
    info = evidence if isinstance(evidence, dict) else {}
    listed = info.get("unexpected")
    changes = [c for c in listed if isinstance(c, dict)] if isinstance(listed, list) else []
    rows = []
    for change in changes:
        where = f"{change.get('op')} {change.get('collection')} {change.get('id')}"
        before, after = change.get("before"), change.get("after")
        detail = (
            f"{_clip(_json(before), CHANGE_CHARS, mono=True)} → "
            f"{_clip(_json(after), CHANGE_CHARS, mono=True)}"
        )
        rows.append(f'<div style="{_HARM}"><b>{_html(where)}</b>: {detail}</div>')
    count = info.get("count")
    if isinstance(count, int) and count > len(changes):
        rows.append(f'<div style="{_HARM}">… and {count - len(changes)} more</div>')
    title = "unexpected changes (collateral damage):"
    return (
        f'<div style="margin-left:18px"><b style="color:#a40e26">{title}</b>{"".join(rows)}</div>'
    )


# -- task data and the curator's pre-annotation ------------------------------------------


def step_options(trajectory: Trajectory) -> list[JsonValue]:
    """The dynamic choices of ``erroneous_steps``: one per step, valued by its index."""
    return [{"value": str(s.index)} for s in trajectory.steps]


HIDDEN_FIELDS = ("html", "step_options", "round_id", "task_id")
"""Task data no task-list column should show: the rendered page (the labeling view shows
it), the step choices (the form's), the round (the project's own) and the task's id (the
trajectory's id names the item)."""
REVIEW_ORDER = "quality"
"""The task list's order: the curator's quality, lowest (most doubtful) first."""


def task_data(
    item: GateItem,
    round_id: str,
    *,
    sensitive_tools: Collection[str] = SAFETY_SENSITIVE_TOOLS,
    artifact_url: ArtifactUrl | None = None,
) -> dict[str, JsonValue]:
    """The JSON-ready data of the Label Studio task for ``item`` in ``round_id``.

    ``html`` is what the annotator reads; the other fields identify the item and serve as
    Data Manager columns (filter by routing, suggestion, outcome). No settings, tokens or
    backend state go in.
    """
    t, rec = item.trajectory, item.curation
    return {
        "trajectory_id": t.id,
        "round_id": round_id,
        "task_id": t.task.id,
        "goal": visible(t.task.goal),
        "html": render_html(item, sensitive_tools=sensitive_tools, artifact_url=artifact_url),
        "step_options": step_options(t),
        "steps": len(t.steps),
        "routing": rec.routing.value,
        "suggested": rec.suggested.value,
        "quality": round(rec.quality, 3),
        "reason": visible(rec.reason),
        "outcome": t.metadata.outcome.value,
        "verifier_passed": t.verdict.passed,
        "capabilities": ", ".join(c.value for c in t.task.capabilities),
        "difficulty": t.task.difficulty.value,
        "policy": f"{t.metadata.policy.name}@{t.metadata.policy.version}",
        "sensitive_tools": list[JsonValue](sorted(_used_tools(t) & set(sensitive_tools))),
    }


def _used_tools(t: Trajectory) -> set[str]:
    return {s.action.tool for s in t.steps if isinstance(s.action, ToolCall)}


def suggested_erroneous_steps(trajectory: Trajectory) -> tuple[int, ...]:
    """Steps that look wrong on the record: an execution error or an injected fault."""
    return erroneous_steps(trajectory.steps)


def suggested_reject_reason(item: GateItem) -> RejectReason | None:
    """The rejection reason that fits the curator's suggestion, if it suggests reject."""
    rec = item.curation
    if rec.suggested is not ReviewDecision.REJECT:
        return None
    if rec.drop_reason is not None:
        return RejectReason.OTHER
    if item.trajectory.metadata.outcome is Outcome.SUCCESS:
        return RejectReason.LOW_QUALITY
    return RejectReason.WRONG_OUTCOME


def _choices(control: str, values: Sequence[str]) -> dict[str, JsonValue]:
    return {
        "from_name": control,
        "to_name": OBJECT_NAME,
        "type": "choices",
        "value": {"choices": list(values)},
    }


def prediction(item: GateItem, *, curator_version: str = CURATOR_VERSION) -> dict[str, JsonValue]:
    """The curator's judgement as a Label Studio prediction (a pre-annotation).

    It selects the suggested verdict, the matching rejection reason when it suggests a
    rejection, and the steps that errored or carry an injected fault; ``score`` is the
    curator's quality score.
    """
    result = [_choices(VERDICT, [item.curation.suggested.value])]
    reason = suggested_reject_reason(item)
    if reason is not None:
        result.append(_choices(REJECT_REASON, [reason.value]))
    steps = suggested_erroneous_steps(item.trajectory)
    if steps:
        result.append(_choices(ERRONEOUS_STEPS, [str(i) for i in steps]))
    return {
        "model_version": f"curator-{curator_version}",
        "score": item.curation.quality,
        "result": list(result),
    }


# -- reading annotations back ------------------------------------------------------------


@dataclass(frozen=True)
class AnnotationValues:
    """An annotation's values, typed."""

    decision: ReviewDecision
    erroneous_steps: tuple[int, ...] = ()
    answer: str | None = None
    reject_reason: RejectReason | None = None


_REASON_LOOKUP = {r.value: r for r in RejectReason} | {
    r.value.replace("_", " ").capitalize(): r for r in RejectReason
}
_REASONED = frozenset({ReviewDecision.REJECT, ReviewDecision.QUARANTINE})


def parse_annotation(
    result: Sequence[Mapping[str, Any]], *, steps: int | None = None
) -> AnnotationValues:
    """Read an annotation's ``result`` (Label Studio's list of regions) into values.

    Raises ``InvalidInputError`` naming the control when the verdict is missing or unknown,
    a step is no index (or, given ``steps``, out of range) or a reason is unknown. A
    rejection reason is kept only for reject and quarantine: on an approval it is a left
    over from the pre-annotation.
    """
    by_control = {r.get("from_name"): r.get("value", {}) for r in result}
    decision = _decision(_selected(by_control, VERDICT))
    reasons = _selected(by_control, REJECT_REASON)
    return AnnotationValues(
        decision=decision,
        erroneous_steps=_step_indices(_selected(by_control, ERRONEOUS_STEPS), steps),
        answer=_text(by_control.get(ANSWER)),
        reject_reason=_reason(reasons) if decision in _REASONED else None,
    )


def _selected(by_control: Mapping[Any, Any], control: str) -> list[str]:
    """The chosen values of a Choices control; nested (dynamic) ones come as paths."""
    value = by_control.get(control)
    if value is None:
        return []
    choices = value.get("choices") if isinstance(value, Mapping) else None
    if not isinstance(choices, list):
        raise InvalidInputError(control, f"expected a list of choices, got {value!r}")
    flat = [c[-1] if isinstance(c, list) and c else c for c in choices]
    if not all(isinstance(c, str) for c in flat):
        raise InvalidInputError(control, f"choices must be strings, got {choices!r}")
    return flat


def _decision(chosen: list[str]) -> ReviewDecision:
    allowed = [d.value for d in ReviewDecision]
    if len(chosen) != 1:
        problem = "missing from the annotation" if not chosen else f"several chosen: {chosen}"
        raise InvalidInputError(VERDICT, problem, allowed)
    if chosen[0] not in allowed:
        raise InvalidInputError(VERDICT, f"unknown decision {chosen[0]!r}", allowed)
    return ReviewDecision(chosen[0])


def _step_indices(chosen: list[str], steps: int | None) -> tuple[int, ...]:
    indices = set()
    for value in chosen:
        if not value.isdecimal() or (steps is not None and int(value) >= steps):
            bound = f" of a {steps}-step trajectory" if steps is not None else ""
            raise InvalidInputError(ERRONEOUS_STEPS, f"{value!r} is not a step index{bound}")
        indices.add(int(value))
    return tuple(sorted(indices))


def _text(value: Any) -> str | None:
    texts = value.get("text") if isinstance(value, Mapping) else None
    if texts is None:
        return None
    if isinstance(texts, str):
        texts = [texts]
    if not isinstance(texts, list) or not all(isinstance(x, str) for x in texts):
        raise InvalidInputError(ANSWER, f"expected a list of texts, got {value!r}")
    joined = "\n".join(texts).strip()
    return joined or None


def _reason(chosen: list[str]) -> RejectReason | None:
    if not chosen:
        return None
    reason = _REASON_LOOKUP.get(chosen[0])
    if reason is None:
        raise InvalidInputError(
            REJECT_REASON, f"unknown reason {chosen[0]!r}", [r.value for r in RejectReason]
        )
    return reason
