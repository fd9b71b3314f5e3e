"""Behaviour of the calendar, clock, notes, email, maps and food apps."""

from __future__ import annotations

from typing import Any

import pytest

from contract import ErrorKind, Feedback, InitialConditions, ToolCall, ToolEffect
from envs.sandbox import MobileSandbox
from envs.sandbox.apps import calendar, clock, email, food, maps, notes

GROUP_A = (calendar.app, clock.app, notes.app, email.app, maps.app, food.app)
TOOLS = [name for app in GROUP_A for name in app.tools]
SEED = 7


@pytest.fixture()
def sandbox() -> MobileSandbox:
    box = MobileSandbox()
    box.reset_to(InitialConditions(seed=SEED), [*TOOLS, "search_contacts"])
    return box


def call(box: MobileSandbox, tool: str, **arguments: Any) -> Feedback:
    return box.execute(ToolCall(tool=tool, arguments=arguments))


def ok(box: MobileSandbox, tool: str, **arguments: Any) -> Any:
    feedback = call(box, tool, **arguments)
    assert feedback.error is None, feedback.error
    return feedback.result


def failed(box: MobileSandbox, tool: str, field: str, **arguments: Any) -> None:
    feedback = call(box, tool, **arguments)
    assert feedback.error is not None, f"{tool} should fail"
    assert feedback.error.kind is ErrorKind.PRECONDITION_FAILED
    assert feedback.error.field == field
    assert not feedback.state_changes


def invalid(box: MobileSandbox, tool: str, **arguments: Any) -> None:
    feedback = call(box, tool, **arguments)
    assert feedback.error is not None
    assert feedback.error.kind is ErrorKind.INVALID_ARGUMENTS


def rows(box: MobileSandbox, collection: str) -> list[dict[str, Any]]:
    return list(box.state()[collection].values())


# -- catalogue and seeding --------------------------------------------------------------


def test_group_a_offers_enough_typed_tools() -> None:
    assert len(TOOLS) >= 30
    assert len(set(TOOLS)) == len(TOOLS)
    for app in GROUP_A:
        effects = {tool.spec.effect for tool in app.tools.values()}
        assert 4 <= len(app.tools) <= 6
        assert effects == {ToolEffect.READ, ToolEffect.WRITE}, app.domain


def test_seeding_is_deterministic() -> None:
    box = MobileSandbox()
    assert box.build_world(11) == box.build_world(11)
    first, other = box.build_world(11), box.build_world(12)
    for collection in ("calendar.events", "clock.alarms", "notes.notes", "email.inbox",
                       "maps.places", "food.restaurants"):  # fmt: skip
        assert first[collection], collection
        assert all(isinstance(k, str) and r["id"] == k for k, r in first[collection].items())
    assert any(first[c] != other[c] for c in ("calendar.events", "email.inbox", "maps.places"))


def test_calendar_attendees_are_contacts() -> None:
    world = MobileSandbox().build_world(5)
    people = world["contacts.people"]
    for event in world["calendar.events"].values():
        assert all(cid in people for cid in event["attendees"])
        assert event["start"] < event["end"]


# -- calendar ---------------------------------------------------------------------------


def test_create_list_and_delete_event(sandbox: MobileSandbox) -> None:
    made = ok(sandbox, "create_event", title="Haircut", date="2026-03-20", start="10:00",
              end="10:30", attendee_ids=["c-2"])  # fmt: skip
    day = ok(sandbox, "list_events", date="2026-03-20")
    assert made["id"] in [e["id"] for e in day]
    assert [e["start"] for e in day] == sorted(e["start"] for e in day)
    assert ok(sandbox, "search_events", query="haircut")[0]["attendees"] == ["c-2"]
    ok(sandbox, "delete_event", event_id=made["id"])
    assert made["id"] not in sandbox.state()["calendar.events"]


