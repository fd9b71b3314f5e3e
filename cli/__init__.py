"""The ``flywheel`` command."""
