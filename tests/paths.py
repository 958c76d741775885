"""Where the tests' inputs are: the repository, the committed seed corpus and fleet, tests/models.py."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SEED_CORPUS = REPO / "samples" / "gnn" / "corpus"
FLEET = REPO / "samples" / "fleet" / "replicas"  # the seed dealt to four replicas' traffic logs
MODELS = Path(__file__).resolve().parent / "models.py"


def model_spec(name: str) -> str:
    """The model spec of a model in tests/models.py."""
    return f"{MODELS}:{name}"
