"""Execution backends: where actions run and what verifiers read."""
