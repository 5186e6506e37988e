"""Tests of the log-sum-exp energy and the general children/parents graph."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lse_energy import core
from lse_energy.testing import assert_gradient
from tests.support import SEEDS


def np_energy(sim, mask=None):
    """Reference: -sum_c log sum_p exp(sim) in float64 NumPy, dropping empty rows."""
    sim = np.asarray(sim, np.float64)
    if mask is None:
        mask = np.ones(sim.shape, bool)
    m = np.max(np.where(mask, sim, -np.inf), axis=-1, keepdims=True)
    has = np.isfinite(m)
    m = np.where(has, m, 0.0)
    s = np.sum(np.where(mask, np.exp(sim - m), 0.0), axis=-1)
    lse = np.where(has[..., 0], np.log(np.where(has[..., 0], s, 1.0)) + m[..., 0], 0.0)
    return -lse.sum()


# --- energy and weights -----------------------------------------------------


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("shape", [(1, 1), (4, 3), (2, 5, 7), (2, 3, 4, 6)])
def test_energy_matches_numpy(seed, shape):
    sim = np.random.default_rng(seed).normal(scale=3.0, size=shape)
    np.testing.assert_allclose(core.energy(sim), np_energy(sim), rtol=1e-13)


@pytest.mark.parametrize("seed", SEEDS)
def test_masked_energy_matches_numpy(seed):
    rng = np.random.default_rng(seed)
    sim = rng.normal(size=(3, 6, 5))
    mask = rng.random((3, 6, 5)) < 0.5
    mask[..., 0] = True  # every child keeps a parent
    np.testing.assert_allclose(core.energy(sim, mask), np_energy(sim, mask), rtol=1e-13)


def test_single_parent_is_minus_sim():
    sim = jnp.array([[2.0], [-3.5]])
    assert float(core.energy(sim)) == pytest.approx(1.5, rel=1e-15)


def test_uniform_sims_give_log_p():
    # Equal sims: every child contributes -(s + ln P).
    sim = jnp.full((5, 8), 0.25)
    np.testing.assert_allclose(core.energy(sim), -5 * (0.25 + np.log(8)), rtol=1e-14)


@pytest.mark.parametrize("scale", [1e2, 1e3, 1e4])
def test_float32_stable_at_large_sims(scale):
    rng = np.random.default_rng(0)
    sim64 = rng.uniform(-scale, scale, size=(6, 9))
    sim32 = jnp.asarray(sim64, jnp.float32)
    e32 = core.energy(sim32)
    g32 = jax.grad(core.energy)(sim32)
    w32 = core.weights(sim32)
    assert e32.dtype == jnp.float32
    assert np.isfinite(float(e32))
    assert np.all(np.isfinite(np.asarray(g32))) and np.all(np.isfinite(np.asarray(w32)))
    # float32 holds |sim| ~ scale to a relative 6e-8; the sum over 6 children
    # and the rounding of the input to float32 give at most a few ulps of scale.
    ref = np_energy(np.asarray(sim32, np.float64))
    assert abs(float(e32) - ref) <= 8 * np.finfo(np.float32).eps * 6 * scale
    np.testing.assert_allclose(np.asarray(w32).sum(-1), 1.0, rtol=1e-6)


def test_float32_ties_at_large_sims():
    # Two parents tied at +1e4 and one far below: weights exactly 1/2, 1/2, 0.
    sim = jnp.array([[1e4, 1e4, -1e4]], jnp.float32)
    w = core.weights(sim)
    np.testing.assert_array_equal(np.asarray(w), [[0.5, 0.5, 0.0]])
    np.testing.assert_allclose(core.energy(sim), -(1e4 + np.log(2.0)), rtol=1e-7)


@pytest.mark.parametrize("seed", SEEDS)
def test_weights_are_minus_energy_gradient(seed):
    rng = np.random.default_rng(seed)
    sim = jnp.asarray(rng.normal(size=(2, 4, 5)))
    mask = jnp.asarray(rng.random((2, 4, 5)) < 0.6).at[..., 2].set(True)
    w = core.weights(sim, mask)
    g = jax.grad(core.energy)(sim, mask)
    np.testing.assert_allclose(-g, w, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(w.sum(-1), 1.0, rtol=1e-13)
    assert np.all(np.asarray(w)[~np.asarray(mask)] == 0.0)
    ref = jax.nn.softmax(jnp.where(mask, sim, -jnp.inf), axis=-1)
    np.testing.assert_allclose(w, ref, rtol=1e-13, atol=1e-16)


def test_logsumexp_per_child():
    sim = np.random.default_rng(3).normal(size=(4, 3, 5))
    np.testing.assert_allclose(core.logsumexp(sim), np.log(np.exp(sim).sum(-1)), rtol=1e-13)


def test_energy_under_jit_and_vmap():
    sim = np.random.default_rng(4).normal(size=(3, 4, 5))
    per_batch = jax.vmap(core.energy)(jnp.asarray(sim))
    np.testing.assert_allclose(per_batch.sum(), core.energy(sim), rtol=1e-13)
    np.testing.assert_allclose(jax.jit(core.energy)(sim), core.energy(sim), rtol=1e-15)


# --- empty rows and input validation ---------------------------------------


def test_child_without_parent_raises():
    sim = jnp.zeros((3, 4))
    mask = np.ones((3, 4), bool)
    mask[1] = False
    with pytest.raises(ValueError, match="child .*1.* no allowed parent"):
        core.energy(sim, mask)
    with pytest.raises(ValueError, match="no allowed parent"):
        core.weights(sim, mask)


def test_child_without_parent_dropped_on_request():
    rng = np.random.default_rng(5)
    sim = jnp.asarray(rng.normal(size=(3, 4)))
    mask = np.ones((3, 4), bool)
    mask[1] = False
    e = core.energy(sim, mask, allow_empty=True)
    np.testing.assert_allclose(e, core.energy(sim[jnp.array([0, 2])]), rtol=1e-14)
    g = jax.grad(core.energy)(sim, mask, allow_empty=True)
    assert np.all(np.isfinite(np.asarray(g)))
    np.testing.assert_array_equal(np.asarray(g)[1], 0.0)
    np.testing.assert_array_equal(np.asarray(core.weights(sim, mask, allow_empty=True))[1], 0.0)


@pytest.mark.parametrize(
    "sim, mask, message",
    [
        (np.zeros(4), None, "shape"),
        (np.zeros((2, 3), np.int32), None, "floating"),
        (np.zeros((2, 0)), None, "at least one parent"),
        (np.array([[0.0, np.nan]]), None, "finite"),
        (np.array([[0.0, np.inf]]), None, "finite"),
        (np.zeros((2, 3)), np.ones((2, 3), np.int32), "boolean"),
        (np.zeros((2, 3)), np.ones((2, 4), bool), "broadcast"),
    ],
)
def test_validation(sim, mask, message):
    with pytest.raises(ValueError, match=message):
        core.energy(sim, mask)


# --- the multi-term graph (eqs. 2-4) ----------------------------------------


def random_graph(seed, A=9, d=3):
    """Three terms with overlapping children/parents, nonlinear sims and a mask."""
    rng = np.random.default_rng(seed)
    W = jnp.asarray(rng.normal(size=(d, d)))
    U = jnp.asarray(rng.normal(size=(d, d)))
    c_self = rng.choice(A, size=5, replace=False)
    terms = [
        # self-attention-like: the same nodes are children and parents
        core.EnergyTerm(c_self, c_self, lambda a, b: a @ W @ b, name="self"),
        # Gaussian-like, children and parents partly overlapping
        core.EnergyTerm(np.arange(0, 6), np.arange(3, A), lambda a, b: -0.5 * jnp.sum((a - b) ** 2), name="gauss"),
        # nonlinear, masked, one node appearing twice among the children
        core.EnergyTerm(
            np.array([1, 4, 4, 8]),
            np.array([0, 2, 5]),
            lambda a, b: jnp.tanh(a @ U @ b) + jnp.sin(a).sum() * b[0],
            mask=np.array([[1, 0, 1], [0, 1, 0], [1, 1, 1], [0, 0, 1]], bool),
            name="masked",
        ),
    ]
    nodes = jnp.asarray(rng.normal(size=(A, d)))
    return terms, nodes


@pytest.mark.parametrize("seed", [*SEEDS, 3, 4])
def test_graph_gradient_equals_autodiff(seed):
    terms, nodes = random_graph(seed)
    assert_gradient(
        lambda v: core.graph_energy(terms, v),
        lambda v: core.grad_graph_energy_nodes(terms, v),
        nodes,
        rtol=1e-10,
        fd_rtol=1e-6,
    )


@pytest.mark.parametrize("seed", SEEDS)
def test_graph_energy_is_sum_of_terms(seed):
    terms, nodes = random_graph(seed)
    total = sum(float(core.energy(core.sim_matrix(t, nodes), t.mask)) for t in terms)
    np.testing.assert_allclose(core.graph_energy(terms, nodes), total, rtol=1e-14)


@pytest.mark.parametrize("seed", SEEDS)
def test_gradient_terms_match_eq4_written_out(seed):
    """Child and parent parts of eq. (4), written out node by node with jax.grad of sim."""
    terms, nodes = random_graph(seed)
    parts = core.grad_graph_terms(terms, nodes)
    child = np.zeros(nodes.shape)
    parent = np.zeros(nodes.shape)
    for t in terms:
        S = core.sim_matrix(t, nodes)
        w = np.asarray(core.weights(S, t.mask))
        d_child = jax.grad(t.sim, argnums=0)
        d_parent = jax.grad(t.sim, argnums=1)
        for ci, c in enumerate(t.children):
            for pi, p in enumerate(t.parents):
                if w[ci, pi] == 0.0:
                    continue
                child[c] += w[ci, pi] * np.asarray(d_child(nodes[c], nodes[p]))
                parent[p] += w[ci, pi] * np.asarray(d_parent(nodes[c], nodes[p]))
    np.testing.assert_allclose(parts.child, child, rtol=1e-11, atol=1e-13)
    np.testing.assert_allclose(parts.parent, parent, rtol=1e-11, atol=1e-13)


def test_pure_children_have_no_parent_term():
    terms, nodes = random_graph(0)
    parts = core.grad_graph_terms(terms[1:2], nodes)  # gauss: children 0..5, parents 3..8
    np.testing.assert_array_equal(np.asarray(parts.parent)[:3], 0.0)
    np.testing.assert_array_equal(np.asarray(parts.child)[6:], 0.0)


def test_graph_validation():
    sim = lambda a, b: a @ b  # noqa: E731
    with pytest.raises(ValueError, match="children"):
        core.EnergyTerm([], [0], sim)
    with pytest.raises(ValueError, match="integer"):
        core.EnergyTerm([0.5], [0], sim)
    with pytest.raises(ValueError, match="mask"):
        core.EnergyTerm([0, 1], [0], sim, mask=np.ones((1, 1), bool))
    with pytest.raises(ValueError, match="no allowed parent"):
        core.EnergyTerm([0, 1], [0, 1], sim, mask=np.array([[True, False], [False, False]]))
    with pytest.raises(ValueError, match="refers to node 5"):
        core.graph_energy([core.EnergyTerm([0], [5], sim)], jnp.zeros((3, 2)))
    with pytest.raises(ValueError, match=r"nodes must have 2 dimensions"):
        core.graph_energy([core.EnergyTerm([0], [1], sim)], jnp.zeros(3))


# --- property tests ---------------------------------------------------------


@settings(max_examples=40, deadline=None)
@given(
    C=st.integers(1, 6),
    P=st.integers(1, 6),
    scale=st.sampled_from([1e-3, 1.0, 30.0, 1e4]),
    seed=st.integers(0, 2**31 - 1),
)
def test_energy_property_float64(C, P, scale, seed):
    sim = np.random.default_rng(seed).uniform(-scale, scale, size=(C, P))
    e = float(core.energy(sim))
    ref = np_energy(sim)
    assert abs(e - ref) <= 1e-12 * max(1.0, abs(ref), C * scale)
    # Bounds: max_p sim <= lse <= max_p sim + ln P, per child.
    mx = sim.max(-1).sum()
    assert -mx - C * np.log(P) - 1e-9 * max(1, abs(mx)) <= e <= -mx + 1e-9 * max(1, abs(mx))


# --- the gradient checker itself -------------------------------------------


def test_checker_accepts_correct_and_rejects_wrong_gradients():
    x = jnp.asarray(np.random.default_rng(0).normal(size=(4, 3)))
    f = lambda v: core.energy(v)  # noqa: E731
    good = lambda v: -core.weights(v)  # noqa: E731
    res = assert_gradient(f, good, x)
    assert res.autodiff_error < 1e-12 and res.fd_error < 1e-6
    wrong = lambda v: -1.001 * core.weights(v)  # noqa: E731
    with pytest.raises(AssertionError, match="jax.grad"):
        assert_gradient(f, wrong, x)


def test_checker_runs_gradients_that_validate_on_the_host():
    # check_gradient compiles grad_fn; one that inspects values on the host cannot be traced
    # and must be run eagerly instead, and still be judged.
    x = jnp.asarray(np.random.default_rng(2).normal(size=(5, 3)))
    f = lambda v: core.energy(v)  # noqa: E731

    def validated(scale):
        def g(v):
            if not bool(jnp.all(jnp.isfinite(v))):  # host-side check: fails under jit
                raise ValueError("non-finite input")
            return -scale * core.weights(v)

        return g

    with pytest.raises(jax.errors.TracerBoolConversionError):
        jax.jit(validated(1.0))(x)
    assert assert_gradient(f, validated(1.0), x).autodiff_error < 1e-12
    with pytest.raises(AssertionError, match="jax.grad"):
        assert_gradient(f, validated(1.001), x)


def test_decade_is_the_next_power_of_ten_above():
    from lse_energy.testing import decade

    assert decade(0.0) == "= 0"
    assert decade(3.9e-8) == "< 1e-07" and decade(4.1e-8) == "< 1e-07"
    assert decade(1e-7) == "< 1e-06"  # strictly above an exact power of ten
    assert decade(np.float32(1.8e-7)) == "< 1e-06" and decade(5.0) == "< 1e+01"
    for bad in (-1e-9, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="err must be finite and >= 0"):
            decade(bad)


def test_checker_needs_float64():
    from lse_energy.testing import check_gradient

    x = jnp.ones((2, 2), jnp.float32)
    with pytest.raises(ValueError, match="float64"):
        check_gradient(core.energy, lambda v: -core.weights(v), x)


def test_checker_handles_pytrees_and_subsets():
    from lse_energy.testing import check_gradient

    rng = np.random.default_rng(1)
    params = {"a": jnp.asarray(rng.normal(size=(30, 4))), "b": jnp.asarray(rng.normal(size=4))}
    f = lambda p: core.energy(p["a"] * p["b"])  # noqa: E731
    g = jax.grad(f)
    res = check_gradient(f, g, params, n_coords=20)
    assert res.autodiff_error == 0.0 and res.fd_error < 1e-6


def test_host_flatten_and_unravel_agree_with_ravel_pytree():
    """testing._flat / _unravel (host-side, no compile per shape) against jax.flatten_util.ravel_pytree."""
    from jax.flatten_util import ravel_pytree

    from lse_energy.testing import _flat, _unravel

    rng = np.random.default_rng(2)
    tree = {
        "b": (jnp.asarray(rng.normal(size=(3, 2))), np.float64(0.5)),
        "a": [jnp.asarray(rng.normal(size=5))],
        "c": jnp.asarray(rng.normal(size=(2, 1, 2)), jnp.float32),
    }
    ref, ref_unravel = ravel_pytree(tree)
    flat = _flat(tree)
    assert flat.dtype == ref.dtype and flat.shape == ref.shape
    np.testing.assert_array_equal(flat, np.asarray(ref))
    v = jnp.asarray(rng.normal(size=flat.size))
    for ours, theirs in zip(
        jax.tree_util.tree_leaves(jax.jit(_unravel(tree))(v)), jax.tree_util.tree_leaves(ref_unravel(v))
    ):
        assert ours.shape == theirs.shape and ours.dtype == theirs.dtype
        np.testing.assert_array_equal(np.asarray(ours), np.asarray(theirs))
    assert _flat({}).size == 0


# --- softmax_average: the blocked kernel behind attention.attend and hopfield.update


@pytest.mark.parametrize("n_q", [7, 64, 130])
def test_softmax_average_blocked_equals_weights_times_values(n_q):
    kq, kk, kv = jax.random.split(jax.random.key(n_q), 3)
    q = jax.random.normal(kq, (n_q, 5))
    k = jax.random.normal(kk, (11, 5))
    v = jax.random.normal(kv, (11, 3))
    beta = 0.7
    expected = core.weights(beta * q @ k.T) @ v
    # block=16 forces the blocked path (with zero-padding when 16 does not divide n_q)
    # wherever n_q >= 32; the dense path is used below that.
    for block in (16, 256):
        got = core.softmax_average(q, k, v, beta, block=block)
        np.testing.assert_allclose(got, expected, rtol=1e-13, atol=1e-14)
    f = lambda q, k, v: jnp.sum(jnp.sin(core.softmax_average(q, k, v, beta, block=16)))  # noqa: E731
    g = lambda q, k, v: jnp.sum(jnp.sin(core.weights(beta * q @ k.T) @ v))  # noqa: E731
    for a, b in zip(jax.grad(f, argnums=(0, 1, 2))(q, k, v), jax.grad(g, argnums=(0, 1, 2))(q, k, v)):
        np.testing.assert_allclose(a, b, rtol=1e-11, atol=1e-13)


def test_softmax_average_batched_with_bias_uses_dense_path():
    kq, kk, kv, kb = jax.random.split(jax.random.key(5), 4)
    q, k = jax.random.normal(kq, (2, 40, 4)), jax.random.normal(kk, (2, 9, 4))
    v, bias = jax.random.normal(kv, (2, 9, 2)), jax.random.normal(kb, (2, 40, 9))
    expected = jnp.einsum("bcp,bpe->bce", core.weights(0.5 * jnp.einsum("bcd,bpd->bcp", q, k) + bias), v)
    got = core.softmax_average(q, k, v, 0.5, bias, block=8)
    np.testing.assert_allclose(got, expected, rtol=1e-13, atol=1e-14)


def _loose_bound_case():
    """Queries far from every key but one long orthogonal key: the Cauchy-Schwarz shift overshoots by ~1e6."""
    rng = np.random.default_rng(3)
    k = jnp.asarray(np.vstack([1e3 * np.eye(6)[1], rng.normal(size=(9, 6))]))
    v = jnp.asarray(rng.normal(size=(10, 3)))
    q = jnp.asarray(np.hstack([1e3 * np.ones((40, 1)), 0.1 * rng.normal(size=(40, 5))]))
    q = q.at[:, 1].set(0.0)  # orthogonal to the long key
    return q, k, v


def test_softmax_average_fallback_when_the_bound_is_loose():
    q, k, v = _loose_bound_case()
    beta = 1.0
    # the bounded shift alone loses every row sum to underflow here, so the exact branch must run
    k_norm = jnp.sqrt(jnp.max(jnp.sum(k * k, axis=-1)))
    _, low = core._softmax_average_bounded(beta * q[:16], k, v, k_norm)
    assert float(low) < np.sqrt(np.finfo(np.float64).tiny)
    expected = core.weights(beta * q @ k.T) @ v
    got = core.softmax_average(q, k, v, beta, block=16)
    assert np.all(np.isfinite(np.asarray(got)))
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-14)
    f = lambda q, k, v: jnp.sum(jnp.sin(core.softmax_average(q, k, v, beta, block=16)))  # noqa: E731
    g = lambda q, k, v: jnp.sum(jnp.sin(core.weights(beta * q @ k.T) @ v))  # noqa: E731
    for a, b in zip(jax.grad(f, argnums=(0, 1, 2))(q, k, v), jax.grad(g, argnums=(0, 1, 2))(q, k, v)):
        assert np.all(np.isfinite(np.asarray(a)))
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("loose", [False, True])
def test_softmax_average_blocked_path_supports_forward_mode(loose):
    # jvp (and so jacfwd, forward-over-reverse Hessian-vector products) through either branch
    if loose:
        q, k, v = _loose_bound_case()
    else:
        kq, kk, kv = jax.random.split(jax.random.key(9), 3)
        q, k, v = jax.random.normal(kq, (40, 6)), jax.random.normal(kk, (10, 6)), jax.random.normal(kv, (10, 3))
    tangents = tuple(jax.random.normal(jax.random.key(i), x.shape) for i, x in enumerate((q, k, v)))
    blocked = lambda q, k, v: core.softmax_average(q, k, v, 1.0, block=16)  # noqa: E731
    dense = lambda q, k, v: core.weights(q @ k.T) @ v  # noqa: E731
    _, t_blocked = jax.jvp(blocked, (q, k, v), tangents)
    _, t_dense = jax.jvp(dense, (q, k, v), tangents)
    np.testing.assert_allclose(t_blocked, t_dense, rtol=1e-10, atol=1e-12)


def test_softmax_average_reverse_mode_keeps_no_weight_matrix():
    """Every block is rematerialised: the VJP's residuals hold no block's (block, N_K) weights.

    Without ``jax.checkpoint`` around each block (the mutant: remove it), reverse mode stacks every
    block's weights, an (n_blocks, block, N_K) residual, i.e. the whole N_Q x N_K matrix.
    """
    kq, kk, kv = jax.random.split(jax.random.key(2), 3)
    q, k, v = jax.random.normal(kq, (64, 3)), jax.random.normal(kk, (40, 3)), jax.random.normal(kv, (40, 2))
    _, vjp = jax.vjp(lambda q, k, v: core.softmax_average(q, k, v, 0.5, block=16), q, k, v)
    sizes = [leaf.size for leaf in jax.tree_util.tree_leaves(vjp)]
    assert sizes and max(sizes) < 16 * 40, sizes
    # the dense form, for contrast, keeps its N_Q x N_K weights
    _, vjp_dense = jax.vjp(lambda q: core.weights(0.5 * q @ k.T) @ v, q)
    assert max(leaf.size for leaf in jax.tree_util.tree_leaves(vjp_dense)) >= 64 * 40


# --- random_normal: jax.random.normal's numbers at a fraction of the compile time


@pytest.mark.parametrize("shape", [(), (5,), (16,), (17,), (4, 3), (2, 3, 4), (2, 3, 4, 5), (3, 0, 2), (33, 31)])
@pytest.mark.parametrize("dtype", [None, jnp.float32, jnp.float64])
def test_random_normal_draws_jax_random_normals_numbers(shape, dtype):
    key = jax.random.key(7)
    ref = jax.random.normal(key, shape) if dtype is None else jax.random.normal(key, shape, dtype)
    got = core.random_normal(key, shape, dtype)
    assert got.shape == ref.shape and got.dtype == ref.dtype
    np.testing.assert_array_equal(np.asarray(got), np.asarray(ref))
    # a different key gives different numbers (the comparison can fail)
    if ref.size:
        assert not np.array_equal(np.asarray(core.random_normal(jax.random.key(8), shape, dtype)), np.asarray(ref))


@pytest.mark.parametrize(
    "make_key", [lambda: jax.random.PRNGKey(3), lambda: jax.random.key(3, impl="rbg")], ids=["raw-threefry", "rbg"]
)
def test_random_normal_matches_for_other_keys(make_key):
    # a raw uint32 threefry key shares the padded draw; another generator is called as it is
    for shape in [(7,), (3, 5), (2, 2, 3)]:
        np.testing.assert_array_equal(
            np.asarray(core.random_normal(make_key(), shape)), np.asarray(jax.random.normal(make_key(), shape))
        )


@pytest.mark.parametrize("shape", [(), (17,), (4, 3), (2, 3, 4), (3, 0, 2)])
@pytest.mark.parametrize("dtype, bounds", [(None, ()), (jnp.float32, (-2.0, 3.0)), (jnp.float64, (0.5, 0.75))])
def test_random_uniform_draws_jax_random_uniforms_numbers(shape, dtype, bounds):
    key = jax.random.key(5)
    args = (() if dtype is None else (dtype,)) + bounds
    ref = jax.random.uniform(key, shape, *args) if dtype is not None else jax.random.uniform(key, shape)
    for got in (
        core.random_uniform(key, shape, dtype, *bounds),
        jax.jit(lambda k: core.random_uniform(k, shape, dtype, *bounds))(key),
    ):
        assert got.shape == ref.shape and got.dtype == ref.dtype
        np.testing.assert_array_equal(np.asarray(got), np.asarray(ref))
    lo = jnp.zeros(shape)  # array bounds go to jax.random.uniform as they are
    np.testing.assert_array_equal(
        np.asarray(core.random_uniform(key, shape, None, lo, 2.0)),
        np.asarray(jax.random.uniform(key, shape, minval=lo, maxval=2.0)),
    )


def test_random_normal_under_jit_and_vmap():
    keys = jax.random.split(jax.random.key(4), 3)
    got = jax.jit(jax.vmap(lambda k: core.random_normal(k, (5, 3))))(keys)
    ref = jax.vmap(lambda k: jax.random.normal(k, (5, 3)))(keys)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(ref))


# The book's verdict rule (lse_energy.testing.paired_interval) against scipy's paired t test.
def test_paired_interval_is_scipys_paired_t_interval():
    import scipy.stats

    from lse_energy.testing import paired_interval

    rng = np.random.default_rng(0)
    for n in (2, 5, 10, 40):
        a, b = rng.normal(size=n), rng.normal(size=n) + 0.3
        iv = paired_interval(a, b, level=0.9)
        ref = scipy.stats.ttest_rel(a, b).confidence_interval(0.9)
        np.testing.assert_allclose([iv.low, iv.high], [ref.low, ref.high], rtol=1e-12)
        assert iv.n == n and np.isclose(iv.mean, np.mean(a - b))
        # the differences alone: scipy's one-sample interval of a - b
        one = scipy.stats.ttest_1samp(a - b, 0.0).confidence_interval(0.9)
        np.testing.assert_allclose(paired_interval(a - b, level=0.9)[1:3], [one.low, one.high], rtol=1e-12)
    assert paired_interval([1.0, 1.2, 1.1], [0.0, 0.1, 0.05]).excludes_zero()
    assert not paired_interval([1.0, -1.0, 0.5], [0.0, 0.0, 0.0]).excludes_zero()


@pytest.mark.parametrize("a, b, match", [([1.0], [0.0], "length >= 2"), ([1.0, np.nan], [0, 0], "finite")])
def test_paired_interval_refuses_bad_input(a, b, match):
    from lse_energy.testing import paired_interval

    with pytest.raises(ValueError, match=match):
        paired_interval(a, b)
