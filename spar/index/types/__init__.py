"""FAISS index types behind one contract (:mod:`spar.index.types.registry`): one module per ``index.type``.

- :mod:`spar.index.types.flat`: the exhaustive scan (float32, or any codec scanned in full).
- :mod:`spar.index.types.hnsw`: a proximity graph (HNSW) over float32 or scalar-quantized vectors; what
  ``index.type: auto`` serves from ``index.auto_flat_below`` passages.
- :mod:`spar.index.types.ivf`: inverted lists over a flat k-means quantizer, any storage.
- :mod:`spar.index.types.ivfpq`: inverted lists of PQ codes (``IndexIVFPQ``).
"""
