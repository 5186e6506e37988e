"""Tests for lse_energy.sharding: data-parallel EM and retrieval on 4 simulated CPU devices.

``--xla_force_host_platform_device_count`` must be set before jax is imported,
so the multi-device checks run in a fresh interpreter (``subprocess``); that
script asserts agreement with the single-device functions and prints one
``OK`` line per check, which this test then requires.
"""

import os
import subprocess
import sys
import textwrap

import jax
import numpy as np
import pytest

from lse_energy import gmm, hopfield, sharding

SCRIPT = textwrap.dedent(
    r"""
    import jax, numpy as np, jax.numpy as jnp
    jax.config.update("jax_enable_x64", True)
    from lse_energy import gmm, hopfield, sharding

    assert len(jax.devices()) == 4, jax.devices()
    mesh = sharding.data_mesh()
    assert mesh.devices.size == 4

    def close(a, b, tol=1e-10):
        a, b = np.asarray(a), np.asarray(b)
        err = np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-300)
        assert err <= tol, err
        return err

    for seed in (0, 1, 2):
        rng = np.random.default_rng(seed)
        # N = 1003 is not a multiple of 4 devices: exercises the padding rows.
        N, d, K = 1003, 3, 4
        centres = 4.0 * rng.normal(size=(K, d))
        x = jnp.asarray(centres[rng.integers(0, K, N)] + rng.normal(size=(N, d)))
        p0 = gmm.init_params(x, K, key=jax.random.key(seed))

        # one step, and five chained steps, against the single-device em_step
        single, shard = p0, p0
        for _ in range(5):
            single = gmm.em_step(single, x, reg_covar=1e-6)
            shard = sharding.sharded_em_step(shard, x, mesh, reg_covar=1e-6)
            for a, b in zip(shard, single):
                close(a, b)
        # the sharded result really lives on all 4 devices' inputs: x was split
        xs, valid = sharding.shard_rows(x, mesh)
        assert len(xs.sharding.device_set) == 4 and xs.shape[0] == 1004 and float(valid.sum()) == N
        print("OK em_step", seed)

        pf, tf, nf, cf, _ = gmm.fit(x, K, key=jax.random.key(seed), max_iter=30, tol=1e-8)
        ps, ts, ns, cs, _ = sharding.sharded_fit(x, K, mesh, key=jax.random.key(seed), max_iter=30, tol=1e-8)
        assert (nf, cf) == (ns, cs), (nf, cf, ns, cs)
        assert tf.shape == ts.shape, (tf.shape, ts.shape)
        close(ts, tf)
        for a, b in zip(ps, pf):
            close(a, b)
        assert np.all(np.diff(np.asarray(ts)) <= 1e-9 * abs(float(ts[0])))
        print("OK fit", seed, ts.shape[0])

        m = jnp.asarray(rng.normal(size=(7, 5)))
        q = jnp.asarray(rng.normal(size=(10, 5)))  # 10 queries on 4 devices: padded
        out, tr = hopfield.retrieve(m, q, beta=2.0, n_steps=4, return_energy=True)
        out_s, tr_s = sharding.sharded_retrieve(m, q, mesh, beta=2.0, n_steps=4, return_energy=True)
        assert out_s.shape == out.shape and tr_s.shape == tr.shape
        close(out_s, out)
        close(tr_s, tr)
        close(sharding.sharded_retrieve(m, q, mesh, beta=2.0, n_steps=4), out)
        print("OK retrieve", seed)
    print("ALL OK")
    """
)


def test_sharded_equals_single_device_on_four_devices():
    env = {
        **os.environ,
        # Keep any flags the caller set (nox sets fast-compile flags) and add four host devices.
        "XLA_FLAGS": (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=4").strip(),
        "JAX_PLATFORMS": "cpu",
    }
    proc = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.split()
    for what in ("em_step", "fit", "retrieve"):
        assert proc.stdout.count(f"OK {what}") == 3, proc.stdout
    assert lines[-2:] == ["ALL", "OK"], proc.stdout


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_one_device_mesh_equals_single_device(seed):
    """In-process check on the default (single-device) mesh."""
    rng = np.random.default_rng(10 + seed)
    x = rng.normal(size=(257, 2)) + 3.0 * rng.integers(0, 2, size=(257, 1))
    p0 = gmm.init_params(x, 3, key=jax.random.key(seed))
    mesh = sharding.data_mesh(1)
    for a, b in zip(sharding.sharded_em_step(p0, x, mesh), gmm.em_step(p0, x)):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)
    m, q = rng.normal(size=(4, 2)), rng.normal(size=(6, 2))
    np.testing.assert_allclose(
        sharding.sharded_retrieve(m, q, mesh, beta=1.5, n_steps=3),
        hopfield.retrieve(m, q, beta=1.5, n_steps=3),
        rtol=1e-12,
        atol=1e-14,
    )


def test_invalid_arguments():
    mesh = sharding.data_mesh(1)
    x = np.random.default_rng(0).normal(size=(20, 2))
    p0 = gmm.init_params(x, 2, key=jax.random.key(0))
    with pytest.raises(ValueError, match="mesh"):
        sharding.sharded_em_step(p0, x, "cpu")
    with pytest.raises(ValueError, match="n_devices"):
        sharding.data_mesh(len(jax.devices()) + 1)
    with pytest.raises(ValueError, match="max_iter"):
        sharding.sharded_fit(x, 2, mesh, key=jax.random.key(0), max_iter=-1)
    with pytest.raises(ValueError, match="queries has dimension d = 1 but memories have d = 2"):
        sharding.sharded_retrieve(x[:3], x[:, :1], mesh)
