"""The fault suite: hostile endpoints, identifiers that would become paths, export folders
that are not ours, reports that would be coerced, settings that would be ignored, servers
that die or start slowly, and text that reads differently than it is. Each class through
the path a user takes (the CLI, a flow, a real server), with cases of its own."""
