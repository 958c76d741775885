"""Proof: each fix applied in a fresh process and measured.

Stage order: ``isolation`` (the one child runner), ``verify`` (the corpus replayed after each
fix), ``bundling`` (compile-cache bundles made), ``bench`` (serving latency of each strategy),
``fidelity`` (the analysis against the production backend).
"""
