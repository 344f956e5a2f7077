"""The sparse teachers (Pyserini BM25 and impact indexes) and labelling sampled queries with them.

See docs/architecture.md for the packages and who imports whom."""
