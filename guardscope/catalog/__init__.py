"""Analysis, stage 2 (pure): compile events and sample descriptions in, the catalog out.

Stage order: ``classify`` (guard-failure text to typed failures), ``builder`` (topologies, facts,
dimensions, frames), ``buckets`` (CUDA-graph padding advice), ``caveats`` (what the numbers do not
say), ``matching`` (which topology of one catalog is which of another's), ``diff`` (two catalogs
compared).
"""
