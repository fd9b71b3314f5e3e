"""The simulated phone's apps. Order matters: later seeders may read earlier state."""

from __future__ import annotations

from envs.sandbox.app import App
from envs.sandbox.apps import (
    calendar,
    clock,
    contacts,
    email,
    food,
    health,
    maps,
    media,
    messages,
    news,
    notes,
    photos,
    settings,
    shopping,
    smart_home,
    travel,
    wallet,
)

ALL_APPS: tuple[App, ...] = (
    contacts.app,
    messages.app,
    calendar.app,
    clock.app,
    notes.app,
    email.app,
    maps.app,
    food.app,
    shopping.app,
    wallet.app,
    travel.app,
    media.app,
    health.app,
    smart_home.app,
    settings.app,
    photos.app,
    news.app,
)
