"""Policies: who chooses the actions (the scripted reference, an OpenAI-compatible model)."""
