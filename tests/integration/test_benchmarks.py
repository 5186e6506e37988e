"""The benchmarks time each peer in its fastest configuration (checked without timing anything).

PyTorch's ``scaled_dot_product_attention`` takes its fused flash kernel on the CPU only
for 4-D ``(batch, heads, L, E)`` inputs; 3-D inputs take the unfused math path, several
times slower. The attention benchmark must time the fused layout (and compare against
the fastest configuration it timed).
"""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks import bench_attention as B  # importable: tests/ is a package, so pytest puts the root on sys.path


def test_attention_benchmark_times_the_4d_layout():
    a = np.zeros((7, 5), np.float32)
    assert 4 in B.TORCH_LAYOUTS.values()
    shapes = {label: B.sdpa_layout(a, ndim).shape for label, ndim in B.TORCH_LAYOUTS.items()}
    assert shapes["4-D (B, H, L, E)"] == (1, 1, 7, 5)
    assert shapes["3-D (B, L, E)"] == (1, 7, 5)
    with pytest.raises(ValueError, match="ndim"):
        B.sdpa_layout(a, 2)


def test_fastest_picks_the_smallest_time_and_names_it():
    t = {"torch sdpa x": 3.0, "torch sdpa y": 1.0, "torch sdpa z": 2.0}
    assert B.fastest(t, "torch sdpa ", ["x", "y", "z"]) == (1.0, "y")


def _dispatched(torch, fn) -> set[str]:
    from torch.profiler import profile

    with profile() as prof:
        fn()
    return {e.name for e in prof.events()}


def test_torch_configs_dispatch_to_the_fused_kernel_only_in_4d():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    qn, kn, vn, gn = (rng.normal(size=(64, 16)).astype(np.float32) for _ in range(4))
    configs = B.torch_configs(torch, qn, kn, vn, gn)
    assert len(configs) == len(B.TORCH_LAYOUTS) * len(B.TORCH_THREADS)
    for label, (fwd, _, _) in configs.items():
        fused = B.FUSED_KERNEL in _dispatched(torch, fwd)
        assert fused == label.startswith("4-D"), label


def test_expanding_benchmark_torch_forms_dispatch_as_labelled():
    """bench_structural's SDPA readout: "fused kernel" configurations take it, "math path" ones do not."""
    torch = pytest.importorskip("torch")
    import jax

    from benchmarks import bench_structural
    from lse_energy import expanding
    from lse_energy.experiments import structural_tasks as toy

    kq, kk, kv, kx = jax.random.split(jax.random.key(0), 4)
    normal = jax.random.normal
    params = expanding.Params(normal(kq, (3, 4)), normal(kk, (3, 4)), normal(kv, (1, 4)))
    x = normal(kx, (2, 9, 4))
    expected = np.asarray(toy.predict_expanding_task("self", params, x)[0])
    calls = bench_structural._torch_self(params, x, expected)
    assert len(calls) == 4
    for label, call in calls.items():
        fused = B.FUSED_KERNEL in _dispatched(torch, call)
        assert fused == ("fused kernel" in label), label


# --- RBM: the profile that the share-of-the-ceiling row cites ---------------------------------------------------


def test_rbm_profile_categories_cover_a_compiled_epoch():
    import jax
    import optax

    from benchmarks import bench_rbm
    from lse_energy import rbm

    sgd = optax.sgd(0.05)
    x = (jax.random.uniform(jax.random.key(0), (64, 6)) < 0.5).astype(float)
    p0 = rbm.init_params(6, 4, key=jax.random.key(1))
    for bits, impl in ((0, "threefry2x32"), (16, "threefry2x32"), (0, "rbg")):
        key = jax.random.key(2, impl=impl)
        hlo = rbm._lower(p0, sgd.init(p0), x, key, sgd, 1, 8, 1, False, bits).compile().as_text()
        found = set(bench_rbm.instruction_categories(hlo).values())
        assert set(bench_rbm.CATEGORIES[:2]) | {bench_rbm.CATEGORIES[4]} <= found, (bits, impl, found)
        assert found <= set(bench_rbm.CATEGORIES)
    assert bench_rbm._category({"fusion", "exponential", "compare", "convert"}, "f") == bench_rbm.CATEGORIES[1]
    assert bench_rbm._category({"fusion", "exponential", "divide"}, "f") == bench_rbm.CATEGORIES[2]
    assert bench_rbm._category({"dot"}, "dot.1") == bench_rbm.CATEGORIES[0]


def test_structural_profile_finds_the_loop_inside_the_call():
    # bench_structural.profile_call explains the public call's time from a jax.profiler trace of the call
    # itself; on a jitted while loop it must find the loop inside the program inside the call.
    import jax
    import jax.numpy as jnp

    from benchmarks import bench_structural as S

    f = jax.jit(lambda x: jax.lax.while_loop(lambda c: c[0] < 50, lambda c: (c[0] + 1, jnp.sin(c[1])), (0, x))[1])
    x = jnp.ones(1000)
    f(x).block_until_ready()
    p = S.profile_call(lambda: f(x).block_until_ready(), reps=3)
    if p is None:
        pytest.skip("jax.profiler wrote no trace here")
    assert 0 < p["loop"] <= p["device"] <= p["call"]
    assert 0 <= p["loop_kernels"] <= p["loop"] and p["host"] >= 0
    # the host time is split, without overlap or gap, into the traced spans it falls in
    parts = [p[k] for k in ("handoff", "dispatch", "readback", "python")]
    assert min(parts) >= 0 and sum(parts) == pytest.approx(p["host"], rel=1e-9, abs=1e-9)
    assert p["dispatch"] + p["handoff"] > 0  # the jitted call's own spans were found
    assert p["readback"] == 0  # nothing read a result with np.asarray

    g = jax.jit(lambda x: (f(x)[0] > 0).astype(jnp.int32))
    g(x).block_until_ready()
    q = S.profile_call(lambda: int(g(x)), reps=3)  # a host read of a 0-d result, as the cap's status is read
    assert q is not None and q["readback"] > 0
