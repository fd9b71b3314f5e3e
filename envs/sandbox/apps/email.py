"""email app (to be filled)."""

from envs.sandbox.app import App

app = App("email")
