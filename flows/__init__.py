"""Orchestration: Prefect flows over the layers below, and the settings they read."""
