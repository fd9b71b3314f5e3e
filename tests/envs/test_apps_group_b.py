"""Behaviour of the group_b apps' tools: happy paths, preconditions, argument checks."""

from __future__ import annotations

from typing import Any

import pytest

from contract import ErrorKind, Feedback, InitialConditions, StatePatch, ToolCall, ToolEffect
from envs.sandbox import MobileSandbox
from envs.sandbox.apps import (
    health,
    media,
    news,
    photos,
    settings,
    shopping,
    smart_home,
    travel,
    wallet,
)
from envs.sandbox.state import WORLD_DATE

GROUP_B = (shopping, wallet, travel, media, health, smart_home, settings, photos, news)
TOOLS = [name for module in GROUP_B for name in module.app.tools] + [
    "search_contacts",
    "send_message",
]
SEED = 11
SANDBOX = MobileSandbox()


def _reset(seed: int = SEED, setup: tuple[StatePatch, ...] = ()) -> dict[str, Any]:
    SANDBOX.reset_to(InitialConditions(seed=seed, setup=setup), TOOLS)
    return SANDBOX.state()


def _call(tool: str, **arguments: Any) -> Feedback:
    return SANDBOX.execute(ToolCall(tool=tool, arguments=arguments))


def _ok(tool: str, **arguments: Any) -> Any:
    feedback = _call(tool, **arguments)
    assert feedback.error is None, feedback.error
    return feedback.result


def _fails(tool: str, kind: ErrorKind, field: str, **arguments: Any) -> None:
    feedback = _call(tool, **arguments)
    assert feedback.error is not None, f"{tool} unexpectedly succeeded"
    assert feedback.error.kind is kind, feedback.error
    assert feedback.error.field == field, feedback.error
    assert not feedback.state_changes


# -- catalogue and seeding ------------------------------------------------------------


def test_group_b_offers_enough_typed_tools() -> None:
    specs = [t.spec for module in GROUP_B for t in module.app.tools.values()]
    assert len(specs) >= 34
    for module in GROUP_B:
        assert 3 <= len(module.app.tools) <= 5, module.app.domain
        effects = {t.spec.effect for t in module.app.tools.values()}
        assert effects == {ToolEffect.READ, ToolEffect.WRITE}, module.app.domain
    assert len({s.name for s in specs}) == len(specs)


def test_seeding_is_deterministic_and_well_formed() -> None:
    first, again, other = (SANDBOX.build_world(s) for s in (SEED, SEED, SEED + 1))
    domains = {m.app.domain for m in GROUP_B}
    names = [n for n in first if n.split(".")[0] in domains]
    assert {n.split(".")[0] for n in names} == domains
    for name in names:
        assert first[name] == again[name], name
        for key, row in first[name].items():
            assert isinstance(row["id"], str) and row["id"] == key
    assert any(first[n] != other[n] for n in names), "different seeds give the same world"


def test_read_tools_do_not_change_state() -> None:
    _reset()
    reads: dict[str, dict[str, Any]] = {
        "search_products": {"query": "coffee"},
        "get_order_status": {"order_id": "o-1"},
        "get_balance": {},
        "list_transactions": {"limit": 3},
        "search_flights": {"origin": "Lisbon", "destination": "Paris", "date": "2026-03-20"},
        "search_hotels": {"city": "Rome"},
        "search_music": {"query": "rock"},
        "get_playlist": {},
        "get_health_summary": {"date": WORLD_DATE},
        "list_workouts": {},
        "list_devices": {"room": "kitchen"},
        "get_settings": {},
        "search_photos": {"query": "in"},
        "web_search": {"query": "coffee kettle"},
        "get_news": {"topic": "science"},
        "read_article": {"article_id": "a-1"},
    }
    for tool, args in reads.items():
        assert SANDBOX.tool_spec(tool).effect is ToolEffect.READ
        feedback = _call(tool, **args)
        assert feedback.error is None, (tool, feedback.error)
        assert not feedback.state_changes, tool
    assert len(_ok("list_transactions", limit=3)) == 3
    assert _ok("web_search", query="coffee kettle")[0]["id"] == "web-1"


