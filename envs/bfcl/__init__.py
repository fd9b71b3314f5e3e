"""BFCL's multi-turn world as a foreign backend (``bfcl-eval``'s data and executable classes)."""
