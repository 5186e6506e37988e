"""Two processes on localhost, each holding its own rows (``jax.distributed`` with gloo CPU collectives).

``tests/integration/multiprocess_worker.py`` runs as two processes with two host devices each; process 0
passes the first 387 of 1001 rows and process 1 the other 614. The sharded EM step, the sharded
fit (in memory and streamed from each process's own memmap) and the sharded retrieval must equal
the single-process functions on all rows to 1e-10, on both processes. So must the same functions
iterated by hand, each result passed back in as the next call's input (``worker.ITERS`` times),
with parameters from ``gmm.init_params`` on process 0 broadcast to both, a fit's parameters
refined by a step, and memories passed as NumPy, committed to one device or replicated globally.
Until issue 31 the second hand-fed ``sharded_em_step`` raised "Received incompatible devices".
"""

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import jax
import numpy as np
import pytest

from lse_energy import gmm, hopfield
from tests.integration import multiprocess_worker as worker

TIMEOUT_S = 240


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run_two_processes(out: Path) -> list[dict]:
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("JAX_ENABLE_X64",)}
    procs = [
        subprocess.Popen(
            [sys.executable, worker.__file__, str(pid), str(port), str(out)],
            env=env,
            stdout=open(out / f"log{pid}.txt", "w"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        for pid in (0, 1)
    ]
    try:
        deadline = time.monotonic() + TIMEOUT_S
        for p in procs:
            p.wait(timeout=max(1.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        pytest.fail(f"the two processes did not finish within {TIMEOUT_S} s")
    finally:  # leave no process behind, whatever happened
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
    for pid, p in enumerate(procs):
        assert p.returncode == 0, f"process {pid} failed:\n" + (out / f"log{pid}.txt").read_text()[-4000:]
    return [dict(np.load(out / f"process{pid}.npz")) for pid in (0, 1)]


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    return _run_two_processes(tmp_path_factory.mktemp("multiprocess"))


def _close(a, b, tol=1e-10):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=tol, atol=tol)


def _close_fields(results, prefix, ref):
    """Every field of the NamedTuple ``ref`` equals each process's ``<prefix>_<field>``."""
    for r in results:
        for f, a in zip(ref._fields, ref):
            _close(r[f"{prefix}_{f}"], a)


def test_two_processes_and_four_devices(results):
    for r in results:
        assert int(r["process_count"]) == 2 and int(r["devices"]) == 4


def test_sharded_em_step_equals_single_process(results):
    x, _, _ = worker.data()
    ref = gmm.em_step(worker.params(x), x)
    _close_fields(results, "step", ref)


def test_sharded_fit_equals_single_process(results):
    x, _, _ = worker.data()
    ref = gmm.fit(x, worker.K, key=jax.random.key(7), max_iter=25, tol=0.0)
    for r in results:
        for f, a in zip(ref.params._fields, ref.params):
            _close(r[f"fit_{f}"], a)
            _close(r[f"stream_{f}"], a)  # each process streamed its own memmap in 100-row chunks
        _close(r["fit_energies"], ref.energies)


def test_sharded_retrieve_equals_single_process(results):
    _, memories, queries = worker.data()
    states, energies = hopfield.retrieve(memories, queries, beta=2.0, n_steps=4, return_energy=True)
    for r in results:
        _close(r["retrieve_states"], states)
        _close(r["retrieve_energies"], energies)


def test_invalid_rows_on_one_process_raise_on_both(results):
    assert "x must be finite" in str(results[1]["invalid_error"])
    assert "process(es) [1]" in str(results[0]["invalid_error"])


def test_sharded_em_step_iterated_by_hand(results):
    x, _, _ = worker.data()
    ref = worker.params(x)
    for i in range(worker.ITERS):
        ref = gmm.em_step(ref, x)
        _close_fields(results, f"loop{i}", ref)


def test_params_from_process_zero_broadcast_then_iterated(results):
    x, _, _ = worker.data()
    ref = gmm.init_params(x[: worker.N0], worker.K, key=jax.random.key(5))  # process 0's rows only
    _close_fields(results, "bcast_init", ref)
    for _ in range(worker.ITERS):
        ref = gmm.em_step(ref, x, reg_covar=1e-6)
    _close_fields(results, "bcast", ref)


def test_fit_params_refined_by_a_step(results):
    x, _, _ = worker.data()
    fit = gmm.fit(x, worker.K, key=jax.random.key(7), max_iter=25, tol=0.0)
    ref = gmm.em_step(fit.params, x)
    _close_fields(results, "fit_then_step", ref)


def test_sharded_retrieve_iterated_by_hand(results):
    _, memories, queries = worker.data()
    states = queries
    for i in range(worker.ITERS):  # memories as NumPy, committed to one device, replicated globally
        states = hopfield.retrieve(memories, states, beta=2.0, n_steps=2)
        for r in results:
            _close(r[f"retr_loop{i}"], states)
    states, energies = hopfield.retrieve(memories, states, beta=2.0, n_steps=2, return_energy=True)
    for r in results:
        _close(r["retr_loop_last"], states)
        _close(r["retr_loop_energies"], energies)


def test_replicated_inputs_that_differ_between_processes_raise_on_both(results):
    for r in results:
        assert "params must be the same on every process" in str(r["differ_error"])
