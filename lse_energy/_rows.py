"""Rows of an ``(N, d)`` array read in chunks, for data larger than memory.

:func:`lse_energy.gmm.fit` and :func:`lse_energy.sharding.sharded_fit` need only
sums over rows, so they can read a NumPy memmap (or an h5py / zarr dataset, or
any object with ``shape``, ``dtype`` and row slicing) a chunk at a time instead
of turning it into one device array. This module does the reading: validation
per chunk (floating dtype, finite values, named by row range), a copy of each
chunk into ordinary memory, and, for a NumPy memmap opened read-only or
read-write, dropping the chunk's pages from the process's resident set once
copied (``madvise(MADV_DONTNEED)``; the data stay in the kernel's page cache
and on disk). Without that, every page of the file read once would stay mapped
into the process and count in its resident memory until the kernel needs it.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import mmap
import operator
import sys
from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

__all__ = [
    "DEFAULT_CHUNK_ROWS",
    "RowChunks",
    "Stream",
    "is_streamed",
    "local_stream",
    "moments",
    "stream_sum",
    "choose_rows",
]

DEFAULT_CHUNK_ROWS = 1 << 16


def is_streamed(x) -> bool:
    """True for inputs read in chunks: a NumPy memmap, or an array-like (``shape``, ``dtype``) that is not in memory.

    NumPy arrays (other than memmaps), JAX arrays, lists and scalars are in memory.
    """
    if isinstance(x, np.memmap):
        return True
    if isinstance(x, (np.ndarray, jax.Array, list, tuple)) or np.isscalar(x):
        return False
    return hasattr(x, "shape") and hasattr(x, "dtype") and hasattr(x, "__getitem__")


_LIBC = None


def _madvise_dontneed(view: np.ndarray) -> None:
    """Drop the pages wholly inside ``view`` (a C-contiguous slice of a shared memmap) from the resident set."""
    global _LIBC
    if not sys.platform.startswith("linux"):
        return
    if _LIBC is None:
        _LIBC = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        _LIBC.madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    page = mmap.PAGESIZE
    start = view.__array_interface__["data"][0]
    end = start + view.nbytes
    lo, hi = -(-start // page) * page, (end // page) * page  # whole pages only: never a neighbour's
    if hi > lo:
        _LIBC.madvise(ctypes.c_void_p(lo), hi - lo, 4)  # MADV_DONTNEED; best effort, errors ignored


class RowChunks:
    """Row chunks of an ``(N, d)`` floating array-like ``x``, ``chunk_rows`` rows at a time.

    Args:
      name: the argument's name in error messages.
      x: a NumPy memmap, an in-memory array, or any object with ``shape``,
        ``dtype`` and ``x[a:b]`` row slicing.
      chunk_rows: rows per chunk (``>= 1``; default :data:`DEFAULT_CHUNK_ROWS`).
      dtype: the dtype chunks are returned in (default: ``x``'s dtype as JAX
        stores it, e.g. float32 for float64 data when x64 is off).

    Raises:
      ValueError: ``x`` is not 2-D, is empty or has a non-floating dtype.
      Non-finite values raise when the chunk holding them is read.
    """

    def __init__(self, name: str, x, chunk_rows: int | None = None, dtype=None):
        if not (hasattr(x, "shape") and hasattr(x, "dtype")):
            x = np.asarray(x)  # nested lists and tuples: small by construction, so read whole
        shape = tuple(x.shape)
        if len(shape) != 2:
            raise ValueError(f"{name} must have shape (rows, d); got shape {shape}")
        if shape[0] == 0 or shape[1] == 0:
            raise ValueError(f"{name} must be non-empty; got shape {shape}")
        src = np.dtype(x.dtype)
        if not np.issubdtype(src, np.floating):
            raise ValueError(f"{name} must have a floating dtype; got {src}")
        try:
            chunk = DEFAULT_CHUNK_ROWS if chunk_rows is None else operator.index(chunk_rows)
        except TypeError:
            raise ValueError(f"chunk_rows must be a positive integer; got {chunk_rows!r}") from None
        if chunk < 1:
            raise ValueError(f"chunk_rows must be a positive integer; got {chunk_rows!r}")
        self.name, self.x, self.chunk = name, x, chunk
        self.n, self.d = shape
        self.dtype = np.dtype(dtype) if dtype is not None else np.dtype(jax.dtypes.canonicalize_dtype(src))
        mode = getattr(x, "mode", None) if isinstance(x, np.memmap) else None
        # copy-on-write ("c") pages may hold private changes: never drop those
        self._release = mode in ("r", "r+", "readonly", "readwrite") and x.flags.c_contiguous

    @property
    def n_chunks(self) -> int:
        return -(-self.n // self.chunk)

    def read(self, i: int) -> np.ndarray:
        """Chunk ``i`` as a fresh ``(rows, d)`` array of ``self.dtype``, checked finite."""
        a, b = i * self.chunk, min((i + 1) * self.chunk, self.n)
        view = self.x[a:b]
        block = np.array(view, dtype=self.dtype, copy=True)
        if self._release:
            _madvise_dontneed(view)
        if not np.all(np.isfinite(block)):
            raise ValueError(f"{self.name} must be finite (a non-finite value in rows {a}..{b - 1})")
        return block

    def rows(self, idx) -> np.ndarray:
        """The rows at the global indices ``idx`` (any order, distinct), as ``(len(idx), d)``."""
        idx = np.asarray(idx)
        order = np.argsort(idx)
        out = np.empty((idx.size, self.d), self.dtype)
        for j in order:  # K rows: one small read each keeps h5py-style sources (increasing indices) happy
            out[j] = np.asarray(self.x[int(idx[j]) : int(idx[j]) + 1], dtype=self.dtype)[0]
        return out

    def __iter__(self):
        for i in range(self.n_chunks):
            yield self.read(i)


class Stream(NamedTuple):
    r"""Data read one pass at a time, as a fit that needs only sums over rows sees it.

    Attributes:
      chunks: ``chunks()`` yields ``(x, valid)`` device arrays, one per row
        chunk: ``(C, d)`` rows (zero-padded) and ``(C,)`` 1/0 marking the real
        ones. Each call reads the data again.
      n: the number of real rows :math:`N`.
      rows_at: ``rows_at(idx)`` returns the rows at global indices ``idx`` as
        a ``(len(idx), d)`` NumPy array.
      statistics: the model's per-chunk pass, ``statistics(params, x, valid,
        shift)`` (e.g. :func:`lse_energy.gmm.sufficient_statistics`, or a
        sharded one from :mod:`lse_energy.sharding`).
    """

    chunks: object
    n: int
    rows_at: object
    statistics: object


def local_stream(rows: RowChunks, statistics) -> Stream:
    """A :class:`Stream` over the chunks of ``rows`` on the default device (each padded to one shape: one compile)."""
    size = min(rows.chunk, rows.n)

    def chunks():
        for block in rows:
            valid = np.ones((size,), rows.dtype)
            if block.shape[0] < size:
                valid[block.shape[0] :] = 0
                block = np.concatenate([block, np.zeros((size - block.shape[0], rows.d), rows.dtype)])
            yield jnp.asarray(block), jnp.asarray(valid)

    return Stream(chunks, rows.n, rows.rows, statistics)


def stream_sum(stream: Stream, f, *args):
    """The sum of ``f(x, valid, *args)`` (a pytree) over the stream's chunks.

    JAX dispatches asynchronously: without a wait, the host would read every chunk
    ahead of the computation and hold them all. Waiting for the running total before
    adding the next chunk keeps at most two chunks in flight while still reading the
    next chunk as the current one is computed.
    """
    total = None
    for xc, vc in stream.chunks():
        s = f(xc, vc, *args)
        if total is not None:
            jax.block_until_ready(total)
        total = s if total is None else jax.tree.map(operator.add, total, s)
    return total


@jax.jit
def _masked_sum(x, valid):
    return jnp.sum(x * valid[:, None], axis=0)


@jax.jit
def _masked_scatter(x, valid, mean):
    c = (x - mean[None, :]) * valid[:, None]
    return c.T @ c


def moments(stream: Stream, reg: float):
    """``(mean, covariance + reg I)`` of the stream's rows in two passes (the biased covariance, as
    ``np.cov(bias=True)``)."""
    mean = stream_sum(stream, _masked_sum) / stream.n
    cov = stream_sum(stream, _masked_scatter, mean) / stream.n
    return mean, cov + reg * jnp.eye(mean.shape[0], dtype=mean.dtype)


PERMUTE_MAX_ROWS = 1 << 20


@partial(jax.jit, static_argnums=(1, 2))
def _choice(key, N: int, K: int):
    # One compiled program per (N, K), instead of one per primitive of the permutation.
    return jax.random.choice(key, N, shape=(K,), replace=False)


def choose_rows(key, N: int, K: int) -> np.ndarray:
    """``K`` distinct row indices in ``0..N-1``, uniformly at random (the initial means).

    Up to ``2**20`` rows, ``jax.random.choice`` without replacement, which permutes all
    ``N`` indices. Beyond, Floyd's algorithm: for ``j = N-K..N-1`` draw ``t`` uniform in
    ``0..j`` and keep ``t``, or ``j`` if ``t`` is already kept. This is a uniform ``K``-subset
    with ``O(K)`` memory, so a fit streamed from a file never holds ``O(N)``. Both
    :func:`lse_energy.gmm.init_params` and :func:`lse_energy.gmm.streamed_fit` use it, so
    the in-memory and streamed fits start from the same means.
    """
    if N <= PERMUTE_MAX_ROWS:
        return np.asarray(_choice(key, N, K))
    words = np.asarray(jax.random.bits(key, (K, 2), jnp.uint32)).astype(np.uint64)
    draws = (words[:, 0] << np.uint64(32)) | words[:, 1]  # 64 random bits: modulo bias below 2**-40
    kept: dict[int, None] = {}
    for j, w in zip(range(N - K, N), draws):
        t = int(w % np.uint64(j + 1))
        kept[j if t in kept else t] = None
    return np.fromiter(kept, dtype=np.int64, count=K)
