"""Dense encoders: model resolution, the bi-encoder, losses, encode engines and backends, embeddings.

See docs/architecture.md for the packages and who imports whom."""
