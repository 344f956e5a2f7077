"""One experiment's assembled inputs: which Λ it uses, its artifacts for tuning and evaluation, preflight checks.

See docs/architecture.md for the packages and who imports whom.
"""
