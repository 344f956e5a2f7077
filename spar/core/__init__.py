"""The foundation every other package builds on: config, errors, console, artifacts and manifests, fingerprints, the
stage runner, run paths, Arrow schemas, the JVM.

See docs/architecture.md for the packages and who imports whom."""
