r"""Data-parallel energies: the children sharded across devices.

Every energy in this package is a sum over *children*,
:math:`E = -\sum_c \ln \sum_p \exp \mathrm{sim}(v_c, v_p)`, and every
closed-form update needs only sums over children of per-child quantities.
So the children (data points, queries) can be split across devices: each
device handles its rows, and one all-reduce (``psum``) of a few small arrays
per iteration combines them. The parents (mixture components, memories) are
replicated.

* GMM EM. The E-step at :math:`\theta_t` gives, per device, the sufficient
  statistics :math:`\big(\sum_i \ln p(x_i),\; \sum_i r_{ik},\; \sum_i r_{ik} x_i,\;
  \sum_i r_{ik} x_i x_i^\top\big)` (packed into one ``(K, 1 + d + d(d+1)/2)``
  array, see :func:`lse_energy.gmm.em_step`); their ``psum`` is exactly what the
  single-device M-step uses.
* Hopfield retrieval. Each query evolves independently given the memories,
  so sharding the queries needs no communication at all.

The results equal the single-device ones up to the order of the floating
point sums (``tests/integration/test_sharding.py`` checks agreement to ``1e-10`` in float64
on 4 simulated devices).

Devices. A :class:`jax.sharding.Mesh` names the devices; :func:`data_mesh`
makes a one-axis mesh over all (or the first ``n``) devices:

* several GPUs on one host: ``mesh = data_mesh()`` (``jax.devices()`` lists them);
* a CPU test of the same code: set
  ``XLA_FLAGS=--xla_force_host_platform_device_count=4`` *before* importing jax;
* several hosts: on every host run the same script, starting with
  ``jax.distributed.initialize()`` (coordinator address, process count and
  process id come from the cluster environment, e.g. SLURM, or as
  arguments), then ``mesh = data_mesh()`` spans ``jax.devices()``, which
  now lists the devices of *all* hosts. When ``jax.process_count() > 1``,
  :func:`sharded_em_step`, :func:`sharded_fit` and :func:`sharded_retrieve`
  take **each process's own rows** (any number per process; the global data
  are the processes' rows in process order) and place them with
  :func:`jax.make_array_from_process_local_data`. Every process gets the same,
  replicated result, as a process-local array.

Inputs and outputs (the contract that lets a loop feed each result back in):

* **rows** (``x``, ``queries``): process-local, as NumPy or as a
  :class:`jax.Array` on any of this process's devices, committed or not. A
  global array spanning several processes raises ``ValueError``.
* **replicated inputs** (``params``, ``memories``): the same value on every
  process, in any of three forms: NumPy; a process-local :class:`jax.Array`,
  committed to any device or not (e.g. the previous call's result, or the
  output of :func:`jax.experimental.multihost_utils.broadcast_one_to_all`); or
  a global array that is fully replicated. Each call places them replicated
  on ``mesh`` itself; with several processes it also checks that every
  process passed the same values (``ValueError`` on every process if not:
  compute them on one process and broadcast them).
* **results**: uncommitted process-local arrays (on the default device), so
  they may be passed to the next call, to any other function, or to NumPy.
  With one process, :func:`sharded_em_step` returns the parameters replicated
  on ``mesh`` (committed to its devices), which the next call also accepts.

Data larger than memory. :func:`sharded_fit` reads a NumPy memmap (or any
array-like that is not in memory, see :func:`lse_energy.gmm.fit`) in row
chunks, each chunk sharded over the mesh, once per EM iteration; with several
processes each streams its own file.
"""

from __future__ import annotations

import functools
import operator
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from lse_energy import _rows, _validate, gmm, hopfield

Array = jax.Array

__all__ = ["data_mesh", "shard_rows", "sharded_em_step", "sharded_fit", "sharded_retrieve"]


