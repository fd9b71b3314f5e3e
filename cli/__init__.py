"""The ``flywheel`` command."""

import flows  # noqa: F401  (first: it sets the process's environment, see flows/__init__)
