"""Data larger than memory: ``gmm.fit`` and ``sharding.sharded_fit`` stream a memmap in row chunks."""

import json
import os
import subprocess
import sys
import textwrap

import jax
import numpy as np
import pytest

from lse_energy import _rows, gmm, sharding


def _mixture(n, d, seed):
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(3, d)) * 3
    return centres[rng.integers(3, size=n)] + rng.normal(size=(n, d))


@pytest.fixture
def memmap(tmp_path):
    def make(x, mode="r"):
        path = tmp_path / "x.dat"
        mm = np.memmap(path, dtype=x.dtype, mode="w+", shape=x.shape)
        mm[:] = x
        mm.flush()
        del mm
        return np.memmap(path, dtype=x.dtype, mode=mode, shape=x.shape)

    return make


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("chunk_rows", [None, 1000, 4096, 9999])
def test_streamed_fit_equals_in_memory_fit(memmap, seed, chunk_rows):
    x = _mixture(20_011, 4, seed)
    mm = memmap(x)
    ref = gmm.fit(x, 3, key=jax.random.key(seed), max_iter=40, tol=1e-9)
    for got in (
        gmm.fit(mm, 3, key=jax.random.key(seed), max_iter=40, tol=1e-9, chunk_rows=chunk_rows),
        sharding.sharded_fit(
            mm, 3, sharding.data_mesh(), key=jax.random.key(seed), max_iter=40, tol=1e-9, chunk_rows=chunk_rows
        ),
    ):
        assert got.n_iter == ref.n_iter and got.converged == ref.converged
        for a, b in zip(got.params, ref.params):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-10, atol=1e-10)
        np.testing.assert_allclose(np.asarray(got.energies), np.asarray(ref.energies), rtol=1e-12)


def test_chunk_rows_streams_an_in_memory_array_too():
    x = _mixture(5000, 2, 0)
    ref = gmm.fit(x, 2, key=jax.random.key(0), max_iter=10, tol=0.0)
    got = gmm.fit(x, 2, key=jax.random.key(0), max_iter=10, tol=0.0, chunk_rows=333)
    np.testing.assert_allclose(np.asarray(got.params.means), np.asarray(ref.params.means), rtol=1e-10, atol=1e-10)
    # nested lists stream too (they have no .shape): the same fit, and the same dtype error as in memory
    got = gmm.fit(x.tolist(), 2, key=jax.random.key(0), max_iter=10, tol=0.0, chunk_rows=333)
    np.testing.assert_allclose(np.asarray(got.params.means), np.asarray(ref.params.means), rtol=1e-10, atol=1e-10)
    for rows in ([[1, 2], [3, 4]], [[1.0, 2.0], [3.0]]):
        with pytest.raises(ValueError):
            gmm.fit(rows, 1, key=jax.random.key(0), chunk_rows=1)


def test_streamed_errors_name_the_rows(memmap):
    x = _mixture(3000, 2, 0)
    x[2500, 1] = np.inf
    with pytest.raises(ValueError, match=r"x must be finite \(a non-finite value in rows 2000\.\.2999\)"):
        gmm.fit(memmap(x), 2, key=jax.random.key(0), chunk_rows=1000)
    with pytest.raises(ValueError, match="x must have a floating dtype; got int64"):
        gmm.fit(memmap(np.zeros((10, 2), np.int64)), 2, key=jax.random.key(0))
    with pytest.raises(ValueError, match="chunk_rows must be a positive integer"):
        gmm.fit(_mixture(10, 2, 0), 2, key=jax.random.key(0), chunk_rows=0)
    with pytest.raises(ValueError, match="sample covariance is singular"):
        gmm.fit(memmap(np.ones((10, 2))), 2, key=jax.random.key(0), reg_covar=0.0)


def test_is_streamed():
    x = np.zeros((3, 2))
    assert not _rows.is_streamed(x) and not _rows.is_streamed(jax.numpy.asarray(x))
    assert not _rows.is_streamed(x.tolist())


