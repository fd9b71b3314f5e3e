"""Every task template, in a fixed order (sampling depends on it)."""

from __future__ import annotations

from envs.sandbox.templates import communication, group_a, group_b
from envs.sandbox.templates.base import TaskTemplate

ALL_TEMPLATES: tuple[TaskTemplate, ...] = (
    *communication.templates.templates,
    *group_a.templates.templates,
    *group_b.templates.templates,
)
