"""Orchestration: Prefect flows over the layers below, and the settings they read."""

import os

# Prefect's SDK reports its first import to Prefect's servers unless told not to, and
# nothing here reaches beyond this machine (a worker may import flows before the CLI).
os.environ.setdefault("DO_NOT_TRACK", "1")
