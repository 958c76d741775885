"""Production's settings a recorder keeps: the backend of the wrapped ``torch.compile`` (what the
proofs compile with), and the grad mode, recorded where the call is served, replayed under, and
asked for with ``--grad-mode`` where a corpus does not say. Dynamo guards on the grad mode and on each tensor's
dispatch keys, so the same traffic compiles differently under ``no_grad`` and ``inference_mode``:
each catalog is checked against plain ``torch.compile`` under that mode in the same test."""

from __future__ import annotations

import inspect
import json

import pytest
import torch
from click.testing import CliRunner

import guardscope
from guardscope import CorpusWriter
from guardscope import pipeline, torch_compat
from guardscope.cli import main
from guardscope.corpus.storage.format import read_manifest
from guardscope.errors import CorpusError
from guardscope.proving.isolation import import_file
from guardscope.runtime import TrafficRecorder

from ..conftest import read_catalog
from ..models import CountsCalls
from ..paths import model_spec

ROWS = (3, 5, 3, 7, 5, 9, 3, 4)


def plain_graphs(grad: type) -> int:
    """Graphs plain torch.compile (eager backend, dynamic=True) compiles for the calls under ``grad``."""
    compiled = []
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = torch.compile(CountsCalls().eval(), backend=lambda gm, _: (compiled.append(gm), gm.forward)[1],
                          dynamic=True)
    for rows in ROWS:
        with grad():
            model(torch.randn(rows, 4))
    torch._dynamo.reset()
    return len(compiled)


def test_plain_torch_compile_compiles_this_traffic_differently_under_no_grad_and_inference_mode():
    assert (plain_graphs(torch.no_grad), plain_graphs(torch.inference_mode)) == (1, 2)


def test_traffic_recorded_under_no_grad_is_analysed_under_no_grad_as_plain_torch_compile_serves_it(tmp_path):
    model = CountsCalls().eval()
    traffic = TrafficRecorder(tmp_path / "traffic", model=model_spec("CountsCalls"), compile={"dynamic": True})
    served = traffic.wrap(model)
    with torch.no_grad():  # how the service serves
        for rows in ROWS:
            served(torch.randn(rows, 4))
    traffic.close()
    assert json.loads((tmp_path / "traffic" / "corpus.json").read_text())["grad_mode"] == "no_grad"

    catalog = read_catalog(guardscope.analyze(tmp_path / "traffic", tmp_path / "out").out_dir)
    assert catalog["compile"]["grad_mode"] == "no_grad"
    assert catalog["summary"]["compiles"] == plain_graphs(torch.no_grad) == 1

    # Asked for another mode, the analysis answers for that one: what inference-mode serving compiles.
    result = CliRunner().invoke(main, ["analyze", str(tmp_path / "traffic"), "--out", str(tmp_path / "im"),
                                       "--grad-mode", "inference_mode", "-q"])
    assert result.exit_code == 0, result.output
    catalog = read_catalog(tmp_path / "im")
    assert catalog["compile"]["grad_mode"] == "inference_mode"
    assert catalog["summary"]["compiles"] == plain_graphs(torch.inference_mode) == 2
    assert "under inference_mode;" in result.output


def test_a_corpus_that_does_not_say_is_analysed_under_the_grad_mode_asked_for(tmp_path):
    corpus = tmp_path / "corpus"
    with CorpusWriter(corpus, model=model_spec("CountsCalls"), compile={"dynamic": True}) as writer:
        for rows in ROWS:
            writer.add(torch.randn(rows, 4))
    assert "grad_mode" not in json.loads((corpus / "corpus.json").read_text())
    default = read_catalog(guardscope.analyze(corpus, tmp_path / "default").out_dir)
    assert (default["compile"]["grad_mode"], default["summary"]["compiles"]) == ("inference_mode", 2)
    asked = read_catalog(guardscope.analyze(corpus, tmp_path / "asked", grad_mode="no_grad").out_dir)
    assert (asked["compile"]["grad_mode"], asked["summary"]["compiles"]) == ("no_grad", 1)


def test_a_manifest_naming_inference_mode_false_in_its_compile_options_is_analysed_under_no_grad(tmp_path, recwarn):
    corpus = tmp_path / "corpus"
    with CorpusWriter(corpus, model=model_spec("CountsCalls"), compile={"dynamic": True, "inference_mode": False}) as writer:
        for rows in ROWS:
            writer.add(torch.randn(rows, 4))
    catalog = read_catalog(guardscope.analyze(corpus, tmp_path / "out").out_dir)
    assert (catalog["compile"]["grad_mode"], catalog["summary"]["compiles"]) == ("no_grad", 1)
    assert not [w for w in recwarn if "unknown compile options" in str(w.message)]


