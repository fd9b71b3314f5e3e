"""The embedded default backend: a programmatic mobile sandbox with self-checking tasks."""

from envs.sandbox.sandbox import MobileSandbox

__all__ = ["MobileSandbox"]