@pytest.mark.parametrize(
    ("tool", "arguments", "field"),
    [
        ("add_to_cart", {"product_id": "p-1", "quantity": 0}, "quantity"),
        ("checkout", {"shipping": "overnight"}, "shipping"),
        ("send_money", {"contact_id": "c-1", "amount": "ten"}, "amount"),
        ("send_money", {"contact_id": "c-1"}, "amount"),
        ("book_hotel", {"hotel_id": "h-1", "check_in": "20/03/2026", "nights": 2}, "check_in"),
        ("book_flight", {"flight_id": "fl-1", "passengers": 7}, "passengers"),
        ("create_playlist", {"name": "Empty", "song_ids": []}, "song_ids"),
        ("log_workout", {"type": "dancing", "minutes": 30}, "type"),
        ("log_water", {"ml": 10}, "ml"),
        ("set_thermostat", {"device_id": "d-13", "temperature": 40}, "temperature"),
        ("set_device_power", {"device_id": "d-1", "on": "yes"}, "on"),
        ("set_setting", {"name": "hyperdrive", "enabled": True}, "name"),
        ("set_level", {"name": "brightness", "value": 120}, "value"),
        ("schedule_do_not_disturb", {"start": "25:00", "end": "07:00"}, "start"),
        ("share_photo", {"photo_id": "ph-1"}, "contact_id"),
        ("follow_news_topic", {"topic": "gossip", "follow": True}, "topic"),
        ("get_news", {"topic": "science", "colour": "red"}, "colour"),
    ],
)
def test_invalid_arguments_are_typed_errors(
    tool: str, arguments: dict[str, Any], field: str
) -> None:
    _reset()
    feedback = _call(tool, **arguments)
    assert feedback.error is not None
    assert feedback.error.kind is ErrorKind.INVALID_ARGUMENTS
    assert feedback.error.field is not None and field in feedback.error.field
    assert not feedback.state_changes


# -- shopping -------------------------------------------------------------------------


def test_cart_checkout_and_cancel() -> None:
    state = _reset()
    product = state["shopping.products"]["p-2"]
    stock = product["stock"]
    _ok("add_to_cart", product_id="p-2", quantity=1)
    assert _ok("add_to_cart", product_id="p-2", quantity=1)["quantity_in_cart"] == 2
    result = _ok("checkout", shipping="express")
    order = state["shopping.orders"][result["order_id"]]
    assert result["order_id"] == "o-1001"
    assert order["items"] == [{"product_id": "p-2", "quantity": 2}]
    assert order["total"] == round(product["price"] * 2 + shopping.SHIPPING_FEES["express"], 2)
    assert order["status"] == "placed" and order["date"] == WORLD_DATE
    assert state["shopping.products"]["p-2"]["stock"] == stock - 2
    assert state["shopping.cart"] == {}
    assert product["stock"] == stock, "the stored row was mutated in place"
    _ok("cancel_order", order_id="o-1001")
    assert state["shopping.orders"]["o-1001"]["status"] == "cancelled"
    _fails("cancel_order", ErrorKind.PRECONDITION_FAILED, "order_id", order_id="o-1001")


def test_shopping_preconditions() -> None:
    state = _reset()
    _fails("checkout", ErrorKind.PRECONDITION_FAILED, "shipping", shipping="standard")
    _fails(
        "add_to_cart", ErrorKind.PRECONDITION_FAILED, "product_id", product_id="p-99", quantity=1
    )
    stock = state["shopping.products"]["p-1"]["stock"]
    if stock < 10:
        _fails(
            "add_to_cart", ErrorKind.PRECONDITION_FAILED, "quantity", product_id="p-1", quantity=10
        )
    _fails("cancel_order", ErrorKind.PRECONDITION_FAILED, "order_id", order_id="o-1")
    hits = _ok("search_products", query="coffee", max_price=20)
    assert hits and all("coffee" in h["name"].lower() and h["price"] <= 20 for h in hits)


# -- wallet ---------------------------------------------------------------------------


def test_send_money_moves_the_balance() -> None:
    state = _reset()
    before = state["wallet.accounts"]["acct-1"]["balance"]
    result = _ok("send_money", contact_id="c-3", amount=42.5, note="concert")
    row = state["wallet.transactions"][result["transaction_id"]]
    assert (row["contact_id"], row["amount"], row["note"], row["date"]) == (
        "c-3",
        42.5,
        "concert",
        WORLD_DATE,
    )
    assert row["counterparty"] == state["contacts.people"]["c-3"]["name"]
    assert state["wallet.accounts"]["acct-1"]["balance"] == round(before - 42.5, 2)


