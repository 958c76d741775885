"""Analysis, stage 2 (pure): compile events and sample descriptions in, the catalog out.

Stage order: ``classify`` (guard-failure text to typed failures), ``facts`` (a compiled entry's
guards in plain words), ``builder`` (topologies, dimensions, frames), ``buckets`` (CUDA-graph
padding advice), ``cudagraphs`` (the catalog's CUDA-graph section), ``caveats`` (what the numbers
do not say), ``matching`` (which topology of one catalog is which of another's), ``diff`` (a subpackage:
two catalogs compared, the document over its comparisons and words, over the records it lists).
"""
