"""The corpus folder on disk: ``format`` (the directory format's specification and its manifest),
``shards`` (a shard's bytes, encoded and decoded safely), ``weights`` (the shape of the model a
corpus was recorded from, never its values, and the warning when an analysis builds another),
``requests`` (``requests.json``: the request and step of each tagged call), ``compile_log``
(``compiles.jsonl``: the compiles a traffic recorder's process made). ``shards`` and ``weights``
build on ``format``; the other files stand alone. A signature is stored through
:mod:`guardscope.corpus.signatures`, a value through :mod:`guardscope.corpus.values`."""
