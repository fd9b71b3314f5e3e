"""The shapes of identifiers, checked where they enter: the CLI, settings, Prefect forms,
feedback reports and imported records.

Several become parts of paths (a round's shards live under ``rounds/<round id>/``) or of
titles people read (Label Studio projects), so each has one strict pattern: no
separators, no ``..``, no control characters, a bounded length. Content-derived ids are
their prefix and 20 hex digits (``content_hash``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from contract.errors import InvalidInputError

_HEX_ID = "[0-9a-f]{20}"


@dataclass(frozen=True)
class IdShape:
    """One kind of identifier: its pattern and an example for error messages."""

    what: str
    pattern: str
    example: str

    def matches(self, value: object) -> bool:
        return isinstance(value, str) and re.fullmatch(self.pattern, value) is not None

    def check(self, field: str, value: object) -> str:
        """``value`` when it has this shape; else an ``InvalidInputError`` naming ``field``."""
        if not self.matches(value):
            shown = repr(value) if len(repr(value)) <= 80 else repr(value)[:77] + "..."
            raise InvalidInputError(
                field, f"{shown} is not {self.what} (like {self.example!r}; {self.rule})"
            )
        assert isinstance(value, str)
        return value

    @property
    def rule(self) -> str:
        return _RULES.get(self.pattern, f"pattern {self.pattern}")


ROUND_ID = IdShape("a round id", r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}", "round-3f2a9c1b7d0e")
"""Derived ids are ``round-<12 hex>``; a person may name a round, within this pattern."""
DATASET_ID = IdShape("a dataset version id", f"ds-{_HEX_ID}", "ds-" + "0" * 20)
MODEL_ID = IdShape("a model id", f"model-{_HEX_ID}", "model-" + "0" * 20)
MODEL_NAME = IdShape(
    "a model name", r"[A-Za-z0-9][A-Za-z0-9._+-]{0,199}", "tiny-sft-ds-0-20261202T000000Z"
)
MODEL_REF = IdShape(
    "a model reference (a model id, a model name, 'latest' or 'candidate')",
    MODEL_NAME.pattern,
    "latest",
)
TASK_ID = IdShape("a task id", f"task-{_HEX_ID}", "task-" + "0" * 20)
TRAJECTORY_ID = IdShape("a trajectory id", f"traj-{_HEX_ID}", "traj-" + "0" * 20)
FINGERPRINT = IdShape("a task fingerprint", f"fp-{_HEX_ID}", "fp-" + "0" * 20)
FEEDBACK_ID = IdShape("a feedback report id", f"fb-{_HEX_ID}", "fb-" + "0" * 20)
PROJECT_PREFIX = IdShape("a project prefix", r"[A-Za-z0-9][A-Za-z0-9 ._-]{0,63}", "flywheel")
BLOCK_NAME = IdShape("a Prefect block name", r"[a-z0-9][a-z0-9-]{0,63}", "label-studio-token")
WORK_POOL = IdShape("a Prefect work pool name", BLOCK_NAME.pattern, "flywheel")

_RULES = {
    ROUND_ID.pattern: "a letter or digit, then up to 127 letters, digits, '.', '_' or '-'",
    MODEL_NAME.pattern: "a letter or digit, then up to 199 letters, digits, '.', '_', '+' or '-'",
    PROJECT_PREFIX.pattern: "a letter or digit, then up to 63 letters, digits, spaces, "
    "'.', '_' or '-'",
    BLOCK_NAME.pattern: "lowercase letters, digits and '-', at most 64",
    **{
        shape.pattern: f"{shape.example[: shape.example.index('-') + 1]} and 20 hex digits"
        for shape in (DATASET_ID, MODEL_ID, TASK_ID, TRAJECTORY_ID, FINGERPRINT, FEEDBACK_ID)
    },
}


def safe_component(text: str, fallback: str = "x") -> str:
    """``text`` as one path component of the ``MODEL_NAME`` alphabet: every other
    character becomes ``-``, and a leading ``.`` or ``-`` gets ``fallback`` before it."""
    cleaned = re.sub(r"[^A-Za-z0-9._+-]", "-", text)
    if not cleaned or not cleaned[0].isalnum():
        cleaned = fallback + cleaned
    return cleaned