def test_create_event_preconditions(sandbox: MobileSandbox) -> None:
    base = {"title": "X", "date": "2026-03-20", "start": "10:00", "end": "11:00"}
    failed(sandbox, "create_event", "date", **{**base, "date": "2026-03-01"})
    failed(sandbox, "create_event", "end", **{**base, "end": "09:00"})
    failed(sandbox, "create_event", "attendee_ids", **base, attendee_ids=["c-999"])
    invalid(sandbox, "create_event", **{**base, "start": "25:00"})
    invalid(sandbox, "create_event", title="X", date="2026-03-20", start="10:00")


def test_reschedule_keeps_duration(sandbox: MobileSandbox) -> None:
    event = rows(sandbox, "calendar.events")[0]
    length = calendar.minutes(event["end"]) - calendar.minutes(event["start"])
    moved = ok(sandbox, "reschedule_event", event_id=event["id"], date="2026-03-24", start="15:00")
    assert moved["date"] == "2026-03-24"
    assert calendar.minutes(moved["end"]) - 15 * 60 == length
    failed(sandbox, "reschedule_event", "start", event_id=event["id"], date="2026-03-24",
           start="15:00")  # fmt: skip
    failed(sandbox, "reschedule_event", "event_id", event_id="ev-999", date="2026-03-24",
           start="15:00")  # fmt: skip


def test_add_event_attendee(sandbox: MobileSandbox) -> None:
    made = ok(sandbox, "create_event", title="Y", date="2026-03-20", start="10:00", end="11:00")
    ok(sandbox, "add_event_attendee", event_id=made["id"], contact_id="c-3")
    assert sandbox.state()["calendar.events"][made["id"]]["attendees"] == ["c-3"]
    failed(sandbox, "add_event_attendee", "contact_id", event_id=made["id"], contact_id="c-3")
    failed(sandbox, "add_event_attendee", "contact_id", event_id=made["id"], contact_id="c-99")


def test_initial_state_is_not_mutated_by_writes(sandbox: MobileSandbox) -> None:
    made = ok(sandbox, "create_event", title="Y", date="2026-03-20", start="10:00", end="11:00")
    ok(sandbox, "add_event_attendee", event_id=made["id"], contact_id="c-3")
    event = rows(sandbox, "calendar.events")[0]
    ok(sandbox, "reschedule_event", event_id=event["id"], date="2026-03-25", start="08:00")
    assert sandbox.evidence().initial["calendar.events"][event["id"]] == event


# -- clock ------------------------------------------------------------------------------


def test_alarms(sandbox: MobileSandbox) -> None:
    alarm = ok(sandbox, "set_alarm", time="05:30", label="Run", repeat_days=["mon", "wed"])
    assert alarm["enabled"] is True
    assert alarm["repeat_days"] == ["mon", "wed"]
    failed(sandbox, "set_alarm", "time", time="05:30", label="Again")
    invalid(sandbox, "set_alarm", time="5:30", label="Bad")
    invalid(sandbox, "set_alarm", time="05:45", label="Bad", repeat_days=["monday"])
    failed(sandbox, "toggle_alarm", "enabled", alarm_id=alarm["id"], enabled=True)
    ok(sandbox, "toggle_alarm", alarm_id=alarm["id"], enabled=False)
    assert sandbox.state()["clock.alarms"][alarm["id"]]["enabled"] is False
    times = [a["time"] for a in ok(sandbox, "list_alarms")]
    assert times == sorted(times)
    ok(sandbox, "delete_alarm", alarm_id=alarm["id"])
    failed(sandbox, "delete_alarm", "alarm_id", alarm_id=alarm["id"])


def test_timers_and_world_clock(sandbox: MobileSandbox) -> None:
    timer = ok(sandbox, "start_timer", minutes=12, label="Tea")
    assert sandbox.state()["clock.timers"][timer["id"]]["status"] == "running"
    invalid(sandbox, "start_timer", minutes=0, label="Tea")
    invalid(sandbox, "start_timer", minutes="12", label="Tea")
    ok(sandbox, "add_world_clock", city="Tokyo")
    failed(sandbox, "add_world_clock", "city", city="tokyo")


# -- notes ------------------------------------------------------------------------------


