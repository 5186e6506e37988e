"""One test file per chapter: each proposition of ``book/NN_*.ipynb`` on at least 100 random instances,
against an independent computation. The chapter's proofs cite these tests by path."""
