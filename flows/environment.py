"""Environment variables set for a block and restored after it."""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager


@contextmanager
def scoped_environ(values: Mapping[str, str]) -> Iterator[None]:
    """``values`` in ``os.environ`` for the block (processes it starts inherit them);
    each variable is restored, or removed, after it."""
    before = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
