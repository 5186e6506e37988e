"""Progress bars for compiled training loops (the ``progress=True`` option of the fits).

A jitted ``lax.scan`` or ``while_loop`` cannot drive a Python progress bar, so the
loop reports its step number to the host with ``jax.debug.callback`` every
``report_every`` steps (:func:`tick`), and the host moves the open ``tqdm.auto``
bar forward to it (:func:`bar`). Vmapped copies of a loop report the same or
similar step numbers; the bar only ever moves forward, so duplicates are harmless.

The callback changes how XLA fuses the loop body, so a run with a bar agrees with
one without to round-off, not bit for bit. Without a bar (``report_every=0``)
:func:`tick` adds nothing to the loop body.
"""

from __future__ import annotations

import contextlib
import os

import jax
import jax.numpy as jnp
import numpy as np

from lse_energy import _validate

_bar = None
last: tuple[int, int] | None = None  # (steps reported, total) of the last closed bar; for tests


def _report(done):
    bar = _bar
    if bar is not None:
        done = int(np.max(np.asarray(done)))
        if done > bar.n:
            bar.update(min(done, bar.total) - bar.n)


@contextlib.contextmanager
def bar(enabled, total: int, desc: str):
    """Open a bar of ``total`` steps while the block runs; yields ``report_every`` (0 when disabled).

    The block must wait for its results (``jax.block_until_ready``) so that every
    report has arrived before the bar closes.
    """
    global _bar, last
    _validate.flag("progress", enabled)
    if not enabled:
        yield 0
        return
    from tqdm.auto import tqdm

    # tqdm's notebook bar ignores the TQDM_DISABLE variable (tqdm 4.70) and would be stored as a widget
    # when a chapter is executed for the book; the same program runs, only the bar stays hidden.
    hidden = os.environ.get("TQDM_DISABLE", "").strip().lower() not in ("", "0", "false")
    _bar = tqdm(total=total, desc=desc, disable=hidden)
    try:
        yield max(1, total // 50)
        jax.effects_barrier()
    finally:
        last = (_bar.n, total)
        _bar.close()
        _bar = None


def tick(i, total: int, report_every: int) -> None:
    """Inside a traced loop: report step ``i + 1`` of ``total`` every ``report_every`` steps (0: never)."""
    if not report_every:
        return
    done = jnp.asarray(i) + 1
    jax.lax.cond(
        jnp.any((done % report_every == 0) | (done == total)), lambda: jax.debug.callback(_report, done), lambda: None
    )