def test_payments_need_funds_and_the_bank_code() -> None:
    state = _reset()
    balance = state["wallet.accounts"]["acct-1"]["balance"]
    _fails(
        "send_money", ErrorKind.PRECONDITION_FAILED, "amount", contact_id="c-1", amount=balance + 1
    )
    _fails("send_money", ErrorKind.PRECONDITION_FAILED, "contact_id", contact_id="c-99", amount=5)
    _fails(
        "send_money",
        ErrorKind.PRECONDITION_FAILED,
        "verification_code",
        contact_id="c-1",
        amount=1200,
        verification_code="000000",
    )
    code = state["gui.screens"]["bank:verification"]["content"].rsplit(" ", 1)[-1]
    _ok("send_money", contact_id="c-1", amount=1200, verification_code=code)
    assert state["wallet.accounts"]["acct-1"]["balance"] == round(balance - 1200, 2)


def test_requests_and_cards() -> None:
    state = _reset()
    result = _ok("request_money", contact_id="c-2", amount=18.4)
    assert state["wallet.requests"][result["request_id"]]["amount"] == 18.4
    _ok("set_card_frozen", card_id="card-2", frozen=True)
    assert state["wallet.cards"]["card-2"]["frozen"] is True
    _fails(
        "set_card_frozen", ErrorKind.PRECONDITION_FAILED, "frozen", card_id="card-2", frozen=True
    )
    _fails(
        "set_card_frozen", ErrorKind.PRECONDITION_FAILED, "card_id", card_id="card-9", frozen=True
    )


# -- travel ---------------------------------------------------------------------------


def test_book_flight_and_hotel_then_cancel() -> None:
    state = _reset()
    flight = next(f for f in state["travel.flights"].values() if f["origin"] == "Lisbon")
    found = _ok(
        "search_flights", origin="lisbon", destination=flight["destination"], date=flight["date"]
    )
    assert flight["id"] in [f["id"] for f in found]
    assert [f["price"] for f in found] == sorted(f["price"] for f in found)
    booking = _ok("book_flight", flight_id=flight["id"], passengers=1)
    assert state["travel.flights"][flight["id"]]["seats_left"] == flight["seats_left"] - 1
    hotel = _ok("search_hotels", city=flight["destination"])[0]
    stay = _ok("book_hotel", hotel_id=hotel["id"], check_in=flight["date"], nights=3)
    row = state["travel.bookings"][stay["booking_id"]]
    assert (row["kind"], row["item_id"], row["nights"]) == ("hotel", hotel["id"], 3)
    assert row["total"] == round(hotel["nightly_price"] * 3, 2)
    _ok("cancel_booking", booking_id=booking["booking_id"])
    assert state["travel.bookings"][booking["booking_id"]]["status"] == "cancelled"
    _fails(
        "cancel_booking",
        ErrorKind.PRECONDITION_FAILED,
        "booking_id",
        booking_id=booking["booking_id"],
    )


def test_travel_preconditions() -> None:
    state = _reset()
    flight = min(state["travel.flights"].values(), key=lambda f: f["seats_left"])
    if flight["seats_left"] < 6:
        _fails(
            "book_flight",
            ErrorKind.PRECONDITION_FAILED,
            "passengers",
            flight_id=flight["id"],
            passengers=6,
        )
    _fails(
        "book_flight", ErrorKind.PRECONDITION_FAILED, "flight_id", flight_id="fl-999", passengers=1
    )
    _fails(
        "book_hotel",
        ErrorKind.PRECONDITION_FAILED,
        "check_in",
        hotel_id="h-1",
        check_in="2026-03-01",
        nights=2,
    )


# -- media ----------------------------------------------------------------------------


