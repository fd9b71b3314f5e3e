"""Curation: checking, filtering and attributing what the collector produced."""
