"""The ``flywheel`` command."""

import os

# Prefect's SDK reports its first import to Prefect's servers unless told not to, and
# nothing here reaches beyond this machine; set before any module imports Prefect.
os.environ.setdefault("DO_NOT_TRACK", "1")