def test_play_and_playlists() -> None:
    state = _reset()
    assert _ok("search_music", query="Paper Lanterns")[0]["id"] == "s-2"
    _ok("play_song", song_id="s-2")
    assert state["media.player"]["player"] == {
        "id": "player",
        "song_id": "s-2",
        "playlist_id": "",
        "playing": True,
    }
    new = _ok("create_playlist", name="Focus", song_ids=["s-1", "s-5"])
    assert state["media.playlists"][new["playlist_id"]]["song_ids"] == ["s-1", "s-5"]
    _ok("add_song_to_playlist", playlist_id=new["playlist_id"], song_id="s-9")
    assert state["media.playlists"][new["playlist_id"]]["song_ids"] == ["s-1", "s-5", "s-9"]
    _fails(
        "add_song_to_playlist",
        ErrorKind.PRECONDITION_FAILED,
        "song_id",
        playlist_id=new["playlist_id"],
        song_id="s-9",
    )
    _fails("create_playlist", ErrorKind.PRECONDITION_FAILED, "name", name="focus", song_ids=["s-1"])
    _fails(
        "create_playlist", ErrorKind.PRECONDITION_FAILED, "song_ids", name="X", song_ids=["s-99"]
    )
    _fails("play_song", ErrorKind.PRECONDITION_FAILED, "song_id", song_id="s-99")
    assert len(_ok("get_playlist", playlist_id="pl-1")["songs"]) == 5


# -- health ---------------------------------------------------------------------------


def test_health_logging() -> None:
    state = _reset()
    _ok("log_workout", type="yoga", minutes=30)
    _ok("log_water", ml=500)
    summary = _ok("get_health_summary", date=WORLD_DATE)
    assert summary["water_ml"] == 500
    assert [(w["type"], w["minutes"]) for w in summary["workouts"]] == [("yoga", 30)]
    assert _ok("list_workouts", limit=1)[0]["type"] == "yoga"
    goal = state["health.goals"]["goals"]["daily_steps"]
    _ok("set_step_goal", steps=goal + 1000)
    assert state["health.goals"]["goals"]["daily_steps"] == goal + 1000
    _fails("set_step_goal", ErrorKind.PRECONDITION_FAILED, "steps", steps=goal + 1000)
    _fails(
        "log_workout",
        ErrorKind.PRECONDITION_FAILED,
        "date",
        type="yoga",
        minutes=5,
        date="2026-04-01",
    )
    _fails("get_health_summary", ErrorKind.PRECONDITION_FAILED, "date", date="2025-01-01")


# -- smart home -----------------------------------------------------------------------


def test_smart_home_devices() -> None:
    state = _reset()
    light = state["smart_home.devices"]["d-3"]
    _ok("set_device_power", device_id="d-3", on=not light["power"])
    assert state["smart_home.devices"]["d-3"]["power"] is (not light["power"])
    _ok("set_light_brightness", device_id="d-4", level=15)
    assert state["smart_home.devices"]["d-4"]["brightness"] == 15
    assert state["smart_home.devices"]["d-4"]["power"] is True
    _ok("set_thermostat", device_id=smart_home.THERMOSTAT, temperature=19.5, mode="auto")
    thermostat = state["smart_home.devices"][smart_home.THERMOSTAT]
    assert (thermostat["target_temp"], thermostat["mode"]) == (19.5, "auto")
    _ok("set_door_lock", device_id=smart_home.FRONT_DOOR, locked=True)
    assert state["smart_home.devices"][smart_home.FRONT_DOOR]["locked"] is True
    assert all(d["room"] == "kitchen" for d in _ok("list_devices", room="Kitchen"))


def test_smart_home_preconditions() -> None:
    _reset()
    _fails(
        "set_device_power", ErrorKind.PRECONDITION_FAILED, "device_id", device_id="d-10", on=True
    )
    _fails(
        "set_light_brightness", ErrorKind.PRECONDITION_FAILED, "device_id", device_id="d-7", level=5
    )
    _fails(
        "set_thermostat",
        ErrorKind.PRECONDITION_FAILED,
        "device_id",
        device_id="d-1",
        temperature=20,
    )
    _fails(
        "set_door_lock", ErrorKind.PRECONDITION_FAILED, "device_id", device_id="d-13", locked=True
    )
    _fails(
        "set_door_lock", ErrorKind.PRECONDITION_FAILED, "device_id", device_id="d-77", locked=True
    )


# -- settings -------------------------------------------------------------------------


