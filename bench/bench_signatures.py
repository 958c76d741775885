"""Production-scale corpora (issue 17): the seed distribution recorded by signature and in full,
analysed; wall time, peak RSS and corpus size against the loading floor measured in the same run.

    python -m bench.bench_signatures                               # 1,000,000 requests, both corpora
    python -m bench.bench_signatures --samples 100000 --full-per-signature 0
    python -m bench.bench_signatures --samples 100000 --no-full     # the signature corpus only
    python -m bench.bench_signatures --no-full                  # the README's lines: <= 64 MiB in full
    python -m bench.bench_signatures --max-full-bytes none --no-full  # first of each in full, unbounded

The requests are ``bench.scale_corpus``'s: the small seed GNN's distribution, whose first 300 are
the committed sample corpus (checked here, tensor by tensor). Two corpora hold the same requests:

* ``signatures``: ``CorpusWriter(keep="signatures", full_per_signature=K, max_full_bytes=B)``
  — the first K requests of each signature in full (while the tensor bytes kept in full stay
  within B: the writer's default, 64 MiB, unless ``--max-full-bytes`` says otherwise), every
  other one as its signature (format 3); with the defaults these are the README's lines;
* ``full``: ``keep="all"`` — every request's tensors (format 2); skipped with ``--no-full``.

Each measurement is a fresh process from the repository root: ``startup`` (``import torch,
guardscope.cli``), ``load`` (read every shard as an analysis does, ``Corpus.load_records``: the floor any
analysis pays) and ``analyze`` (``guardscope analyze`` with its defaults). The catalogs of the two
corpora must agree: the same compile samples, and the same topologies with the same members.

Targets (issue 17, the 2-core CPU machine): signatures — analyze <= 60 s, peak RSS <= 1 GB,
corpus <= 100 MB; full — analyze <= 5 min, peak RSS <= 2 GB (1,000,000 requests).
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import time

if __package__ in (None, ""):  # run as a file: make the repository root importable
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from bench import common
from bench.scale_corpus import bound
from guardscope.corpus.writer import DEFAULT_MAX_FULL_BYTES

TARGETS = {
    "signatures": {"seconds": 60.0, "rss_bytes": 1_000_000_000, "corpus_bytes": 100_000_000},
    "full": {"seconds": 300.0, "rss_bytes": 2_000_000_000, "corpus_bytes": None},
}
STARTUP = "import torch, guardscope.cli"
# Read every shard as an analysis reads it (Corpus.load_records: full samples with their tensors
# built, signature records checked but not materialised).
LOAD = (
    "import sys, guardscope\n"
    "corpus = guardscope.load_corpus(sys.argv[1])\n"
    "count = signature = 0\n"
    "for shard in corpus.manifest.shards:\n"
    "    for item in corpus.load_records(shard):\n"
    "        repeat = getattr(item, 'repeat', None)\n"
    "        count += repeat or 1\n"
    "        signature += repeat or 0\n"
    "print(count, 'samples,', signature, 'recorded as signatures')"
)


def write_corpus(directory: pathlib.Path, samples: int, keep: str, full_per_signature: int,
                 max_full_bytes: int | None = None) -> tuple[float, str]:
    """Write the scale requests into ``directory`` (unless a corpus of that many samples, kept
    that way, is there); returns the seconds writing took (0 when reused) and the writer's
    summary."""
    from bench.scale_corpus import write_scale_corpus

    manifest, summary = directory / "corpus.json", directory / ".writer-summary"
    wanted = 3 if keep == "signatures" else 2
    marker = directory / ".written-with"
    recipe = f"{samples} {keep} {full_per_signature}\n" + (f"max_full_bytes {max_full_bytes}\n" if max_full_bytes else "")
    if manifest.is_file() and marker.is_file() and marker.read_text() == recipe:
        found = common.read_json(manifest)
        if found["samples"] == samples and found["format_version"] == wanted:
            print(f"reusing     {directory} ({samples} samples, keep={keep})")
            return 0.0, summary.read_text() if summary.is_file() else "(not recorded)"
    print(f"writing     {samples} requests into {directory} (keep={keep}, full_per_signature={full_per_signature}) ...",
          flush=True)
    started = time.perf_counter()
    writer = write_scale_corpus(directory, samples=samples, overwrite=True, keep=keep,
                                full_per_signature=full_per_signature, max_full_bytes=max_full_bytes)
    seconds = time.perf_counter() - started
    marker.write_text(recipe)
    summary.write_text(writer.summary())
    print(f"wrote       in {seconds:.1f} s ({samples / seconds:,.0f} requests/s)")
    print(f"writer      {writer.summary()}")
    return seconds, writer.summary()


def check_sample_corpus(corpus: pathlib.Path) -> str:
    """The first 300 requests of ``corpus`` against the committed sample corpus: equal arguments
    for every full sample, an equal signature for every signature sample."""
    import torch

    from guardscope.corpus.reader import load_corpus
    from guardscope.corpus.signatures.signature import signature

    committed = list(load_corpus(common.REPO / "samples" / "gnn" / "corpus"))
    made = load_corpus(corpus)
    full = 0
    for expected in committed:
        sample = made.sample(expected.index)
        if sample.recorded == "full":
            full += 1
            same = list(sample.kwargs) == list(expected.kwargs) and all(
                torch.equal(sample.kwargs[name], expected.kwargs[name]) for name in expected.kwargs)
        else:
            same = signature(sample.args, sample.kwargs) == signature(expected.args, expected.kwargs)
        if not same:
            raise SystemExit(f"{corpus}: sample {expected.index} differs from the committed sample corpus")
    return f"first {len(committed)} requests match the committed sample corpus ({full} of them in full)"


def offer_cost(work: pathlib.Path, calls: int = 2000) -> dict[str, float]:
    """Microseconds ``TrafficRecorder.offer`` takes on the calling thread for one seed request:
    one signature over and over (signature records), then every request a new signature
    (recorded in full: the copy); the writer thread runs meanwhile, as in serving."""
    import shutil

    import torch

    from guardscope.runtime import TrafficRecorder
    from samples.gnn.generate import _request

    generator = torch.Generator().manual_seed(0)
    cases = {
        "repeated_signature_us": [_request(30, 40, 50, 20, generator) for _ in range(calls)],
        "new_signature_us": [_request(20 + n % 40, 20 + n // 40 % 40, 20 + n // 1600, 20, generator)
                             for n in range(calls)],
    }
    costs = {}
    for name, requests in cases.items():
        directory = work / f"offer-{name}"
        shutil.rmtree(directory, ignore_errors=True)
        recorder = TrafficRecorder(directory, model="model.py:build", max_pending=calls + 1)
        started = time.perf_counter()
        for request in requests:
            recorder.offer((), request)
        costs[name] = round((time.perf_counter() - started) / calls * 1e6, 1)
        recorder.close()
    return costs


def topologies(catalog: dict) -> list[tuple]:
    return [(t["compile_id"], tuple(t["samples"])) for t in catalog["topologies"]]


def measure(name: str, corpus: pathlib.Path, work: pathlib.Path, startup: common.ChildRun) -> dict:
    python = sys.executable
    size = common.preread(corpus)
    load = common.run_child([python, "-c", LOAD, str(corpus)], work / f"load-{name}.log",
                            shown=f"python -c <iterate guardscope.load_corpus({str(corpus)!r})>").check()
    print(f"running     guardscope analyze {corpus} ...", flush=True)
    analyze = common.run_analyze(corpus, work / f"analysis-{name}").check()
    out = work / f"analysis-{name}"
    catalog = common.read_json(out / "catalog.json")
    compiling = common.compile_seconds(out)
    replay = common.replay_seconds(out)
    samples = catalog["corpus"]["samples"]
    target = TARGETS[name]
    met = {
        "time": analyze.wall_seconds <= target["seconds"],
        "rss": analyze.max_rss_bytes <= target["rss_bytes"],
        **({"size": size <= target["corpus_bytes"]} if target["corpus_bytes"] else {}),
    }
    print(f"{name:<11} corpus {size / 1e6:,.1f} MB; load {load.wall_seconds:.1f} s wall "
          f"({(load.wall_seconds - startup.wall_seconds) / samples * 1e6:,.0f} us a request after startup; "
          f"{common.load_text(load)}), peak RSS {load.max_rss_bytes / 2**20:,.0f} MiB")
    print(f"{'':<11} analyze {analyze.wall_seconds:.1f} s wall, peak RSS {analyze.max_rss_bytes / 2**20:,.0f} MiB; "
          f"replay {replay:.1f} s of which compiles {compiling:.1f} s; {catalog['summary']['compiles']} compiles at "
          f"{catalog['summary']['compile_samples']}, {catalog['summary']['topologies']} topologies")
    print(f"{'':<11} analyze / load = {analyze.wall_seconds / load.wall_seconds:.2f}x; targets: time "
          f"{analyze.wall_seconds:.0f} s <= {target['seconds']:g} s {'MET' if met['time'] else 'MISSED'}, RSS "
          f"{analyze.max_rss_bytes / 1e9:.2f} GB <= {target['rss_bytes'] / 1e9:g} GB {'MET' if met['rss'] else 'MISSED'}"
          + (f", size {size / 1e6:.0f} MB <= {target['corpus_bytes'] / 1e6:g} MB {'MET' if met['size'] else 'MISSED'}"
             if "size" in met else ""))
    return {
        "corpus": str(corpus),
        "corpus_bytes": size,
        "runs": {"load": load.to_json(), "analyze": analyze.to_json()},
        "replay_seconds": replay,
        "compile_seconds": round(compiling, 3),
        "summary": catalog["summary"],
        "signatures": catalog["corpus"].get("signatures"),
        "targets": {**target, "met": met},
        "_catalog": catalog,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.bench_signatures",
        description="The seed distribution at production scale, recorded by signature and in full: "
        "guardscope analyze's wall time, peak RSS and corpus size against the loading floor.",
    )
    parser.add_argument("--samples", type=int, default=1_000_000, help="requests (default %(default)s)")
    parser.add_argument("--full-per-signature", type=int, default=1,
                        help="requests of each signature recorded in full in the signature corpus "
                        "(0: no tensor data; default %(default)s)")
    parser.add_argument("--max-full-bytes", type=bound, default=DEFAULT_MAX_FULL_BYTES,
                        help="tensor bytes the signature corpus keeps in full, at most, or 'none' for no bound "
                        "(default %(default)s, the writer's)")
    parser.add_argument("--no-full", dest="full", action="store_false",
                        help="skip the full corpus (its 1,000,000 requests take about 7 GB)")
    parser.add_argument("--work", type=pathlib.Path, default=pathlib.Path("/tmp/guardscope-bench/signatures"),
                        help="folder for the corpora, analyses and logs (default %(default)s)")
    parser.add_argument("--json", help="also write the results to this JSON file")
    options = parser.parse_args(argv)
    if options.samples < 300:
        parser.error("--samples must be at least 300 (the committed sample corpus is the first 300)")
    work = options.work.resolve()
    info = common.machine()
    print(f"machine     {common.describe_machine(info)}")
    suffix = f"-{options.max_full_bytes}" if options.max_full_bytes else ""
    corpora = {"signatures": work / f"signatures-{options.samples}-{options.full_per_signature}{suffix}"}
    if options.full:
        corpora["full"] = work / f"full-{options.samples}"
    written, summaries = {}, {}
    for name, directory in corpora.items():
        keep = "signatures" if name == "signatures" else "all"
        written[name], summaries[name] = write_corpus(
            directory, options.samples, keep, options.full_per_signature,
            options.max_full_bytes if name == "signatures" else None)
        common.ensure_model_resolves(directory)
    print(f"check       {check_sample_corpus(corpora['signatures'])}")
    offer = offer_cost(work)
    print(f"offer       TrafficRecorder.offer on the calling thread: {offer['repeated_signature_us']:.0f} us a "
          f"request of a recorded signature, {offer['new_signature_us']:.0f} us a new one (copied)")
    startup = common.run_child([sys.executable, "-c", STARTUP], work / "startup.log",
                               shown=f"python -c {STARTUP!r}").check()
    print(f"startup     {startup.wall_seconds:.1f} s wall (import torch, guardscope.cli)")
    results: dict = {"benchmark": "bench_signatures", "machine": info, "samples": options.samples,
                     "full_per_signature": options.full_per_signature, "max_full_bytes": options.max_full_bytes,
                     "startup": startup.to_json(),
                     "write_seconds": written, "writer_summaries": summaries, "offer": offer, "corpora": {}}
    for name, directory in corpora.items():
        results["corpora"][name] = measure(name, directory, work, startup)
    if options.full:
        first, second = (results["corpora"][name].pop("_catalog") for name in ("signatures", "full"))
        same = (first["summary"]["compile_samples"] == second["summary"]["compile_samples"]
                and topologies(first) == topologies(second))
        print(f"catalogs    compile samples and topologies (with members) {'IDENTICAL' if same else 'DIFFER'}")
        results["catalogs_identical"] = same
    else:
        results["corpora"]["signatures"].pop("_catalog")
    common.write_results(options.json, results)
    return 0 if results.get("catalogs_identical", True) else 1


if __name__ == "__main__":
    sys.exit(main())
