"""Many replicas' traffic logs as one corpus (``guardscope merge``, and ``guardscope analyze``
given several corpora): ``replicas`` (the one place that answers "is this a fleet?": the replicas
the arguments name, found, opened and checked to be recorded alike, or put in groups that were),
``merge`` (the merge in fleet order, in two passes), ``order`` (between them: the rows read placed
in fleet order and laid out as the merged corpus holds them), ``compact`` (a merge's rows made one
per signature, with calls per replica), ``samples`` (a merged fleet corpus read back: each sample's
replica, the topologies' calls per replica and first and last sightings). The fleet order is
defined in :mod:`.merge`'s docstring."""
