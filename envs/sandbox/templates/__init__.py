"""Task templates of the sandbox and their catalogue."""
