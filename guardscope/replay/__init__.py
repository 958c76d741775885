"""Analysis, stage 1: replaying a corpus through ``torch.compile`` — the only package that calls
it.

Stage order: ``arguments`` (a call as Dynamo's frame holds it, and as the user names it),
``capture`` (the structured trace in, compile events out), ``session`` (the replay itself).
"""
