"""One test file per model module of ``lse_energy`` (``core`` included): its functions against NumPy,
``jax.grad`` and outside oracles, over at least three seeds."""
