"""The SPAR FAISS index of [P, PΛ] and the passage storage codecs.

See docs/architecture.md for the packages and who imports whom.
"""
