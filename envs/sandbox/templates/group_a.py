"""Templates over the group_a apps (to be filled)."""

from envs.sandbox.templates.base import TemplateSet

templates = TemplateSet()
