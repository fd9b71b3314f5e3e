"""Templates over the group_b apps (to be filled)."""

from envs.sandbox.templates.base import TemplateSet

templates = TemplateSet()
