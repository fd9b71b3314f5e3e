"""The labeling interface: the rendered trajectory, pre-annotations, parsing annotations,
and the config against a real Label Studio server."""

from __future__ import annotations

import uuid
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from typing import Any, cast

import orjson
import pytest
from label_studio_sdk import ImportApiRequest, LabelStudio
from pydantic import BaseModel

from agents.curator import curate
from agents.policies.scripted import FaultConfig, ScriptedPolicy
from agents.runner import run_episode
from contract import (
    CurationRecord,
    Difficulty,
    FaultKind,
    InvalidInputError,
    ReviewDecision,
    Routing,
    Trajectory,
)
from envs.sandbox import MobileSandbox
from envs.sandbox.templates.catalog import sample_tasks
from human_gate import GateItem
from human_gate.label_studio import (
    LABEL_CONFIG,
    AnnotationValues,
    RejectReason,
    parse_annotation,
    prediction,
    render_html,
    task_data,
)

SCRIPT = "<script>alert(1)</script>"
IMG = "<img src=x onerror=alert(1)>"
QUOTE = '" onmouseover="alert(1)'
PAYLOAD = f"{SCRIPT}{IMG}{QUOTE}"


# -- fixtures ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def items(sandbox: MobileSandbox) -> list[GateItem]:
    """Real episodes, curated: half of them with an injected fault, and three hard tasks
    with a looping call, so that some episodes run to their whole step budget whatever
    the templates draw."""
    policy = ScriptedPolicy(FaultConfig(rate=0.5))
    looping = ScriptedPolicy(FaultConfig(rate=1.0, weights={FaultKind.LOOPING_CALL: 1.0}))
    trajectories = [
        run_episode(task, sandbox, policy, round_id="r") for task in sample_tasks(60, 3, sandbox)
    ] + [
        run_episode(task, sandbox, looping, round_id="r")
        for task in sample_tasks(3, 3, sandbox, difficulty=Difficulty.HARD)
    ]
    records = {r.trajectory_id: r for r in curate(trajectories, "r")}
    return [GateItem(t, records[t.id]) for t in trajectories]


@pytest.fixture(scope="module")
def poisoned(items: list[GateItem]) -> GateItem:
    """An item with the payload in every field that reaches the page."""
    base = next(i.trajectory for i in items if len(i.trajectory.steps) >= 3)
    trajectory = poison(base)
    record = CurationRecord(
        trajectory_id=trajectory.id,
        task_id=trajectory.task.id,
        round_id="r",
        kept=True,
        supported=True,
        quality=0.5,
        routing=Routing.NEEDS_HUMAN,
        suggested=ReviewDecision.QUARANTINE,
        reason=PAYLOAD,
        judge={"passed": True, "reason": PAYLOAD},
    )
    return GateItem(trajectory, record)


def poison(t: Trajectory) -> Trajectory:
    data = t.model_dump(mode="json")
    del data["id"], data["task"]["id"]
    task = data["task"]
    task["goal"] = f"Book a table {PAYLOAD}"
    task["tools"] = [*task["tools"][:14], PAYLOAD]
    data["metadata"]["policy"]["name"] = PAYLOAD
    first, second, last = data["steps"][0], data["steps"][1], data["steps"][-1]
    artifacts = [f"{PAYLOAD}.png", f"{PAYLOAD}.xml"]
    first.update(model_output=PAYLOAD, observation=PAYLOAD, artifacts=artifacts)
    first["action"] = {"kind": "tool_call", "tool": PAYLOAD, "arguments": {PAYLOAD: PAYLOAD}}
    first["feedback"] = {
        "result": {"text": PAYLOAD * 20},
        "state_changes": [{"collection": PAYLOAD, "entity_id": PAYLOAD, "op": "created"}],
    }
    second["feedback"] = {
        "error": {"kind": "precondition_failed", "message": PAYLOAD, "field": PAYLOAD}
    }
    last["action"] = {"kind": "finish", "answer": PAYLOAD}
    check = data["verdict"]["checks"][0]
    check.update(kind=PAYLOAD, description=PAYLOAD, evidence={"row": PAYLOAD})
    return Trajectory.model_validate(data)


