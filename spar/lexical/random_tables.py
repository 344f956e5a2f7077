"""The projection Λ's random term tables, regenerated from a seed anywhere (in spar and in a published model).

A projection Λ multiplies the teacher's term weights by a random table ``R`` [V, dim] that is a function of the
seed and the vocabulary, so neither a Λ directory nor a published model needs to store it: both keep the seed and
regenerate ``R``; a published model also keeps a SHA-256 checksum of ``R``, so a table regenerated differently
elsewhere is refused (:func:`check_table`) instead of silently giving other vectors.

- ``gaussian``: entries N(0, 1/dim), rows drawn in vocabulary order from ``numpy.random.default_rng(seed)`` (PCG64
  and NumPy's float32 ziggurat), in blocks of 8,192 rows. This is the generator every existing ``gaussian`` Λ was
  made with, so it is kept as it is (a new generator would change every existing run's vectors). NumPy promises
  a stable stream for its bit generators but not for ``Generator`` methods across versions (NEP 19); the stream of
  ``standard_normal`` has not changed since NumPy 1.17, and the checksum turns a future change into a one-line
  error. The table is dense: V × dim × 4 bytes in memory (a Wikipedia vocabulary at 3,072 dims: gigabytes).
- ``sparse`` (sparse Johnson–Lindenstrauss, the "block" construction of Kane & Nelson, 2014): ``dim`` is cut into
  ``nonzeros`` blocks and each term has one entry ±1/√nonzeros in every block, at a position and with a sign hashed
  from ``(seed, term)``. ``E[R Rᵀ] = I`` as for the Gaussian, with a slightly smaller variance (no noise from the
  matching terms themselves). Nothing depends on the vocabulary's order or size, nothing is stored, and the table
  in memory is ``nonzeros`` (column, value) pairs per term. ``countsketch`` is the case ``nonzeros = 1``.

Why a hash written out here rather than a library's random generator for ``sparse``: the positions and signs must be
the same bits in every process that ever encodes with the model (torch's and NumPy's generators may change between
versions). A term's key is the first 8 bytes of ``blake2b(f"{seed}\\0{term}")`` (a fixed standard function in
``hashlib``), read as a little-endian integer; block 0 uses the key itself (column ``key mod dim``, sign ``+`` when
its top bit is set: the former count-sketch rule, unchanged) and block ``j ≥ 1`` the ``j``-th output of a SplitMix64
generator seeded with the key. Integers only: the same table on every platform, NumPy version and byte order.

This module imports nothing from ``spar``: a published model ships it as ``spar_random_tables.py`` beside
``spar_modules.py`` (see :mod:`spar.lexical.st_modules`).

Example::

    >>> from spar.lexical.random_tables import sparse_rows, table_checksum, gaussian_table
    >>> cols, signs = sparse_rows(["moon", "sun"], dim=8, nonzeros=2, seed=0)
    >>> cols.shape, bool((cols[:, 0] < 4).all() and (cols[:, 1] >= 4).all()), sorted(set(signs.ravel().tolist()))
    ((2, 2), True, [-1, 1])
    >>> cols2, _ = sparse_rows(["sun"], dim=8, nonzeros=2, seed=0)     # a term's row ignores the rest of the vocabulary
    >>> bool((cols2[0] == cols[1]).all())
    True
    >>> gaussian_table(3, 4, seed=0).shape, len(table_checksum(gaussian_table(3, 4, seed=0)))
    ((3, 4), 64)
"""

from __future__ import annotations

import hashlib
from typing import Any, Sequence

import numpy as np

#: Rows of a Gaussian table generated per step (bounds the transient memory of a large vocabulary).
ROW_BLOCK = 8192
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)


def gaussian_table(rows: int, dim: int, seed: int) -> np.ndarray:
    """``rows`` × ``dim`` float32 entries N(0, 1/dim) from ``numpy.random.default_rng(seed)``, row after row."""
    rng = np.random.default_rng(seed)
    out = np.empty((rows, dim), dtype=np.float32)
    scale = np.float32(1.0 / np.sqrt(dim))
    for start in range(0, rows, ROW_BLOCK):
        stop = min(rows, start + ROW_BLOCK)
        out[start:stop] = rng.standard_normal((stop - start, dim), dtype=np.float32) * scale
    return out


def term_keys(vocab: Sequence[str], seed: int) -> np.ndarray:
    """Each term's 64-bit key: the first 8 bytes of ``blake2b(f"{seed}\\0{term}")``, little-endian (uint64 [V])."""
    return np.fromiter((int.from_bytes(hashlib.blake2b(f"{seed}\0{term}".encode(), digest_size=8).digest(), "little")
                        for term in vocab), dtype=np.uint64, count=len(vocab))


