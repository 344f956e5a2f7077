"""The quality-per-byte frontier: Λ kinds × dimensions × storages × seeds, each point built as the stages build it.

A layer above ``evaluate/`` (it uses its exact search, metrics and tuning); nothing below imports it. See
docs/architecture.md for the packages and who imports whom."""
