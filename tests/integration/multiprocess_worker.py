"""One of the two processes of tests/integration/test_multiprocess.py.

Run as `python multiprocess_worker.py PROCESS_ID PORT OUT_DIR`.

Both processes build the same global data from one seed and each passes only its own rows
(process 0 the first N0, process 1 the rest: unequal counts, so the padding is exercised) to
the sharded functions. Each saves what it got to OUT_DIR/process{ID}.npz; the test compares
both with the single-process functions on all rows. `hand_iterations` feeds each result back
in as the next call's input, as a user's own loop would.
"""

import os
import sys

# The test imports this module for data() and params(): nothing at import time may touch the
# environment or JAX's configuration of the importing process (its later notebook kernels
# inherit os.environ). The process's own settings are made in __main__, before jax is imported.

N, N0, D, K = 1001, 387, 3, 3
MEMORIES, QUERIES, Q0 = 6, 9, 4
ITERS = 3  # calls iterated by hand, each result the next call's input


def data():
    import numpy as np

    rng = np.random.default_rng(20261125)
    centres = rng.normal(size=(K, D)) * 4
    x = centres[rng.integers(K, size=N)] + rng.normal(size=(N, D))
    memories = rng.normal(size=(MEMORIES, D))
    queries = memories[rng.integers(MEMORIES, size=QUERIES)] + 0.3 * rng.normal(size=(QUERIES, D))
    return x, memories, queries


def params(x):
    """Deterministic starting parameters (the same on every process)."""
    import jax

    from lse_energy import gmm

    return gmm.init_params(x, K, key=jax.random.key(3))


def main(pid: int, port: int, out: str) -> None:
    import jax
    import numpy as np

    jax.distributed.initialize(f"127.0.0.1:{port}", num_processes=2, process_id=pid, initialization_timeout=60)
    from lse_energy import sharding

    x, memories, queries = data()
    mine = slice(0, N0) if pid == 0 else slice(N0, N)
    qmine = slice(0, Q0) if pid == 0 else slice(Q0, QUERIES)
    mesh = sharding.data_mesh()
    res = {"process_count": jax.process_count(), "devices": len(mesh.devices.flat)}

    step = sharding.sharded_em_step(params(x), x[mine], mesh)
    res.update({f"step_{f}": np.asarray(a) for f, a in zip(step._fields, step)})

    fit = sharding.sharded_fit(x[mine], K, mesh, key=jax.random.key(7), max_iter=25, tol=0.0)
    res.update({f"fit_{f}": np.asarray(a) for f, a in zip(fit.params._fields, fit.params)})
    res["fit_energies"] = np.asarray(fit.energies)

    path = os.path.join(out, f"rows{pid}.dat")
    mm = np.memmap(path, dtype=np.float64, mode="w+", shape=x[mine].shape)
    mm[:] = x[mine]
    mm.flush()
    del mm
    mm = np.memmap(path, dtype=np.float64, mode="r", shape=x[mine].shape)
    streamed = sharding.sharded_fit(mm, K, mesh, key=jax.random.key(7), max_iter=25, tol=0.0, chunk_rows=100)
    res.update({f"stream_{f}": np.asarray(a) for f, a in zip(streamed.params._fields, streamed.params)})

    states, energies = sharding.sharded_retrieve(
        memories, queries[qmine], mesh, beta=2.0, n_steps=4, return_energy=True
    )
    res["retrieve_states"], res["retrieve_energies"] = np.asarray(states), np.asarray(energies)

    hand_iterations(res, pid, x, memories, queries, mine, qmine, mesh, fit.params)

    # invalid rows on one process: both processes raise (neither waits forever in a collective)
    bad = x[mine].copy()
    if pid == 1:
        bad[5, 0] = np.nan
    try:
        sharding.sharded_em_step(params(x), bad, mesh)
        res["invalid_error"] = ""
    except ValueError as e:
        res["invalid_error"] = str(e)

    np.savez(os.path.join(out, f"process{pid}.npz"), **res)
    jax.distributed.shutdown()


def broadcast_params(x0, pid):
    """``gmm.init_params`` computed on process 0 from its own rows only, broadcast to every process."""
    import jax
    import numpy as np
    from jax.experimental import multihost_utils

    from lse_energy import gmm

    if pid == 0:
        p = gmm.init_params(x0, K, key=jax.random.key(5))
    else:  # a placeholder of the same structure; its values are never used
        p = gmm.Params(np.full(K, 1.0 / K), np.zeros((K, D)), np.tile(np.eye(D), (K, 1, 1)))
    return multihost_utils.broadcast_one_to_all(p)


def hand_iterations(res, pid, x, memories, queries, mine, qmine, mesh, fit_params):
    """Feed every sharding function's output back in as its next input, by hand, ITERS times."""
    import jax
    import numpy as np
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    from lse_energy import sharding

    def save(prefix, p):
        res.update({f"{prefix}_{f}": np.asarray(a) for f, a in zip(p._fields, p)})

    p = params(x)
    for i in range(ITERS):
        p = sharding.sharded_em_step(p, x[mine], mesh)
        save(f"loop{i}", p)

    p = broadcast_params(x[:N0], pid)
    save("bcast_init", p)
    for _ in range(ITERS):
        p = sharding.sharded_em_step(p, x[mine], mesh, reg_covar=1e-6)
    save("bcast", p)

    # a fit's params, refined by a step
    save("fit_then_step", sharding.sharded_em_step(fit_params, x[mine], mesh))

    # retrieval: each process passes on its own queries of the last result, while the memories
    # come as NumPy, committed to this process's second device, and as a replicated global array
    local = jax.device_put(memories, jax.local_devices()[-1])
    replicated = jax.make_array_from_process_local_data(NamedSharding(mesh, P()), memories, memories.shape)
    states = queries[qmine]
    for i, m in enumerate((memories, local, replicated)):
        out = sharding.sharded_retrieve(m, states, mesh, beta=2.0, n_steps=2)
        res[f"retr_loop{i}"] = np.asarray(out)
        states = out[qmine]
    out, energies = sharding.sharded_retrieve(local, states, mesh, beta=2.0, n_steps=2, return_energy=True)
    res["retr_loop_last"], res["retr_loop_energies"] = np.asarray(out), np.asarray(energies)

    # replicated inputs that differ between processes: both processes raise
    mine_only = params(x)._replace(means=params(x).means + pid)
    try:
        sharding.sharded_em_step(mine_only, x[mine], mesh)
        res["differ_error"] = ""
    except ValueError as e:
        res["differ_error"] = str(e)


if __name__ == "__main__":
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=2").strip()
    os.environ["JAX_PLATFORMS"] = "cpu"
    import jax

    jax.config.update("jax_enable_x64", True)
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    main(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3])
