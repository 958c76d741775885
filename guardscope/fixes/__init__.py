"""Fixes: from a catalog to the modules ``emit-warmup`` writes.

Stage order: ``warmup_plan`` (the warmup cover, measured), ``plan`` (unbacked dims, export Dims),
``exporting`` (torch.export refinement), ``probe`` (synthetic inputs beyond the corpus), ``emit``
(pure: plans to the text of the generated modules), ``document`` (fixes.json).
"""