def test_the_warmup_runs_under_the_recorded_grad_mode_and_serving_then_compiles_nothing(tmp_path):
    """The generated warmup's default grad mode is production's: after warmup(), the recorded
    traffic served under no_grad compiles nothing."""
    model = CountsCalls().eval()
    traffic = TrafficRecorder(tmp_path / "traffic", model=model_spec("CountsCalls"), compile={"dynamic": True})
    served = traffic.wrap(model)
    with torch.no_grad():
        for rows in ROWS:
            served(torch.randn(rows, 4))
    traffic.close()
    out = guardscope.analyze(tmp_path / "traffic", tmp_path / "out").out_dir
    pipeline.emit_warmup(out)
    warmup = import_file(out / "warmup.py")
    assert warmup.GRAD_MODE == "no_grad"
    torch._dynamo.reset()
    compiled = []
    production = torch.compile(CountsCalls().eval(), dynamic=True,
                               backend=lambda gm, _: (compiled.append(gm), gm.forward)[1])
    warmup.warmup(production)
    warmed = len(compiled)
    with torch.no_grad():
        for rows in (*ROWS, 11, 2):
            production(torch.randn(rows, 4))
    torch._dynamo.reset()
    assert (warmed, len(compiled)) == (1, 1)


@pytest.mark.parametrize("mode", ["grad", "bogus"])
def test_a_bad_grad_mode_is_refused_and_grad_is_a_mode(tmp_path, mode):
    corpus = tmp_path / "corpus"
    if mode == "bogus":
        with pytest.raises(CorpusError, match="grad_mode is \"bogus\"; use one of inference_mode, no_grad, grad"):
            CorpusWriter(corpus, model=model_spec("CountsCalls"), grad_mode=mode)
        return
    with CorpusWriter(corpus, model=model_spec("CountsCalls"), compile={"dynamic": True}, grad_mode=mode) as writer:
        for rows in ROWS:
            writer.add(torch.randn(rows, 4))
    catalog = read_catalog(guardscope.analyze(corpus, tmp_path / "out").out_dir)
    assert catalog["compile"]["grad_mode"] == "grad"
    assert catalog["summary"]["compiles"] == plain_graphs(torch.enable_grad)


@pytest.mark.parametrize("backend", ["eager", "inductor"])
def test_wrap_records_the_backend_of_the_wrapped_torch_compile(tmp_path, backend):
    """Read off torch.compile's wrapper without compiling anything: the backend verify proves with."""
    model = torch.nn.Linear(4, 4)
    traffic = TrafficRecorder(tmp_path / "t", model=model_spec("CountsCalls"))
    traffic.wrap(torch.compile(model.forward, backend=backend))
    traffic.offer((torch.randn(3, 4),), {})
    traffic.close()
    assert read_manifest(tmp_path / "t").compile["backend"] == backend


@pytest.mark.parametrize(("options", "recorded"), [
    ({"mode": "max-autotune-no-cudagraphs"}, "max-autotune-no-cudagraphs"),
    ({"mode": "max-autotune"}, "max-autotune"),
    ({"options": {"triton.cudagraphs": True}}, "reduce-overhead"),  # the same settings as that mode
    ({}, None),  # the default mode: nothing to record
])
def test_wrap_records_the_mode_of_the_wrapped_torch_compile(tmp_path, options, recorded):
    """Read off inductor's config without compiling: the mode decides CUDA graphs, which the
    analysis models (mode="reduce-overhead")."""
    model = torch.nn.Linear(4, 4)
    traffic = TrafficRecorder(tmp_path / "t", model=model_spec("CountsCalls"))
    traffic.wrap(torch.compile(model.forward, **options))
    traffic.offer((torch.randn(3, 4),), {})
    traffic.close()
    assert read_manifest(tmp_path / "t").compile.get("mode") == recorded


@pytest.mark.skipif(not torch_compat.supports_per_call_recompile_limit()
                    or "isolate_recompiles" not in inspect.signature(torch.compile).parameters,
                    reason="torch without per-call limits or isolate_recompiles (2.12.1 has the first only)")
def test_wrap_records_options_beyond_the_mode_and_isolate_recompiles(tmp_path):
    """Issue 35: what production's torch.compile call was given is in corpus.json (inductor's
    options= beyond the mode's, torch 2.13's recompile_limit and isolate_recompiles) and in the
    catalog's production section; the per-call limit is the one the analysis models."""
    model = torch.nn.Linear(4, 4)
    traffic = TrafficRecorder(tmp_path / "t", model=model_spec("CountsCalls"))
    traffic.wrap(torch.compile(model.forward, options={"max_autotune": True, "epilogue_fusion": False},
                               recompile_limit=5, isolate_recompiles=True))
    for rows in (3, 5):
        traffic.offer((torch.randn(rows, 4),), {})
    traffic.close()
    recorded = read_manifest(tmp_path / "t").compile
    assert recorded["inductor_options"] == {"epilogue_fusion": False, "max_autotune": True}
    assert recorded["isolate_recompiles"] is True and recorded["recompile_limit"] == 5
    guardscope.analyze(tmp_path / "t", tmp_path / "out")
    production = json.loads((tmp_path / "out" / "catalog.json").read_text())["production"]
    assert production["inductor_options"] == {"epilogue_fusion": False, "max_autotune": True}
    assert production["isolate_recompiles"] is True
    assert (production["recompile_limit"], production["source"]) == (5, "recorded")
