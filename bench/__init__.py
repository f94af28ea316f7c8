"""pql's benchmarks: each a script (`python bench/<name>.py`), importable as `bench.<name>` with the
repository root on sys.path."""