class Page(HTMLParser):
    """The tags, attributes, table rows and text of an HTML fragment."""

    def __init__(self, html: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []
        self.body_rows: list[list[str]] = []
        self._in_body = False
        self.feed(html)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        if tag == "tbody":
            self._in_body = True
        elif tag == "tr" and self._in_body:
            self.body_rows.append([])

    def handle_endtag(self, tag: str) -> None:
        if tag == "tbody":
            self._in_body = False

    def handle_data(self, data: str) -> None:
        self.text.append(data)
        if self._in_body and self.body_rows:
            self.body_rows[-1].append(data)


def assert_inert(html: str) -> Page:
    """No script, no event handler, no image or link that the page did not ask for."""
    page = Page(html)
    names = {tag for tag, _ in page.tags}
    assert "script" not in names
    assert not any(k.lower().startswith("on") for _, attrs in page.tags for k in attrs)
    assert all(not (attrs.get("src") or "").startswith("x") for _, attrs in page.tags)
    for raw in (SCRIPT, IMG, 'onmouseover="alert'):
        assert raw not in html
    return page


# -- the rendered trajectory -------------------------------------------------------------


def test_every_trajectory_field_is_escaped(poisoned: GateItem) -> None:
    html = str(task_data(poisoned, "r")["html"])
    page = assert_inert(html)
    assert {"img", "a"}.isdisjoint(tag for tag, _ in page.tags)
    text = "".join(page.text)
    # each payload shows as text: goal, tools, call, output, results, error, answer,
    # checks, evidence, reason, judge and policy all carry it
    assert text.count(SCRIPT) >= 12
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html


HIDDEN = ["\u202e", "\u2067", "\u200b", "\u200f", "\x00", "\x1b", "\ufeff", "\u00ad",
          "\u2028", "\U000e0041", "\r"]  # fmt: skip
"""Characters that show nothing or reorder text: a right-to-left override, an isolate,
zero-width space and mark, NUL, escape, BOM, soft hyphen, line separator, a tag, CR."""


def hide(t: Trajectory, chars: str) -> Trajectory:
    """``t`` with ``chars`` inside the goal, the first two steps and the answer."""
    data = t.model_dump(mode="json")
    del data["id"], data["task"]["id"]
    data["task"]["goal"] += f" pay {chars}Anna"
    first, second, last = data["steps"][0], data["steps"][1], data["steps"][-1]
    first["model_output"] = f"I pay {chars}Anna"
    first["feedback"] = {"result": {"note": f"ok{chars}"}}
    second["feedback"] = {"error": {"kind": "precondition_failed", "message": f"no{chars}"}}
    last["action"] = {"kind": "finish", "answer": f"Paid {chars}Anna"}
    data["verdict"]["checks"][0]["description"] = f"paid {chars}Anna"
    return Trajectory.model_validate(data)


@pytest.mark.parametrize("char", HIDDEN, ids=[f"U+{ord(c):04X}" for c in HIDDEN])
def test_invisible_characters_show_as_marked_escapes_and_flag_the_step(
    poisoned: GateItem, items: list[GateItem], char: str
) -> None:
    base = next(i for i in items if len(i.trajectory.steps) >= 4)
    hidden = hide(base.trajectory, char)
    item = GateItem(hidden, base.curation.model_copy(update={"trajectory_id": hidden.id}))
    data = task_data(item, "r")
    html = str(data["html"])

    assert char not in html
    escape = f"\\u{ord(char):04x}" if ord(char) <= 0xFFFF else f"\\U{ord(char):08x}"
    page = assert_inert(html)
    text = "".join(page.text)
    assert text.count(escape) >= 5  # goal, said, error, answer, check (and the JSON result)
    assert f"U+{ord(char):04X}" in html  # the mark's tooltip names the character
    assert "invisible characters in the goal" in text
    flagged = [i for i, row in enumerate(page.body_rows) if "⚠ invisible characters" in row]
    last = len(hidden.steps) - 1
    assert flagged == [0, 1, last]
    assert data["goal"] == hidden.task.goal.replace(char, escape)
    clean = str(task_data(base, "r")["html"])
    assert "invisible characters" not in clean


def test_artifacts_become_images_and_links_only_for_same_origin_urls(
    poisoned: GateItem,
) -> None:
    def safe(ref: str) -> str:
        return "/data/local-files/?d=" + ref

    def remote(ref: str) -> str:
        return "javascript:alert(1)//" + ref

    page = Page(render_html(poisoned, artifact_url=safe))
    images = [a for t, a in page.tags if t == "img"]
    assert [i["src"] for i in images] == [safe(f"{PAYLOAD}.png")]
    assert images[0]["alt"] == f"{PAYLOAD}.png"
    links = [a["href"] for t, a in page.tags if t == "a"]
    assert links == [safe(f"{PAYLOAD}.png"), safe(f"{PAYLOAD}.xml")]  # the image's, the source's
    assert_inert(render_html(poisoned, artifact_url=safe))
    refused = Page(render_html(poisoned, artifact_url=remote))
    assert {"img", "a"}.isdisjoint(tag for tag, _ in refused.tags)
    assert "javascript:" not in render_html(poisoned, artifact_url=remote)


def with_artifacts(item: GateItem, refs: list[str]) -> GateItem:
    """``item`` with ``refs`` as its first step's artifacts."""
    steps = list(item.trajectory.steps)
    steps[0] = steps[0].model_copy(update={"artifacts": refs})
    return GateItem(item.trajectory.model_copy(update={"steps": steps}), item.curation)


SHOT = "ab/cd/" + "ab" * 32 + ".png"
SOURCE = "ef/01/" + "ef" * 32 + ".xml"


def test_a_screenshot_is_a_thumbnail_and_a_page_source_a_link(items: list[GateItem]) -> None:
    item = with_artifacts(items[0], [SHOT, SOURCE])

    def url(ref: str) -> str:
        return f"/data/local-files/?d=artifacts/{ref}&x=<1>"

    html = render_html(item, artifact_url=url)
    page = assert_inert(html)
    assert [a["src"] for t, a in page.tags if t == "img"] == [url(SHOT)]
    source = [a for t, a in page.tags if t == "a" and a["href"] == url(SOURCE)]
    assert len(source) == 1 and source[0]["title"] == SOURCE
    assert source[0]["target"] == "_blank" and source[0]["rel"] == "noopener"
    assert "📄 page source" in "".join(page.text)
    assert f'src="/data/local-files/?d=artifacts/{SHOT}&amp;x=&lt;1&gt;"' in html  # escaped

    text = Page(render_html(item))  # no URLs: both named as text
    assert {"img", "a"}.isdisjoint(tag for tag, _ in text.tags)
    assert f"📷 {SHOT}" in "".join(text.text) and f"📄 {SOURCE}" in "".join(text.text)


def test_several_page_sources_are_numbered_and_the_device_is_named(
    items: list[GateItem],
) -> None:
    second = "12/34/" + "12" * 32 + ".xml"
    item = with_artifacts(items[0], [SOURCE, SHOT, second])
    metadata = item.trajectory.metadata.model_copy(
        update={"backend": "device", "device": "pixel-7"}
    )
    item = GateItem(item.trajectory.model_copy(update={"metadata": metadata}), item.curation)
    page = assert_inert(render_html(item, artifact_url=lambda ref: f"/data/local-files/?d={ref}"))
    words = "".join(page.text)
    assert "📄 page source 1" in words and "📄 page source 2" in words
    assert words.index("page source 1") < words.index("page source 2")
    assert "on device pixel-7" in words
    sandbox = Page(render_html(items[0]))
    assert "on sandbox" in "".join(sandbox.text) and "page source" not in "".join(sandbox.text)


def test_an_episode_on_simulated_tools_says_so_to_the_annotator(items: list[GateItem]) -> None:
    trajectory = items[0].trajectory
    metadata = trajectory.metadata.model_copy(update={"backend": "simulated", "simulated": True})
    item = GateItem(trajectory.model_copy(update={"metadata": metadata}), items[0].curation)
    words = "".join(assert_inert(render_html(item)).text)
    assert "on simulated tools (a chat model answered every call" in words


@pytest.mark.parametrize(
    "url",
    [
        "//evil.example/x.png",
        "/\\evil.example/x.png",
        "/\t/evil.example/x.png",
        "/\n/evil.example/x.png",
        "https://evil.example/x.png",
        "data:text/html,<b>x</b>",
    ],
)
def test_urls_that_could_leave_the_server_stay_text(items: list[GateItem], url: str) -> None:
    item = with_artifacts(items[0], [SHOT, SOURCE])
    page = Page(render_html(item, artifact_url=lambda ref: url))
    assert {"img", "a"}.isdisjoint(tag for tag, _ in page.tags)
    assert "evil.example" not in "".join(page.text)  # the reference is shown, not the URL


def test_an_inline_image_is_shown_but_a_page_source_is_never_inline(
    items: list[GateItem],
) -> None:
    item = with_artifacts(items[0], [SHOT, SOURCE])
    inline = "data:image/png;base64,iVBORw0K"
    page = Page(render_html(item, artifact_url=lambda ref: inline))
    assert [a["src"] for t, a in page.tags if t == "img"] == [inline]
    assert [a["href"] for t, a in page.tags if t == "a"] == [inline]  # the thumbnail's own
    assert f"📄 {SOURCE}" in "".join(page.text)


def test_a_reference_with_odd_characters_is_escaped(items: list[GateItem]) -> None:
    odd = 'ab/"cd\\' + "'<marquee>&amp;</marquee>\n.xml"
    item = with_artifacts(items[0], [odd, odd + ".png"])
    html = render_html(item, artifact_url=lambda ref: "/data/local-files/?d=" + ref)
    page = assert_inert(html)
    assert "<marquee>" not in html and "&amp;amp;" in html
    assert {t for t, _ in page.tags}.isdisjoint({"marquee"})
    # the backslash and newline make both URLs unusable: they stay text, escaped
    assert {"img", "a"}.isdisjoint(tag for tag, _ in page.tags)
    assert odd in "".join(page.text)
    clean = 'ab/"cd' + "'<marquee>&amp;</marquee>.png"
    html = render_html(with_artifacts(item, [clean]), artifact_url=lambda r: "/f?d=" + r)
    images = [a for t, a in assert_inert(html).tags if t == "img"]
    assert [(i["src"], i["alt"]) for i in images] == [("/f?d=" + clean, clean)]
    assert "<marquee>" not in html


def test_a_trajectory_that_used_its_whole_budget_renders_one_row_per_step(
    items: list[GateItem],
) -> None:
    item = next(i for i in items if len(i.trajectory.steps) == i.trajectory.metadata.max_steps)
    steps = len(item.trajectory.steps)
    assert steps >= 8
    html = render_html(item)
    rows = Page(html).body_rows
    assert [row[0] for row in rows] == [str(i) for i in range(steps)]
    calls = [s.action.describe() for s in item.trajectory.steps if s.action is not None]
    assert html.count("↻ same as #") == len(calls) - len(set(calls))


def test_safety_sensitive_calls_are_flagged(items: list[GateItem]) -> None:
    item = next(i for i in items if "safety-sensitive" in i.curation.reason)
    data = task_data(item, "r")
    assert data["sensitive_tools"]
    assert "⚠ sensitive" in str(data["html"])
    assert "routing: needs_human" in str(data["html"])


def test_task_data_is_json_with_the_routing_fields(items: list[GateItem]) -> None:
    for item in items:
        data = orjson.loads(orjson.dumps(task_data(item, "round-7")))
        t, rec = item.trajectory, item.curation
        assert data["trajectory_id"] == t.id
        assert data["round_id"] == "round-7"
        assert data["task_id"] == t.task.id
        assert data["goal"] == t.task.goal
        assert (data["routing"], data["suggested"]) == (rec.routing.value, rec.suggested.value)
        assert data["quality"] == round(rec.quality, 3)  # a column people read
        assert data["reason"] == rec.reason
        assert data["step_options"] == [{"value": str(s.index)} for s in t.steps]
        assert data["steps"] == len(t.steps)


# -- the curator's pre-annotation --------------------------------------------------------


def test_prediction_carries_the_suggested_decision(items: list[GateItem]) -> None:
    for item in items:
        pred = prediction(item)
        assert pred["model_version"] == "curator-1"
        assert pred["score"] == item.curation.quality
        values = parse_annotation(pred_result(pred), steps=len(item.trajectory.steps))
        assert values.decision is item.curation.suggested
        rejected = item.curation.suggested is ReviewDecision.REJECT
        assert (values.reject_reason is not None) == rejected
        marked = {
            s.index
            for s in item.trajectory.steps
            if s.feedback.error is not None or s.injected_fault is not None
        }
        assert set(values.erroneous_steps) == marked


def pred_result(pred: dict[str, Any]) -> list[dict[str, Any]]:
    result = pred["result"]
    assert isinstance(result, list)
    return result


# -- reading annotations back ------------------------------------------------------------


def choices(control: str, *values: Any) -> dict[str, Any]:
    return {
        "from_name": control,
        "to_name": "trajectory",
        "type": "choices",
        "value": {"choices": list(values)},
    }


def text(value: str) -> dict[str, Any]:
    return {
        "from_name": "answer",
        "to_name": "trajectory",
        "type": "textarea",
        "value": {"text": [value]},
    }


# A result as Label Studio 1.23 stored it after an annotator confirmed a pre-annotation,
# unticked step 3 and typed a note (captured from the real UI in a browser).
STORED = [
    {
        "value": {"choices": ["reject"]},
        "id": "Qq60BiM7DP",
        "from_name": "verdict",
        "to_name": "trajectory",
        "type": "choices",
        "origin": "prediction",
    },
    {
        "value": {"choices": ["wrong_outcome"]},
        "id": "-imWR72u6a",
        "from_name": "reject_reason",
        "to_name": "trajectory",
        "type": "choices",
        "origin": "prediction",
    },
    {
        "value": {"choices": ["1", "2", "4", "14"]},
        "id": "Qtlc4d98rW",
        "from_name": "erroneous_steps",
        "to_name": "trajectory",
        "type": "choices",
        "origin": "prediction-changed",
    },
    {
        "value": {"text": ["The agent should have asked for Ines's contact."]},
        "id": "-ImHcbDvDy",
        "from_name": "answer",
        "to_name": "trajectory",
        "type": "textarea",
        "origin": "manual",
    },
]


def test_parse_a_stored_annotation() -> None:
    assert parse_annotation(STORED, steps=15) == AnnotationValues(
        decision=ReviewDecision.REJECT,
        erroneous_steps=(1, 2, 4, 14),
        answer="The agent should have asked for Ines's contact.",
        reject_reason=RejectReason.WRONG_OUTCOME,
    )


@pytest.mark.parametrize("decision", list(ReviewDecision))
def test_parse_round_trips_each_control(decision: ReviewDecision) -> None:
    result = [
        choices("verdict", decision.value),
        choices("erroneous_steps", "7", "0", "7"),
        text("  Alarm at 7:30, not 7:00.  "),
        choices("reject_reason", "unsafe"),
    ]
    values = parse_annotation(result)
    assert values.decision is decision
    assert values.erroneous_steps == (0, 7)
    assert values.answer == "Alarm at 7:30, not 7:00."
    kept = decision in (ReviewDecision.REJECT, ReviewDecision.QUARANTINE)
    assert values.reject_reason == (RejectReason.UNSAFE if kept else None)


def test_parse_defaults_and_other_shapes() -> None:
    bare = parse_annotation([choices("verdict", "approve")])
    assert bare == AnnotationValues(decision=ReviewDecision.APPROVE)
    nested = parse_annotation(
        [
            choices("verdict", "reject"),
            choices("erroneous_steps", ["2"]),
            choices("reject_reason", "Ambiguous task"),
            text("   "),
            {"from_name": "a_future_control", "value": {"rating": 3}},
        ]
    )
    assert nested.erroneous_steps == (2,)
    assert nested.reject_reason is RejectReason.AMBIGUOUS_TASK
    assert nested.answer is None


@pytest.mark.parametrize(
    ("result", "field"),
    [
        ([], "verdict"),
        ([choices("erroneous_steps", "1"), text("note")], "verdict"),
        ([choices("verdict")], "verdict"),
        ([choices("verdict", "maybe")], "verdict"),
        ([choices("verdict", "approve", "reject")], "verdict"),
        ([{"from_name": "verdict", "value": {"choices": "approve"}}], "verdict"),
        ([choices("verdict", "approve"), choices("erroneous_steps", "two")], "erroneous_steps"),
        ([choices("verdict", "approve"), choices("erroneous_steps", "-1")], "erroneous_steps"),
        ([choices("verdict", "approve"), choices("erroneous_steps", "15")], "erroneous_steps"),
        ([choices("verdict", "reject"), choices("reject_reason", "boring")], "reject_reason"),
        ([choices("verdict", "reject"), {"from_name": "answer", "value": {"text": 3}}], "answer"),
    ],
)
def test_parse_refuses_what_it_cannot_read(result: list[dict[str, Any]], field: str) -> None:
    with pytest.raises(InvalidInputError) as caught:
        parse_annotation(result, steps=15)
    assert caught.value.field == field
    assert field in str(caught.value)


def test_a_missing_verdict_names_the_allowed_decisions() -> None:
    with pytest.raises(InvalidInputError, match="approve, correct, reject, quarantine"):
        parse_annotation([text("looks fine")])


# -- the labeling config -------------------------------------------------------------------


def test_config_names_the_controls_the_view_fills() -> None:
    root = ET.fromstring(LABEL_CONFIG)
    controls = {e.get("name"): e for e in root.iter() if e.get("toName") == "trajectory"}
    assert set(controls) == {"verdict", "erroneous_steps", "answer", "reject_reason"}
    verdicts = [c.get("value") for c in controls["verdict"]]
    assert verdicts == [d.value for d in ReviewDecision]
    assert controls["verdict"].get("required") == "true"
    assert controls["erroneous_steps"].get("value") == "$step_options"
    assert controls["erroneous_steps"].get("choice") == "multiple"
    assert [c.get("alias") for c in controls["reject_reason"]] == [r.value for r in RejectReason]
    (hypertext,) = (e for e in root.iter("HyperText"))
    assert hypertext.get("value") == "$html"


# -- against the real Label Studio server ---------------------------------------------------


@pytest.fixture(scope="module")
def client(label_studio: tuple[str, str]) -> LabelStudio:
    url, token = label_studio
    return LabelStudio(base_url=url, api_key=token)  # type: ignore[no-untyped-call]


def import_tasks(client: LabelStudio, project: int, tasks: list[dict[str, Any]]) -> list[int]:
    """Import ``tasks`` (plain JSON, predictions inside) and return their ids."""
    # The SDK's ImportApiRequest type wants ids inside predictions; the API does not.
    response = client.projects.import_tasks(
        id=project, request=cast("list[ImportApiRequest]", tasks), return_task_ids=True
    )
    assert extra(response, "task_count") == len(tasks)
    ids: list[int] = extra(response, "task_ids")
    return ids


def extra(response: BaseModel, key: str) -> Any:
    """A field of the import response, also one the SDK's model does not declare."""
    return response.model_dump().get(key)


@pytest.mark.slow
def test_server_accepts_the_config_and_keeps_task_and_prediction(
    client: LabelStudio, items: list[GateItem], poisoned: GateItem
) -> None:
    project = client.projects.create(
        title=f"view-{uuid.uuid4().hex[:8]}", label_config=LABEL_CONFIG
    )
    assert project.id is not None
    longest = max(items, key=lambda i: len(i.trajectory.steps))
    assert len(longest.trajectory.steps) >= 8
    chosen = [poisoned, longest]
    tasks = [{"data": task_data(i, "r"), "predictions": [prediction(i)]} for i in chosen]
    import_tasks(client, project.id, tasks)
    listed: list[Any] = list(client.tasks.list(project=project.id, fields="all"))
    stored = {t.data["trajectory_id"]: t for t in listed}
    for item in chosen:
        task = stored[item.trajectory_id]
        assert task.data == orjson.loads(orjson.dumps(task_data(item, "r")))
        (pred,) = task.predictions or []
        assert pred.model_version == "curator-1"
        assert pred.score == pytest.approx(item.curation.quality)
        values = parse_annotation(pred.result or [], steps=len(item.trajectory.steps))
        assert values.decision is item.curation.suggested
    html = stored[poisoned.trajectory_id].data["html"]
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert_inert(html)


@pytest.mark.slow
def test_server_refuses_a_task_without_step_options(
    client: LabelStudio, items: list[GateItem]
) -> None:
    from label_studio_sdk.core.api_error import ApiError

    project = client.projects.create(
        title=f"view-{uuid.uuid4().hex[:8]}", label_config=LABEL_CONFIG
    )
    assert project.id is not None
    data = task_data(items[0], "r")
    del data["step_options"]
    with pytest.raises(ApiError) as caught:
        import_tasks(client, project.id, [{"data": data}])
    assert "step_options" in str(caught.value.body)


@pytest.mark.slow
def test_an_annotation_made_through_the_api_parses(
    client: LabelStudio, items: list[GateItem]
) -> None:
    project = client.projects.create(
        title=f"view-{uuid.uuid4().hex[:8]}", label_config=LABEL_CONFIG
    )
    assert project.id is not None
    item = next(i for i in items if len(i.trajectory.steps) >= 3)
    (task_id,) = import_tasks(client, project.id, [{"data": task_data(item, "r")}])
    result = [
        choices("verdict", "correct"),
        choices("erroneous_steps", "1"),
        text("Use the 18:00 slot."),
    ]
    client.annotations.create(id=task_id, result=result)
    (annotation,) = client.annotations.list(id=task_id)
    assert parse_annotation(annotation.result or []) == AnnotationValues(
        decision=ReviewDecision.CORRECT, erroneous_steps=(1,), answer="Use the 18:00 slot."
    )