def test_notes_lifecycle(sandbox: MobileSandbox) -> None:
    made = ok(sandbox, "create_note", title="Ideas 2", body="first line", folder="ideas")
    failed(sandbox, "create_note", "title", title="ideas 2", body="dup")
    invalid(sandbox, "create_note", title="Z", body="b", folder="nowhere")
    ok(sandbox, "append_to_note", note_id=made["id"], text="second line")
    assert ok(sandbox, "get_note", note_id=made["id"])["body"] == "first line\nsecond line"
    assert [n["id"] for n in ok(sandbox, "search_notes", query="second line")] == [made["id"]]
    failed(sandbox, "move_note", "folder", note_id=made["id"], folder="ideas")
    ok(sandbox, "move_note", note_id=made["id"], folder="archive")
    assert sandbox.state()["notes.notes"][made["id"]]["folder"] == "archive"
    ok(sandbox, "delete_note", note_id=made["id"])
    failed(sandbox, "get_note", "note_id", note_id=made["id"])


# -- email ------------------------------------------------------------------------------


def test_send_reply_forward_archive(sandbox: MobileSandbox) -> None:
    mail = rows(sandbox, "email.inbox")[0]
    found = ok(sandbox, "search_emails", query=mail["subject"])
    assert mail["id"] in [m["id"] for m in found]
    assert ok(sandbox, "read_email", email_id=mail["id"])["body"] == mail["body"]
    ok(sandbox, "send_email", to=["a@b.example"], subject="Hi", body="Hello")
    ok(sandbox, "reply_to_email", email_id=mail["id"], body="Thanks")
    ok(sandbox, "forward_email", email_id=mail["id"], to=["x@y.example"], note="FYI")
    sent = rows(sandbox, "email.sent")
    assert [s["to"] for s in sent] == [["a@b.example"], [mail["from_email"]], ["x@y.example"]]
    assert sent[1]["in_reply_to"] == mail["id"]
    assert sent[2]["forwarded_from"] == mail["id"] and mail["body"] in sent[2]["body"]
    ok(sandbox, "archive_email", email_id=mail["id"])
    failed(sandbox, "archive_email", "email_id", email_id=mail["id"])


def test_email_argument_errors(sandbox: MobileSandbox) -> None:
    invalid(sandbox, "send_email", to=["not an address"], subject="Hi", body="x")
    invalid(sandbox, "send_email", to=[], subject="Hi", body="x")
    failed(sandbox, "send_email", "to", to=[email.USER_EMAIL], subject="Hi", body="x")
    failed(sandbox, "reply_to_email", "email_id", email_id="e-999", body="x")
    mail = rows(sandbox, "email.inbox")[0]
    failed(sandbox, "forward_email", "to", email_id=mail["id"], to=[mail["from_email"]])


# -- maps -------------------------------------------------------------------------------


def test_places_directions_and_saving(sandbox: MobileSandbox) -> None:
    place = ok(sandbox, "search_places", query="central station")[0]
    assert place["category"] == "station"
    assert ok(sandbox, "search_places", query="pharmacy", category="pharmacy")
    walk = ok(sandbox, "get_directions", destination_id=place["id"], mode="walking")
    drive = ok(sandbox, "get_directions", destination_id=place["id"], mode="driving")
    assert walk["minutes"] > drive["minutes"]
    failed(sandbox, "get_directions", "destination_id", destination_id=place["id"],
           mode="walking", origin_id=place["id"])  # fmt: skip
    invalid(sandbox, "get_directions", destination_id=place["id"], mode="flying")
    saved = set(sandbox.state()["maps.saved"])
    target = next(p for p in rows(sandbox, "maps.places") if f"want_to_go:{p['id']}" not in saved)
    ok(sandbox, "save_place", place_id=target["id"], list_name="want_to_go")
    failed(sandbox, "save_place", "place_id", place_id=target["id"], list_name="want_to_go")