def data_mesh(n_devices: int | None = None, axis: str = "data") -> Mesh:
    r"""A one-axis :class:`~jax.sharding.Mesh` over the first ``n_devices`` devices (default: all).

    Args:
      n_devices: how many of ``jax.devices()`` to use; ``None`` for all.
      axis: the mesh axis name the children are split along.

    Returns:
      ``Mesh`` of shape ``(n_devices,)``.

    Examples:
      >>> from lse_energy import sharding
      >>> mesh = sharding.data_mesh(1)
      >>> mesh.axis_names, mesh.size
      (('data',), 1)
    """
    devices = jax.devices()
    n = len(devices) if n_devices is None else operator.index(n_devices)
    if not 1 <= n <= len(devices):
        raise ValueError(f"n_devices must be between 1 and {len(devices)} (jax.devices()); got {n_devices!r}")
    return Mesh(np.asarray(devices[:n]), (axis,))


def _multiprocess() -> bool:
    return jax.process_count() > 1


def _allgather(a) -> np.ndarray:
    """``(process_count, ...)``: every process's ``a`` (a small host array), on every process."""
    from jax.experimental import multihost_utils

    return np.asarray(multihost_utils.process_allgather(np.asarray(a)))


def _agree(error: Exception | None) -> None:
    """Raise on every process if any process's rows failed validation (so no process waits in a collective)."""
    flags = _allgather(np.int32(error is not None)).reshape(-1)
    if error is not None:
        raise error
    if flags.any():
        bad = [int(p) for p in np.flatnonzero(flags)]
        raise ValueError(f"the rows passed on process(es) {bad} are invalid (see the error raised there)")


def _local(tree):
    """A replicated result as uncommitted process-local arrays, valid input to any later call.

    (``addressable_data(0)`` alone would stay committed to one device, which the next jitted
    call could not mix with the global mesh: "Received incompatible devices".)
    """

    def local(a):
        if isinstance(a, jax.Array) and not a.is_fully_addressable:
            return jnp.asarray(np.asarray(a.addressable_data(0)))
        return a

    return jax.tree.map(local, tree)


def _host(name: str, a) -> np.ndarray:
    """A replicated input's value on this process, as NumPy, from any of the forms the module docstring lists."""
    if isinstance(a, jax.Array) and not a.is_fully_addressable:
        if not a.sharding.is_fully_replicated:
            raise ValueError(
                f"{name} must be replicated (the same on every process); got a global array sharded as {a.sharding}"
            )
        a = a.addressable_data(0)
    return np.asarray(a)


def _rows_host(name: str, a):
    """This process's rows: a global array spanning processes raises (the rows are each process's own)."""
    if isinstance(a, jax.Array) and not a.is_fully_addressable:
        raise ValueError(
            f"{name} must be this process's own rows (NumPy or a process-local array); got a global "
            f"array over {len(a.sharding.device_set)} devices of several processes"
        )
    return a


def _replicate(name: str, tree, mesh: Mesh):
    """Every leaf of ``tree`` replicated on ``mesh``; with several processes, checked equal on every process."""
    sharding = NamedSharding(mesh, P())
    if not _multiprocess():
        return jax.device_put(tree, sharding)
    leaves, treedef = jax.tree.flatten(tree)
    host = [_host(name, a) for a in leaves]
    flat = np.concatenate([h.astype(np.float64).ravel() for h in host])
    sizes = _allgather(np.int64(flat.size)).reshape(-1)
    # every process sees every process's values, so all reach the same verdict (none waits in a collective);
    # the tolerance forgives only last-bit differences, as between hosts that computed the same thing
    if sizes.min() != sizes.max() or not np.allclose(_allgather(flat), flat[None], rtol=1e-12, atol=0.0):
        raise ValueError(
            f"{name} must be the same on every process; it differs between processes (compute it on "
            "one process and broadcast it, e.g. jax.experimental.multihost_utils.broadcast_one_to_all)"
        )
    return jax.tree.unflatten(treedef, [jax.make_array_from_process_local_data(sharding, h, h.shape) for h in host])


def _local_device_count(mesh: Mesh) -> int:
    """Devices of ``mesh`` on this process; every process must hold the same number, at least one."""
    mine = sum(dev.process_index == jax.process_index() for dev in mesh.devices.flat)
    counts = _allgather(np.int64(mine)).reshape(-1) if _multiprocess() else np.array([mine])
    if counts.min() < 1 or counts.min() != counts.max():
        raise ValueError(f"mesh must hold the same number (>= 1) of devices on every process; holds {counts.tolist()}")
    return int(mine)


