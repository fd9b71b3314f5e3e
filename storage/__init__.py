"""Storage: the DuckDB catalog, Parquet shards and the artifact store.

Arrives with step 2 (issue 3); nothing here yet.
"""
