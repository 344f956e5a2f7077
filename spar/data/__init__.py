"""Data: corpus readers, the passages table, query sampling, question sets and answers.

See docs/architecture.md for the packages and who imports whom."""