def test_phone_settings() -> None:
    state = _reset()
    _ok("set_setting", name="do_not_disturb", enabled=True)
    assert state["settings.toggles"]["do_not_disturb"]["enabled"] is True
    _ok("set_level", name="ring_volume", value=0)
    assert state["settings.levels"]["ring_volume"]["value"] == 0
    _ok("connect_wifi", network_id="net-2")
    networks = state["settings.networks"]
    assert networks["net-2"]["connected"] and not networks["net-1"]["connected"]
    _ok("schedule_do_not_disturb", start="22:30", end="07:00")
    _ok("schedule_do_not_disturb", start="23:00", end="06:30")
    assert state["settings.schedules"]["dnd"]["start"] == "23:00"
    shown = _ok("get_settings")
    assert shown["toggles"]["do_not_disturb"] is True and shown["levels"]["ring_volume"] == 0
    _fails(
        "schedule_do_not_disturb", ErrorKind.PRECONDITION_FAILED, "end", start="22:00", end="22:00"
    )
    _fails("connect_wifi", ErrorKind.PRECONDITION_FAILED, "network_id", network_id="net-99")
    _ok("set_setting", name="wifi", enabled=False)
    _fails("connect_wifi", ErrorKind.PRECONDITION_FAILED, "network_id", network_id="net-3")


# -- photos ---------------------------------------------------------------------------


def test_photos_albums_and_sharing() -> None:
    state = _reset()
    photo = state["photos.items"]["ph-4"]
    assert [p["id"] for p in _ok("search_photos", query=photo["title"])] == ["ph-4"]
    shared = _ok("share_photo", photo_id="ph-4", contact_id="c-5")
    row = state["photos.shares"][shared["share_id"]]
    assert (row["photo_id"], row["contact_id"], row["date"]) == ("ph-4", "c-5", WORLD_DATE)
    album = _ok("create_album", name="Best of March", photo_ids=["ph-1", "ph-2"])
    _ok("add_photo_to_album", album_id=album["album_id"], photo_id="ph-4")
    assert state["photos.albums"][album["album_id"]]["photo_ids"] == ["ph-1", "ph-2", "ph-4"]
    _ok("set_photo_favorite", photo_id="ph-4", favorite=True)
    assert state["photos.items"]["ph-4"]["favorite"] is True
    _fails(
        "share_photo",
        ErrorKind.PRECONDITION_FAILED,
        "contact_id",
        photo_id="ph-4",
        contact_id="c-40",
    )
    _fails(
        "share_photo", ErrorKind.PRECONDITION_FAILED, "photo_id", photo_id="ph-99", contact_id="c-1"
    )
    _fails("create_album", ErrorKind.PRECONDITION_FAILED, "name", name="family", photo_ids=["ph-1"])
    _fails(
        "add_photo_to_album",
        ErrorKind.PRECONDITION_FAILED,
        "photo_id",
        album_id=album["album_id"],
        photo_id="ph-4",
    )


# -- news -----------------------------------------------------------------------------


def test_news_reading_saving_and_topics() -> None:
    state = _reset()
    headlines = _ok("get_news", topic="science", limit=2)
    assert len(headlines) == 2 and headlines[0]["date"] >= headlines[1]["date"]
    article = _ok("read_article", article_id=headlines[0]["id"])
    assert article["topic"] == "science"
    _ok("save_article", article_id=article["id"])
    assert article["id"] in state["news.saved"]
    _fails("save_article", ErrorKind.PRECONDITION_FAILED, "article_id", article_id=article["id"])
    _fails("read_article", ErrorKind.PRECONDITION_FAILED, "article_id", article_id="a-999")
    _ok("follow_news_topic", topic="science", follow=True)
    assert state["news.topics"]["science"]["followed"] is True


def test_setup_patches_reach_the_tools() -> None:
    patch = StatePatch(
        collection="gui.screens",
        row={
            "id": "bank:verification",
            "app": "bank",
            "screen": "verification",
            "content": "Your one-time code is 424242",
        },
    )
    _reset(setup=(patch,))
    _ok("send_money", contact_id="c-1", amount=1001, verification_code="424242")
    assert wallet.bank_code(SANDBOX.state()) == "424242"
