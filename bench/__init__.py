"""spar's benchmarks: each ``bench/<name>.py`` is run from the repository root as ``python -m bench.<name> ...``
(``--help`` for its options) and writes ``bench/results/<name>.json`` through :mod:`bench._common`; README.md in
this folder has the table of results."""