def _place(a: np.ndarray, mesh: Mesh):
    """Place this process's ``(n_local, ...)`` rows (``n_local`` equal on every process) row-sharded on ``mesh``."""
    sharding = NamedSharding(mesh, P(_axis(mesh)))
    if not _multiprocess():
        return jax.device_put(a, sharding)
    shape = (a.shape[0] * jax.process_count(),) + a.shape[1:]
    return jax.make_array_from_process_local_data(sharding, a, shape)


class _ProcessRows:
    """The layout of every process's own rows: counts, per-process padded size, global index maps."""

    def __init__(self, n_local: int, mesh: Mesh, chunk: int | None = None):
        self.counts = _allgather(np.int64(n_local)).reshape(-1) if _multiprocess() else np.array([n_local])
        self.offsets = np.concatenate([[0], np.cumsum(self.counts)])
        self.n = int(self.offsets[-1])
        n_loc = _local_device_count(mesh)
        rows = int(self.counts.max()) if chunk is None else chunk
        self.padded = -(-rows // n_loc) * n_loc  # rows per process in each placed block

    def place(self, a: np.ndarray, mesh: Mesh):
        """``(x, valid)`` for this process's block ``a`` (at most ``self.padded`` rows), zero-padded."""
        n = a.shape[0]
        valid = np.zeros((self.padded,), a.dtype)
        valid[:n] = 1
        a = np.concatenate([a, np.zeros((self.padded - n,) + a.shape[1:], a.dtype)])
        return _place(a, mesh), _place(valid, mesh)

    def unpad(self, a: np.ndarray, axis: int = 0) -> np.ndarray:
        """The real rows of a gathered global ``a`` whose blocks are ``self.padded`` rows per process."""
        parts = [
            np.take(a, np.arange(p * self.padded, p * self.padded + c), axis=axis) for p, c in enumerate(self.counts)
        ]
        return np.concatenate(parts, axis=axis)


def _axis(mesh) -> str:
    if not isinstance(mesh, Mesh):
        raise ValueError(f"mesh must be a jax.sharding.Mesh; got {type(mesh).__name__}")
    if len(mesh.axis_names) != 1:
        raise ValueError(f"mesh must have exactly one axis (the data axis); got axes {mesh.axis_names}")
    return mesh.axis_names[0]


def shard_rows(a, mesh: Mesh):
    r"""Zero-pad ``a`` to a multiple of the device count along axis 0 and place it row-sharded.

    Returns:
      ``(a_padded, valid)``: the sharded ``(N_pad, ...)`` array and a sharded
      ``(N_pad,)`` array that is 1 on the real rows and 0 on the padding.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import sharding
      >>> mesh = sharding.data_mesh(1)
      >>> a, valid = sharding.shard_rows(jnp.ones((5, 2)), mesh)
      >>> a.shape, valid.tolist()
      ((5, 2), [1.0, 1.0, 1.0, 1.0, 1.0])
    """
    axis = _axis(mesh)
    n_dev = mesh.devices.size
    a = jnp.asarray(a)
    if a.ndim < 1:
        raise ValueError(f"a must have at least one axis (the rows to shard); got shape {a.shape}")
    N = a.shape[0]
    pad = (-N) % n_dev
    valid = jnp.concatenate([jnp.ones((N,), a.dtype), jnp.zeros((pad,), a.dtype)])
    if pad:
        a = jnp.concatenate([a, jnp.zeros((pad,) + a.shape[1:], a.dtype)])
    sharding = NamedSharding(mesh, P(axis))
    return jax.device_put(a, sharding), jax.device_put(valid, sharding)


# ---------------------------------------------------------------------------
# GMM EM
# ---------------------------------------------------------------------------


@functools.cache
def _sharded_statistics(mesh: Mesh):
    """``(params, x, valid, shift) -> (sum ln p(x_i), r' f(x - shift))`` over rows sharded on ``mesh``, psum'ed.

    One function per mesh (cached), so that :func:`lse_energy.gmm.em`, which takes it
    as a static argument, compiles once per mesh and shape.
    """
    axis = _axis(mesh)

    def local(params, x, valid, shift):
        ll, R = gmm.sufficient_statistics(params, x, shift, valid)
        return jax.lax.psum(ll, axis), jax.lax.psum(R, axis)

    return jax.shard_map(local, mesh=mesh, in_specs=(P(), P(axis), P(axis), P()), out_specs=(P(), P()))


def _global_mean(mesh: Mesh):
    axis = _axis(mesh)

    def local(x, valid):
        return jax.lax.psum(jnp.sum(x * valid[:, None], axis=0), axis)

    return jax.shard_map(local, mesh=mesh, in_specs=(P(axis), P(axis)), out_specs=P())


@partial(jax.jit, static_argnames=("N", "mesh"))
def _shift(x, valid, N, mesh):
    return _global_mean(mesh)(x, valid) / N


def _sharded_em_step(params, x, valid, reg_covar, N, mesh):
    shift = _global_mean(mesh)(x, valid) / N
    _, R = _sharded_statistics(mesh)(params, x, valid, shift)
    return gmm.m_step(R, N, shift, reg_covar)


_sharded_em_step_jit = jax.jit(_sharded_em_step, static_argnames=("N", "mesh"))


def sharded_em_step(params: gmm.Params, x, mesh: Mesh, *, reg_covar: float = 0.0) -> gmm.Params:
    r"""One EM step of :func:`lse_energy.gmm.em_step` with the data points sharded over ``mesh``.

    Each device computes the E-step and the sufficient statistics of its rows
    (:func:`lse_energy.gmm.sufficient_statistics`); one ``psum`` combines them
    and every device then performs the same closed-form M-step
    (:func:`lse_energy.gmm.m_step`). The result is replicated.

    Args:
      params: :class:`lse_energy.gmm.Params`; a replicated input (see the
        module docstring): NumPy, a process-local array committed to any
        device or not (the previous call's result, :func:`sharded_fit`'s
        ``params``, a broadcast), or a fully replicated global array. With
        several processes, the same on every process (else ``ValueError``).
      x: ``(N, d)`` floating point (an integer or boolean array raises
        ``ValueError``) and finite; any ``N`` (rows are zero-padded to a
        multiple of the device count and masked out). With several processes,
        this process's own rows, process-local (see the module docstring).
      mesh: a one-axis :class:`~jax.sharding.Mesh` (e.g. :func:`data_mesh`).
      reg_covar: as in :func:`lse_energy.gmm.em_step`.

    Returns:
      The updated :class:`~lse_energy.gmm.Params`, equal to
      ``gmm.em_step(params, x, reg_covar=reg_covar)`` up to summation order,
      and valid as the next call's ``params``: with several processes as
      uncommitted process-local arrays, with one replicated on ``mesh``.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import sharding
      >>> from lse_energy import gmm
      >>> x = jax.random.normal(jax.random.key(0), (10, 2))
      >>> params = gmm.init_params(x, 2, key=jax.random.key(1))
      >>> new = sharding.sharded_em_step(params, x, sharding.data_mesh(1))
      >>> bool(jnp.allclose(new.means, gmm.em_step(params, x).means, atol=1e-5))
      True
    """
    if not _multiprocess():
        params = gmm.check_params(params)
        reg = _validate.nonnegative("reg_covar", reg_covar)
        x = gmm.check_x(x, params.means.shape[1])
        N = x.shape[0]
        xs, valid = shard_rows(x, mesh)
        params = _replicate("params", params, mesh)
        return _sharded_em_step_jit(params, xs, valid, jnp.asarray(reg, x.dtype), N, mesh)
    error = None
    try:  # invalid arguments on any process raise on every process (none waits in a collective)
        params = gmm.check_params(jax.tree.map(partial(_host, "params"), params))
        reg = _validate.nonnegative("reg_covar", reg_covar)
        x = np.asarray(gmm.check_x(_rows_host("x", x), params.means.shape[1]))
    except ValueError as e:
        error = e
    _agree(error)
    params = _replicate("params", params, mesh)
    layout = _ProcessRows(x.shape[0], mesh)
    xs, valid = layout.place(x, mesh)
    return _local(_sharded_em_step_jit(params, xs, valid, jnp.asarray(reg, x.dtype), layout.n, mesh))


def sharded_fit(
    x,
    n_components: int,
    mesh: Mesh,
    *,
    key,
    max_iter: int = 100,
    tol: float = 1e-6,
    reg_covar: float = 1e-6,
    chunk_rows: int | None = None,
    progress: bool = False,
):
    r""":func:`lse_energy.gmm.fit` with the data points sharded over ``mesh``.

    Same initialisation (:func:`lse_energy.gmm.init_params` with ``key``), the
    same EM loop (:func:`lse_energy.gmm.em`, here with a sharded pass over the
    rows: one ``psum`` per iteration), hence the same stopping rule and energy
    trace.

    Args:
      x: ``(N, d)`` floating point (an integer or boolean array raises
        ``ValueError``) and finite. A NumPy memmap (or other array-like not in
        memory) is streamed in chunks of ``chunk_rows`` rows, as in
        :func:`lse_energy.gmm.fit`. With several processes, this process's
        own rows (in memory, process-local, or streamed).
      n_components: ``K >= 1``.
      mesh: a one-axis :class:`~jax.sharding.Mesh`.
      key, max_iter, tol, reg_covar, chunk_rows, progress: as in :func:`lse_energy.gmm.fit`.

    Returns:
      :class:`~lse_energy.core.FitResult` as :func:`lse_energy.gmm.fit`; with
      several processes its arrays are uncommitted and process-local, so
      ``params`` may start :func:`sharded_em_step`.

    Raises:
      ValueError: as :func:`lse_energy.gmm.fit`, also when a covariance stops
        being positive definite (naming the component and the iteration).

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import sharding
      >>> x = jax.random.normal(jax.random.key(0), (10, 2))
      >>> res = sharding.sharded_fit(
      ...     x, 2, sharding.data_mesh(1), key=jax.random.key(1), max_iter=3
      ... )
      >>> res.params.means.shape, res.n_iter <= 3
      ((2, 2), True)
    """
    if _multiprocess() or chunk_rows is not None or _rows.is_streamed(x):
        stream = _sharded_stream(x, mesh, chunk_rows)
        return _local(
            gmm.streamed_fit(
                stream, n_components, key=key, max_iter=max_iter, tol=tol, reg_covar=reg_covar, progress=progress
            )
        )
    params = gmm.init_params(x, n_components, key=key, reg_covar=reg_covar)  # checks x (the only check)
    x = jnp.asarray(x)
    N = x.shape[0]
    xs, valid = shard_rows(x, mesh)
    shift = _shift(xs, valid, N, mesh)
    return gmm.em(
        params,
        _sharded_statistics(mesh),
        (xs, valid, shift),
        n=N,
        shift=shift,
        max_iter=max_iter,
        tol=tol,
        reg_covar=reg_covar,
        progress=progress,
    )


def _sharded_stream(x, mesh: Mesh, chunk_rows) -> _rows.Stream:
    """A ``lse_energy._rows.Stream`` whose chunks are sharded over ``mesh`` (each process: its own rows)."""
    error, rows = None, None
    try:
        if not _rows.is_streamed(x):
            x = np.asarray(gmm.check_x(_rows_host("x", x)))  # in memory: validated whole
        rows = _rows.RowChunks("x", x, chunk_rows)
    except ValueError as e:
        error = e
    if _multiprocess():
        _agree(error)
        info = _allgather(np.array([rows.n, rows.d, rows.chunk], np.int64))
        if len(set(info[:, 1].tolist())) > 1:
            raise ValueError(f"every process's rows must have the same d; got d = {info[:, 1].tolist()}")
        # in memory, one chunk per process; streamed, the largest chunk_rows any process asked for
        rows.chunk = int(info[:, 0].max()) if chunk_rows is None and not _rows.is_streamed(x) else int(info[:, 2].max())
        n_chunks = int(max(-(-int(n) // rows.chunk) for n in info[:, 0]))
    elif error is not None:
        raise error
    else:
        rows.chunk = min(rows.chunk, rows.n)
        n_chunks = rows.n_chunks
    layout = _ProcessRows(rows.n, mesh, chunk=rows.chunk)
    statistics = jax.jit(_sharded_statistics(mesh))
    empty = np.zeros((0, rows.d), rows.dtype)

    def chunks():
        for i in range(n_chunks):
            # a process that has run out of rows still takes part, with an all-padding block
            yield layout.place(rows.read(i) if i < rows.n_chunks else empty, mesh)

    def rows_at(idx):
        if not _multiprocess():
            return rows.rows(idx)
        idx = np.asarray(idx)
        owner = np.searchsorted(layout.offsets, idx, side="right") - 1
        mine = owner == jax.process_index()
        out = np.zeros((idx.size, rows.d), rows.dtype)
        if mine.any():
            out[mine] = rows.rows(idx[mine] - layout.offsets[jax.process_index()])
        return _allgather(out).sum(axis=0)  # each row is non-zero on its owner only: an exact sum

    return _rows.Stream(chunks, layout.n, rows_at, statistics)


# ---------------------------------------------------------------------------
# Hopfield retrieval
# ---------------------------------------------------------------------------


def sharded_retrieve(memories, queries, mesh: Mesh, *, beta=1.0, n_steps=10, return_energy=False):
    r""":func:`lse_energy.hopfield.retrieve` with the queries sharded over ``mesh``.

    The memories are replicated; each device iterates the update on its own
    queries. No communication is needed, so the result equals the
    single-device one. With several processes, ``queries`` are this
    process's own rows, process-local, and ``memories`` and ``beta`` are
    replicated inputs, the same on every process (else ``ValueError``) in
    any form the module docstring lists (NumPy, a process-local array
    committed to any device or not, a fully replicated global array); every
    process gets the results of all processes' queries, in process order.

    Args:
      beta: the inverse temperature :math:`\beta > 0` that multiplies the similarities.

    Returns:
      As :func:`lse_energy.hopfield.retrieve`: ``(N, d)`` final states and,
      with ``return_energy``, the ``(n_steps + 1, N)`` per-query energies.
      With several processes these are uncommitted process-local arrays: a
      loop passes its own rows of the states (``states[offset:offset + n]``)
      back as the next call's ``queries``, or the states as ``memories``.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from lse_energy import sharding
      >>> memories = jnp.eye(3)
      >>> q = jnp.array([[0.6, 0.4, 0.0]])
      >>> x = sharding.sharded_retrieve(memories, q, sharding.data_mesh(1), beta=20.0)
      >>> bool(jnp.allclose(x, memories[0], atol=1e-3))
      True
    """
    error = None
    try:
        if _multiprocess():
            memories, queries = _host("memories", memories), _rows_host("queries", queries)
        memories = _validate.points("memories", memories)
        queries = _validate.points("queries", queries, memories.shape[1], ref="memories")
        _validate.beta(beta)
        n_steps = _validate.count("n_steps", n_steps, 0)
    except ValueError as e:
        error = e
    if _multiprocess():
        _agree(error)
    elif error is not None:
        raise error
    axis = _axis(mesh)
    memories, beta = _replicate("memories and beta", (memories, jnp.asarray(beta, dtype=memories.dtype)), mesh)
    N = queries.shape[0]
    layout = None
    if _multiprocess():
        layout = _ProcessRows(N, mesh)
        qs, _ = layout.place(np.asarray(queries), mesh)
    else:
        qs, _ = shard_rows(queries, mesh)
    return_energy = bool(return_energy)
    out_specs = (P(axis), P(None, axis)) if return_energy else P(axis)
    run = jax.shard_map(
        lambda m, q, b: hopfield.retrieve(m, q, beta=b, n_steps=n_steps, return_energy=return_energy),
        mesh=mesh,
        in_specs=(P(), P(axis), P()),
        out_specs=out_specs,
    )
    out = jax.jit(run)(memories, qs, beta)
    if layout is not None:  # every process gets every process's queries, in process order
        if return_energy:
            return (
                jnp.asarray(layout.unpad(_gather_global(out[0]))),
                jnp.asarray(layout.unpad(_gather_global(out[1]), axis=1)),
            )
        return jnp.asarray(layout.unpad(_gather_global(out)))
    if return_energy:
        return out[0][:N], out[1][:, :N]
    return out[:N]


def _gather_global(a) -> np.ndarray:
    """The whole value of a multi-process array, on every process."""
    from jax.experimental import multihost_utils

    return np.asarray(multihost_utils.process_allgather(a, tiled=True))
