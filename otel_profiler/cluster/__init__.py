"""Multi-rank analysis as map and reduce: each rank read where it lies (local processes or a Dask
cluster), compact mergeable partials merged into one summary document, ranks' clocks aligned."""
