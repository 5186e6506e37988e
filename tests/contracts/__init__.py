"""Rules every module keeps, driven by registries: layering, the model registry, input validation,
dtypes, the registry-driven property oracles, the mutant registry, and the dependency pins."""
