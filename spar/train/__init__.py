"""Training a trainable Λ: the Lightning module and driver, and its data.

See docs/architecture.md for the packages and who imports whom."""