# Peak resident memory of a fit on a ~1 GB memmap, in a fresh process. The fit is compiled
# first on a small memmap, then the peak is reset (/proc/self/clear_refs) and measured around
# the big fit. RELEASE=0 disables dropping the read pages (madvise), to show what the
# measurement sees without it: every page read stays in the resident set.
_PEAK_SCRIPT = textwrap.dedent("""
    import json, os, sys
    import jax
    jax.config.update("jax_enable_x64", True)
    import numpy as np
    from lse_energy import _rows, gmm
    path, n, d, release = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "1"
    if not release:
        _rows._madvise_dontneed = lambda view: None
    def status(field):
        for line in open("/proc/self/status"):
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    # Compile first, with the very call measured below: the start (k-means on a sample of the rows)
    # and the chunked EM compile programs whose shapes depend on N, and compiling takes memory of
    # its own. A new mapping of the file then starts with none of its pages resident.
    mm = np.memmap(path, dtype=np.float64, mode="r", shape=(n, d))
    gmm.fit(mm, 3, key=jax.random.key(0), max_iter=1)
    del mm
    mm = np.memmap(path, dtype=np.float64, mode="r", shape=(n, d))
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    before = status("VmRSS")
    fit = gmm.fit(mm, 3, key=jax.random.key(0), max_iter=1)
    print(json.dumps({"before": before, "peak": status("VmHWM"), "n_iter": fit.n_iter,
                      "finite": bool(np.isfinite(np.asarray(fit.energies)).all())}))
""")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status")
def test_peak_memory_of_a_1gb_memmap_fit(tmp_path):
    n, d = 8_388_608, 16  # 2**23 rows x 16 float64 = 1 GiB
    path = tmp_path / "big.dat"
    mm = np.memmap(path, dtype=np.float64, mode="w+", shape=(n, d))
    rng = np.random.default_rng(0)
    step = 1 << 20
    for a in range(0, n, step):
        mm[a : a + step] = rng.normal(size=(step, d)) + (a // step % 3)
    mm.flush()
    del mm
    size = n * d * 8

    def peak_growth(release: bool) -> dict:
        out = subprocess.run(
            [sys.executable, "-c", _PEAK_SCRIPT, str(path), str(n), str(d), "1" if release else "0"],
            capture_output=True,
            text=True,
            timeout=600,
            # glibc keeps freed 8 MiB chunk copies in its heap once its dynamic mmap threshold has
            # risen, and how much depends on thread scheduling (20-150 MiB under load, measured):
            # a fixed threshold returns every buffer of 1 MiB or more on free, so the peak is what
            # the fit holds, not what the allocator caches (55-62 MiB, idle or loaded).
            env={**os.environ, "MALLOC_MMAP_THRESHOLD_": str(1 << 20)},
        )
        assert out.returncode == 0, out.stderr[-3000:]
        r = json.loads(out.stdout.strip().splitlines()[-1])
        assert r["n_iter"] == 1 and r["finite"]
        return r

    r = peak_growth(release=True)
    growth = r["peak"] - r["before"]
    # Without dropping the pages it has read, the same fit's resident set grows by about the file:
    # the first check below can fail.
    r0 = peak_growth(release=False)
    growth0 = r0["peak"] - r0["before"]
    print(
        f"1 GiB memmap fit: peak RSS grew by {growth / 2**20:.0f} MiB ({growth / size:.1%} of the file); "
        f"without dropping the pages read, by {growth0 / 2**20:.0f} MiB"
    )
    assert growth < 0.1 * size
    assert growth0 > 0.8 * size


def test_floyd_rows_are_a_uniform_distinct_subset(monkeypatch):
    """Above the permutation threshold the initial rows come from Floyd's algorithm: check it on
    small N (threshold lowered) against the exact law of a uniform 3-subset of 6 (all 20 subsets
    equally likely), with a chi-square test over 6000 keys (critical value at p = 1e-4, 19 dof)."""
    monkeypatch.setattr(_rows, "PERMUTE_MAX_ROWS", 0)
    counts = {}
    for s in range(6000):
        idx = _rows.choose_rows(jax.random.key(s), 6, 3)
        assert len(set(idx.tolist())) == 3 and idx.min() >= 0 and idx.max() < 6
        counts[tuple(sorted(idx.tolist()))] = counts.get(tuple(sorted(idx.tolist())), 0) + 1
    assert len(counts) == 20
    expected = 6000 / 20
    chi2 = sum((c - expected) ** 2 / expected for c in counts.values())
    assert chi2 < 50.8  # scipy.stats.chi2.ppf(1 - 1e-4, 19) = 50.8


def test_streamed_equals_in_memory_above_the_permutation_threshold(memmap, monkeypatch):
    monkeypatch.setattr(_rows, "PERMUTE_MAX_ROWS", 1000)
    x = _mixture(5000, 3, 1)
    ref = gmm.fit(x, 3, key=jax.random.key(2), max_iter=15, tol=0.0)
    got = gmm.fit(memmap(x), 3, key=jax.random.key(2), max_iter=15, tol=0.0, chunk_rows=700)
    for a, b in zip(got.params, ref.params):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-10, atol=1e-10)
