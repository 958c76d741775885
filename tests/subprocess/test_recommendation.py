"""Issue 36: every code block the report's recommendation shows, run exactly as shown against the
analysed model, does what the box says: after it, the recorded requests compile nothing under
torch.compile's defaults (inductor), and where the box says the code changes no global setting,
none changed. The seed (its unbacked plan: set-up, then a mark per request) and a PyG GCN called
as ``model(batch)`` (its warmup set, past production's recompile limit); a generate() corpus's
block runs in tests/subprocess/test_objects.py's
``test_a_generate_warmup_applied_as_the_report_says_compiles_nothing_under_inductor``."""

from __future__ import annotations

import html
import re
import sys

import pytest
import torch

import guardscope
from guardscope import pipeline, store, torch_compat

from .. import real_models
from ..sessions import copy_analysis

BLOCK = re.compile(r'<pre class="code" aria-label="([^"]*)"><code>(.*?)</code></pre>', re.S)


def recommendation_blocks(page: str) -> tuple[str, list[tuple[str, str]]]:
    """The recommendation box's words and its code blocks (label, code), as a reader copies them."""
    box = re.search(r'<section id="recommendation".*?</section>', page, re.S).group(0)
    words = html.unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", box)))
    return words, [(label, html.unescape(code)) for label, code in BLOCK.findall(box)]


def run_as_shown(code: str, model, requests, grad_mode: str) -> dict:
    """Run ``code`` once with ``model`` bound, then every request: through the lines after its
    ``...`` (what runs per request), else through the ``compiled`` it made. Any compile while the
    requests run raises (fail_on_recompile: a new graph, or a call past the recompile limit)."""
    set_up, _, per_request = code.partition("\n...\n")
    namespace = {"model": model}
    exec(set_up, namespace)
    with torch.compiler.set_stance("fail_on_recompile"), torch_compat.grad_context(grad_mode):
        for args, kwargs in requests:
            if per_request:
                exec(per_request, {**namespace, "args": args, "kwargs": kwargs})
            else:
                namespace["compiled"](*args, **kwargs)
    return namespace


def pyg_corpus(folder):
    return real_models.write_corpus("gcn", str(folder), 12)


@pytest.mark.parametrize("case", ["seed", "pyg"])
def test_every_recommended_code_block_does_what_the_box_says(case, tmp_path, monkeypatch, request):
    """Slow: the recommendation is chosen among every plan (all are planned), and each block runs
    under inductor as shown, the GCN's warmup past production's recompile limit. The seed's
    analysis and plans are the session's (a copy: importing the modules writes beside them)."""
    out = tmp_path / "out"
    if case == "seed":
        copy_analysis(request.getfixturevalue("seed_fixes")[0], out)
    else:
        guardscope.analyze(pyg_corpus(tmp_path / "corpus"), out)
        pipeline.emit_warmup(out)
    words, blocks = recommendation_blocks((out / "report.html").read_text())
    assert blocks, words
    _, catalog, loaded, model = store.load_inputs(out, None)
    requests = [(sample.args, sample.kwargs) for sample in loaded]
    grad_mode = catalog["compile"]["grad_mode"]
    monkeypatch.syspath_prepend(str(out))
    # The code changes this thread's settings (configure() turns duck sizing off, a warmup may raise
    # the limit): tests/conftest.py's _fresh_dynamo puts them back for the tests this worker runs next.
    for label, code in blocks:
        module = label.removeprefix("how to apply ").removesuffix(".py")
        monkeypatch.delitem(sys.modules, module, raising=False)  # this analysis's module, not another's
        torch._dynamo.reset()
        limit = torch._dynamo.config.recompile_limit
        namespace = run_as_shown(code, model, requests, grad_mode)
        assert namespace[module].__file__.startswith(str(out))
        if "changes no global setting" in words:
            assert torch._dynamo.config.recompile_limit == limit
        sys.modules.pop(module, None)
    torch._dynamo.reset()
