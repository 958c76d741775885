"""A call's signature — what a frame-0 guard can read of the inputs without their data — bottom up:
``signature`` (the one definition, its digest and JSON form) and ``materialising`` (arguments built
back from one, zero-filled), independent of each other; ``call_template`` (``CallTemplate``: the
signatures of one call structure, whose arguments are built once per argument and size); ``records``
(``SignatureRecord``: consecutive samples recorded as their signature only, as a reader gives them).
They build on :mod:`guardscope.corpus.values` only: no shard, file or manifest here."""