def splitmix64(state: np.ndarray) -> np.ndarray:
    """SplitMix64's output function (Steele, Lea & Flood, 2014) on every element of a uint64 array."""
    with np.errstate(over="ignore"):
        z = state.astype(np.uint64, copy=True)
        z = (z ^ (z >> np.uint64(30))) * _MIX1
        z = (z ^ (z >> np.uint64(27))) * _MIX2
        return z ^ (z >> np.uint64(31))


def sparse_rows(vocab: Sequence[str], dim: int, nonzeros: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The sparse table's entries: columns int32 [V, nonzeros] (block ``j`` holds column ``j``, increasing) and signs
    int8 [V, nonzeros] (±1); each entry's value is ``sign / √nonzeros``."""
    if not 1 <= nonzeros <= dim:
        raise ValueError(f"nonzeros must be between 1 and the dimension {dim}, got {nonzeros}")
    keys = term_keys(vocab, seed)
    cols = np.empty((len(keys), nonzeros), dtype=np.int32)
    signs = np.empty((len(keys), nonzeros), dtype=np.int8)
    for j in range(nonzeros):
        with np.errstate(over="ignore"):
            h = keys if j == 0 else splitmix64(keys + _GOLDEN * np.uint64(j))
        lo, hi = j * dim // nonzeros, (j + 1) * dim // nonzeros
        cols[:, j] = lo + (h % np.uint64(hi - lo)).astype(np.int64)
        signs[:, j] = np.where((h >> np.uint64(63)) == np.uint64(1), 1, -1)
    return cols, signs


def sparse_value(nonzeros: int) -> np.float32:
    """The magnitude of every entry of a sparse table: ``1 / √nonzeros`` as float32."""
    return np.float32(1.0 / np.sqrt(nonzeros))


def table_checksum(*arrays: np.ndarray) -> str:
    """SHA-256 of the arrays' little-endian bytes, in order (a table's identity, whatever produced it)."""
    digest = hashlib.sha256()
    for array in arrays:
        array = np.ascontiguousarray(array)
        digest.update(array.astype(array.dtype.newbyteorder("<"), copy=False).tobytes())
    return digest.hexdigest()


def regenerate(spec: dict[str, Any], vocab: Sequence[str]) -> tuple[np.ndarray, ...]:
    """The table a spec describes (``projection``: ``gaussian`` -> (dense float32 [V, dim],); ``sparse`` ->
    (columns, signs))."""
    projection, dim, seed = spec.get("projection"), int(spec["dim"]), int(spec["seed"])
    if projection == "gaussian":
        return (gaussian_table(len(vocab), dim, seed),)
    if projection == "sparse":
        return sparse_rows(vocab, dim, int(spec["nonzeros"]), seed)
    raise ValueError(f"unknown projection {projection!r} (expected 'gaussian' or 'sparse')")


def table_spec(projection: str, dim: int, seed: int, nonzeros: int | None, arrays: Sequence[np.ndarray]) -> dict:
    """What a published model records instead of a table: how to regenerate it, and the checksum of ``arrays`` (the
    table as :func:`regenerate` returns it)."""
    spec: dict[str, Any] = {"projection": projection, "dim": int(dim), "seed": int(seed)}
    if projection == "sparse":
        spec["nonzeros"] = int(nonzeros or 1)
        spec["generator"] = "blake2b key + splitmix64 per block (spar.lexical.random_tables)"
    else:
        spec["generator"] = f"numpy.random.default_rng(seed).standard_normal float32 (numpy {np.__version__})"
    spec["sha256"] = table_checksum(*arrays)
    return spec


def check_table(spec: dict[str, Any], vocab: Sequence[str], source: str) -> tuple[np.ndarray, ...]:
    """Regenerate the table of ``spec`` and check its checksum; a mismatch is a one-line ``ValueError`` naming
    ``source`` (the file that records the spec)."""
    arrays = regenerate(spec, vocab)
    found = table_checksum(*arrays)
    if found != spec.get("sha256"):
        raise ValueError(f"{source}: the term table regenerated from its seed ({spec.get('projection')}, seed "
                         f"{spec.get('seed')}, {len(vocab)} x {spec.get('dim')}) has checksum {found[:16]}, the file "
                         f"records {str(spec.get('sha256'))[:16]} (made with: {spec.get('generator')}; this is "
                         f"numpy {np.__version__}): not the table the model was published with")
    return arrays
