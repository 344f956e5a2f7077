"""Tuning μ and α, metrics, exact search, the evaluation table and latency timing (the frontier is ``spar/sweep/``).

See docs/architecture.md for the packages and who imports whom."""
