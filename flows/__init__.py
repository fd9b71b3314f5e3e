"""Orchestration: Prefect flows over the layers below, and the settings they read."""

import os

# Set on import, before any module imports Prefect, Arrow or rensa (a worker may import
# flows before the CLI; the CLI imports this first):
# - Prefect's SDK reports its first import to Prefect's servers unless told not to, and
#   nothing here reaches beyond this machine.
# - Arrow's memory pool and rensa (MinHash) allocate through mimalloc, which by default
#   keeps freed pages for reuse, so each stage of a round would leave its peak behind
#   (rensa's sketches of a 17,689-task construction: 24 MB kept after they were freed).
#   mimalloc reads the variable when it loads.
os.environ.setdefault("DO_NOT_TRACK", "1")
os.environ.setdefault("MIMALLOC_PURGE_DELAY", "0")