def test_rides(sandbox: MobileSandbox) -> None:
    place = rows(sandbox, "maps.places")[0]
    estimate = ok(sandbox, "estimate_ride_fare", dropoff_id=place["id"], ride_type="comfort")
    ride = ok(sandbox, "request_ride", dropoff_id=place["id"], ride_type="comfort")
    assert ride["status"] == "requested" and ride["fare"] == estimate["fare"]
    later = ok(sandbox, "request_ride", dropoff_id=place["id"], ride_type="xl",
               pickup_date="2026-03-20", pickup_time="07:00")  # fmt: skip
    assert later["status"] == "scheduled"
    failed(sandbox, "request_ride", "pickup_time", dropoff_id=place["id"], ride_type="xl",
           pickup_time="08:00")  # fmt: skip
    failed(sandbox, "request_ride", "pickup_date", dropoff_id=place["id"], ride_type="xl",
           pickup_date="2026-03-01")  # fmt: skip
    failed(sandbox, "request_ride", "dropoff_id", dropoff_id=place["id"], ride_type="xl",
           pickup_id=place["id"])  # fmt: skip
    invalid(sandbox, "request_ride", dropoff_id=place["id"], ride_type="limo")
    ok(sandbox, "cancel_ride", ride_id=ride["id"])
    assert sandbox.state()["maps.rides"][ride["id"]]["status"] == "cancelled"
    failed(sandbox, "cancel_ride", "ride_id", ride_id=ride["id"])
    failed(sandbox, "cancel_ride", "ride_id", ride_id="ride-1")  # seeded: completed


# -- food -------------------------------------------------------------------------------


def test_order_track_cancel(sandbox: MobileSandbox) -> None:
    restaurant = rows(sandbox, "food.restaurants")[0]
    found = ok(sandbox, "search_restaurants", query=restaurant["cuisine"])
    assert restaurant["id"] in [r["id"] for r in found]
    menu = ok(sandbox, "get_menu", restaurant_id=restaurant["id"])
    lines = [{"item_id": menu[0]["id"], "quantity": 2}, {"item_id": menu[1]["id"], "quantity": 1}]
    order = ok(sandbox, "place_food_order", restaurant_id=restaurant["id"], items=lines)
    assert order["total"] == round(2 * menu[0]["price"] + menu[1]["price"], 2)
    assert sandbox.state()["food.orders"][order["order_id"]]["items"] == lines
    assert ok(sandbox, "track_food_order", order_id=order["order_id"])["status"] == "placed"
    ok(sandbox, "cancel_food_order", order_id=order["order_id"])
    failed(sandbox, "cancel_food_order", "order_id", order_id=order["order_id"])
    failed(sandbox, "cancel_food_order", "order_id", order_id="fo-1")  # seeded: delivered


def test_order_preconditions(sandbox: MobileSandbox) -> None:
    first, second = rows(sandbox, "food.restaurants")[:2]
    other = ok(sandbox, "get_menu", restaurant_id=second["id"])[0]
    failed(sandbox, "place_food_order", "items", restaurant_id=first["id"],
           items=[{"item_id": other["id"], "quantity": 1}])  # fmt: skip
    failed(sandbox, "place_food_order", "restaurant_id", restaurant_id="r-99",
           items=[{"item_id": other["id"], "quantity": 1}])  # fmt: skip
    invalid(sandbox, "place_food_order", restaurant_id=second["id"],
            items=[{"item_id": other["id"], "quantity": 0}])  # fmt: skip
    invalid(sandbox, "place_food_order", restaurant_id=second["id"],
            items=[{"item_id": other["id"]}])  # fmt: skip


def test_book_table(sandbox: MobileSandbox) -> None:
    restaurant = rows(sandbox, "food.restaurants")[0]
    args = {"restaurant_id": restaurant["id"], "date": "2026-03-20", "party_size": 4}
    booking = ok(sandbox, "book_table", time="20:00", **args)
    assert sandbox.state()["food.reservations"][booking["id"]]["party_size"] == 4
    failed(sandbox, "book_table", "time", time="23:30", **args)
    failed(sandbox, "book_table", "date", time="20:00", **{**args, "date": "2026-03-02"})
    invalid(sandbox, "book_table", time="20:00", **{**args, "party_size": 40})
