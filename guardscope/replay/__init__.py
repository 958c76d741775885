"""Analysis, stage 1: replaying a corpus through ``torch.compile`` — the only package that calls
it.

Stage order: ``arguments`` (a call as Dynamo's frame holds it, and as the user names it),
``trace`` (the structured trace's records, and a trace file read back), ``events`` (records ->
compile events), ``capture`` (the structured trace captured in-process), ``cudagraphs`` (CUDA Graph
Trees listened to and parsed), ``compiling`` (the settings a replay runs under and the compile
itself), ``runner`` (one call run), ``record_plan`` (signature records described by their call
template), ``session`` (the replay loop), ``resumable`` (shards and checkpoints).
"""
