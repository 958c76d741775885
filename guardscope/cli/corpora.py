"""The command that rewrites a corpus: ``convert``."""

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
