"""Helpers for reading many records at once."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def gc_paused() -> Iterator[None]:
    """No cyclic garbage collection inside the block.

    Rebuilding thousands of records allocates millions of objects that live until the
    block's caller is done with them; the collector would walk them again and again (it
    doubled the time of bulk loads). Cycles the block leaves are collected by the
    collector's next pass after it.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
