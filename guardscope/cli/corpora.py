"""The commands that rewrite corpora: ``convert`` (one corpus as a traffic log) and ``merge`` (many
replicas' traffic logs as one, in fleet order)."""

from __future__ import annotations

import click

from .common import friendly_errors


@click.command()
@click.argument("source", type=click.Path(path_type=str))
@click.argument("destination", type=click.Path(file_okay=False, path_type=str))
@click.option("--overwrite", is_flag=True, help="Replace a corpus DESTINATION already holds (its manifest and "
              "shard files; nothing else).")
@click.option("--replica", default=None, metavar="NAME",
              help="The name the log's rows give the recording process (default: this host:pid).")
@friendly_errors
def convert(source: str, destination: str, overwrite: bool, replica: str | None) -> None:
    """Rewrite the corpus SOURCE as a Parquet traffic log (format 5) in DESTINATION.

    Every sample keeps its index: the full samples stay full (their tensors in data shards beside
    the log), the signature-only ones stay signatures, request tags and the manifest's settings are
    kept, so analysing either gives the same catalog. DuckDB, pandas or pyarrow then read
    DESTINATION/shard-*.parquet as they are (docs/corpus.md, "Traffic logs"). The rows carry no
    timestamps: SOURCE did not record them. SOURCE is not changed.

    \b
    Examples:
      guardscope convert samples/gnn/corpus traffic/
      guardscope convert old-traffic/ traffic/ --replica web-3 --overwrite
      duckdb -c "SELECT digest, sum(count) FROM 'traffic/shard-*.parquet' GROUP BY digest"
    """
    from ..corpus.converting import convert_corpus

    def progress(done: int, total: int) -> None:
        click.echo(f"\rconverted   {done:,} of {total:,} samples", nl=False, err=True)

    writer = convert_corpus(source, destination, overwrite=overwrite, replica=replica, progress=progress)
    click.echo("", err=True)
    click.echo(f"wrote       {destination}: {writer.summary()}")


@click.command()
@click.argument("replicas", nargs=-1, required=True, metavar="REPLICA...", type=click.Path(path_type=str))
@click.option("--out", "destination", required=True, type=click.Path(file_okay=False, path_type=str),
              help="Folder for the merged corpus.")
@click.option("--overwrite", is_flag=True, help="Replace a corpus --out already holds (its manifest and shard files; "
              "nothing else).")
@click.option("--skip-bad-shards", is_flag=True,
              help="Leave out a replica's unreadable shard (its calls are lost, and counted) and merge the rest.")
@click.option("--keep-order", is_flag=True,
              help="Keep every row in fleet order (what 'analyze' merges) instead of one row per signature.")
@friendly_errors
def merge(replicas: tuple[str, ...], destination: str, overwrite: bool, skip_bad_shards: bool,
          keep_order: bool) -> None:
    """Merge several replicas' traffic logs into one compact corpus, to archive or ship.

    Each REPLICA is a corpus folder a TrafficRecorder wrote (a Parquet traffic log), a compact
    merge of other replicas, a folder of such folders, or a quoted glob. The calls are put in
    fleet order (first-seen time, each replica's clock made monotone, then replica name, then
    each replica's own order); then each distinct signature becomes one row at its first call,
    with its calls counted per replica (the 'replicas' column), its first and last time, and one
    call of it kept in full. Its analysis finds the fleet's topologies, counts, replicas and
    times; only the order of repeats and the request tags are gone. --keep-order keeps every row
    instead (a replica's row names it), as 'analyze' merges several replicas; it refuses a
    compact merge, whose order is gone. Replicas recorded from different models or with
    different compile options, Dynamo settings, grad modes or torch versions are refused, naming
    which differ. The replicas are not changed.

    \b
    Examples:
      guardscope merge traffic/web-1 traffic/web-2 --out fleet/
      guardscope merge traffic/ --out fleet/            # every corpus folder in traffic/
      guardscope merge traffic/ --out ordered/ --keep-order
      guardscope merge web-1-day/ web-2-day/ --out fleet-day/   # compact merges, merged again
      guardscope analyze fleet/ --out out/
      duckdb -c "SELECT digest, sum(count) FROM 'fleet/shard-*.parquet' GROUP BY digest"
    """
    from ..corpus.fleet.merge import merge_fleet
    from ..corpus.fleet.replicas import open_fleet

    fleet = open_fleet(replicas)
    merged = merge_fleet(fleet, destination, overwrite=overwrite, skip_bad_shards=skip_bad_shards,
                         compact=not keep_order, progress=lambda line: click.echo(line, err=True))
    for reason in merged.skipped:
        click.secho(f"skipped     {reason}", fg="yellow", err=True)
    if merged.requests_dropped:
        click.secho(f"note        {merged.requests_dropped:,} calls were tagged with a request; a compact merge keeps "
                    "the calls, not the tags (--keep-order keeps them)", fg="yellow", err=True)
    click.echo(f"wrote       {destination}: {merged.summary()}")
    for name, calls in merged.replicas.items():
        click.echo(f"  {name:<24} {calls:,} calls")
