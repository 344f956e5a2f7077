"""The published SPAR model: its directory and card, searching with it, indexing any corpus with it.

See docs/architecture.md for the packages and who imports whom.
"""
