"""The commands that try inputs the corpus does not hold: ``probe`` (synthetic inputs at the sizes
Dynamo specialises on, for topologies not seen yet) and ``whatif`` (the corpus transformed, for
what canonicalising the inputs would save)."""

from __future__ import annotations

from pathlib import Path

import click

from .. import store
from ..terminal import format_advice, format_whatif
from .common import analysis_dir, corpus_option, friendly_errors, json_option, transform_option


@click.command()
@analysis_dir
@click.option("--values", default="0,1,2", show_default=True, metavar="N,N,...",
              help="Sizes each dynamic dimension is set to (Dynamo specialises on 0 and 1).")
@click.option("--pairwise", type=click.Choice(["general", "all", "none"]), default="general", show_default=True,
              help="Edit pairs of dimensions together on the most common topology's sample (general), on every topology's sample (all), or not at all.")
@click.option("--max-candidates", type=int, default=5000, show_default=True,
              help="Check at most this many synthetic samples (the rest are counted as truncated).")
@click.option("--break-relations", is_flag=True,
              help="Also edit dims the corpus always shows equal (a mask's rows and x's) apart; such inputs often raise in the model.")
@corpus_option()
@friendly_errors
def probe(out_dir: str, values: str, pairwise: str, max_candidates: int, break_relations: bool,
          corpus: str | None) -> None:
    """Look for topologies the corpus has not shown yet, with synthetic inputs.

    From each topology's representative sample, builds edited copies at the boundaries Dynamo
    specialises on: each dynamic dimension (with the dims always equal to it) at 0, 1 and 2,
    pairs of dimensions at those sizes, pairs made equal, and the dtypes and memory layouts the
    corpus shows for an input. Dims always equal in the corpus stay equal unless
    --break-relations. Index tensors are kept in range; an edit that would index into an
    empty dimension is dropped. Each synthetic sample is checked against the analysis' compiled
    graphs (no forward when one accepts it); those no graph accepts are compiled, and each new
    graph is a topology the corpus never showed.

    Writes DIR/probe/probe.json (what was explored and found) and DIR/probe/corpus/ (one sample
    per new topology), and adds a Probe section to DIR/report.html. Cover the new topologies with
    'guardscope emit-warmup DIR --include-probed'; 'guardscope verify DIR' then replays them too.

    \b
    Example:
      guardscope analyze samples/gnn/corpus --out out/
      guardscope probe out/
      guardscope emit-warmup out/ --include-probed && guardscope verify out/
    """
    from .. import pipeline
    from ..fixes.probe import raised_words

    try:
        sizes = tuple(int(v) for v in values.split(",") if v.strip())
    except ValueError:
        raise click.BadParameter(f"{values!r} is not a comma-separated list of sizes", param_hint="--values")
    result = pipeline.probe(
        out_dir, values=sizes, pairwise=pairwise, max_candidates=max_candidates, break_relations=break_relations,
        corpus=corpus,
        started=lambda: click.echo("probing (rebuilds the analysis' graphs, then checks each synthetic sample)...",
                                   err=True))
    document = result.document
    explored = document["explored"]
    click.echo(f"explored    {explored['planned']} edits on {explored['bases']} topology samples "
               f"({', '.join(f'{k} {v}' for k, v in explored['planned_by_kind'].items())})"
               + (f", {explored['truncated']} over --max-candidates" if explored["truncated"] else ""))
    click.echo(f"checked     {explored['checked']} distinct synthetic samples: {explored['accepted']} accepted "
               f"by a compiled graph, {explored['new_graph']} needed a new one; {explored['invalid']} invalid, "
               f"{explored['duplicates']} duplicates, {raised_words(explored)}")
    found = document["new_topologies"]
    click.echo(f"new         {len(found)} topologies the corpus never showed")
    for topology in found[:20]:
        click.echo(f"  {topology['id']:<5} {topology['found_by']}")
    if len(found) > 20:
        click.echo(f"  ... {len(found) - 20} more in {store.PROBE}")
    for warning in document["warnings"]:
        click.secho(f"warning: {warning}", fg="yellow", err=True)
    wrote = [str(Path(out_dir) / store.PROBE)]
    if result.corpus_dir is not None:
        wrote.append(str(result.corpus_dir))
    click.echo("wrote       " + ", ".join(wrote))


@click.command()
@analysis_dir
@transform_option(help="An input transform; repeatable, chained in the order given: cast:PATH:DTYPE[:scale], "
                  "contiguous:PATH, channels_last:PATH, pad:PATH:DIMS:multiple=N|buckets=A,B,...[:value=V]"
                  "[:side=right|left][:with=MASK], fn:FILE.py:NAME. Without it: the chain the catalog suggests.")
@json_option(help="Also write the document (DIR/whatif.json) to this path.")
@corpus_option()
@friendly_errors
def whatif(out_dir: str, transforms: tuple[str, ...], json_path: str | None, corpus: str | None) -> None:
    """Measure what canonicalising the inputs would save, and whether it changes the answers.

    For each --transform alone, then for the chain of them in the order given, replays the
    analysed corpus with every sample transformed (the analysis's compile options) and prints
    the graphs and frames compiled, the compile seconds, the padding's cost in % of input
    elements, and whether the model's outputs change: each topology's first sample runs eagerly
    as recorded and transformed, an output cut back on each dim where it differs from the
    recorded one by a padding (logits, a KV cache), and the largest difference is shown. A row
    whose outputs differ changes the results. Writes DIR/whatif.json.

    Arguments are named as for --mark-unbacked (images, input_ids, xs[0]); DIMS is 1 or 2,3.
    'cast:images:float32:scale' divides uint8 by 255; 'pad:input_ids:1:multiple=64:with=attention_mask'
    pads the mask with 0 too; 'pad:images:0:buckets=1,2,4,8' buckets the batch; 'fn:canon.py:canonicalise'
    calls canonicalise(args, kwargs), which returns (args, kwargs).

    Without --transform, the catalog's failure kinds choose the chain: dtype mismatches a cast to
    the argument's most common dtype, stride mismatches contiguous, size specializations a padding
    where one can keep the answers (a dim with a mask, the batch); the advice says in words which
    transforms apply and which do not (an edge list cannot be padded without a mask). The report's
    "Fixes at the input" section shows the table.

    \b
    Example:
      guardscope analyze corpus/ --out out/
      guardscope whatif out/ --transform cast:images:float32:scale --transform contiguous:images \\
          --transform pad:images:2,3:multiple=32
      guardscope whatif out/ --transform pad:input_ids:1:multiple=64:with=attention_mask
      guardscope whatif out/                      # the chain the catalog suggests
    """
    from .. import pipeline

    def progress(label: str) -> None:
        click.echo(f"replaying the corpus: {label}...", err=True)

    document = pipeline.whatif(out_dir, transforms, json_path=json_path, progress=progress, corpus=corpus)
    if document["suggested"]:
        click.echo("\n".join(f"advice      {line}" for line in format_advice(document)))
        if not document["rows"]:
            click.echo("advice      the catalog suggests no input transform; give --transform SPEC to measure one")
    if document["rows"]:
        click.echo("\n".join(format_whatif(document)))
    click.echo("wrote       " + ", ".join([str(Path(out_dir) / store.WHATIF), *([json_path] if json_path else []),
                                           str(Path(out_dir) / store.REPORT)]))
