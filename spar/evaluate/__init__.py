"""Tuning μ and α, metrics, exact search, the evaluation table, latency and the quality-per-byte frontier.

See docs/architecture.md for the packages and who imports whom."""
