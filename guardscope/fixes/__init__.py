"""Fixes: from a catalog to the modules ``emit-warmup`` writes.

Stage order: ``plan`` (warmup cover, unbacked dims, export Dims: pure selection), ``exporting``
(torch.export refinement), ``probe`` (synthetic inputs beyond the corpus), ``emit`` (pure: plans
to the text of the generated modules), ``document`` (fixes.json).
"""
