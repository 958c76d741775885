"""What a corpus sample may hold, bottom up: ``codecs`` (the registry of stored types and the
attributes codec), ``library_types`` (the built-in transformers-cache and PyG codecs, registered
only when those libraries are installed), ``structured`` (values that are not tensors or plain
containers: a registered type name and a state, lowered for the corpus and rebuilt through the
registry), ``sample`` (the check that refuses anything else, and the private copy a writer keeps of
one call). Nothing here knows of signatures, shards or files."""
