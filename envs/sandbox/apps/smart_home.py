"""smart_home app (to be filled)."""

from envs.sandbox.app import App

app = App("smart_home")
