"""Benchmarks: they print figures and ratios; tests never time anything."""
