"""Issue 38, first step: several replicas' traffic logs analysed as one fleet. The calls of a
model are dealt to four replicas, each recording its share with its own timestamps; ``guardscope
analyze`` given the four folders gives the catalog of one corpus holding the same calls in time
order (compile samples, topologies, members, dimensions: all of it), plus each topology's calls
per replica, which sum to its count, and when it was first and last seen. On the seed GNN and on the text classifier (``dynamic=None``,
torch's default), with repeats of a signature within and across replicas."""

from __future__ import annotations

import json
import random

import pytest
import torch
from click.testing import CliRunner

from guardscope import pipeline
from guardscope.catalog.fleet import instant_text
from guardscope.cli import main
from guardscope.corpus.reader import load_corpus
from guardscope.corpus.writer import CorpusWriter

from ..pages import parse, words
from ..paths import FLEET, SEED_CORPUS as SEED, model_spec

EPOCH = 1_700_000_000_000_000_000


def _calls(name: str) -> tuple[str, dict, list[tuple[tuple, dict]]]:
    if name == "seed":
        corpus = load_corpus(SEED)
        target, attr = corpus.manifest.model.split(":")
        calls = [(sample.args, sample.kwargs) for sample in corpus][:150]
        return f"{(SEED / target).resolve()}:{attr}", dict(corpus.manifest.compile), calls + calls[::3]
    rng = random.Random(5)
    calls = []
    for _ in range(60):
        batch, length = rng.choice([1, 2, 4]), rng.choice([1, 3, 5, 8, 13])
        calls.append(((torch.randint(0, 100, (batch, length)), torch.zeros(batch, length, dtype=torch.bool)), {}))
    return model_spec("TextClassifier"), {"dynamic": None, "fullgraph": True}, calls


def _write(path, spec, compile_options, replica, calls, aggregate=True) -> None:
    """``calls``: (when, args, kwargs), recorded as a TrafficRecorder does (the first call of
    each signature kept in full; with ``aggregate``, a signature's later calls in a flush on one row)."""
    with CorpusWriter(path, model=spec, compile=compile_options, keep="signatures", log="parquet", replica=replica,
                      shard_size=16, aggregate=aggregate, dynamo_config={}, grad_mode="inference_mode") as writer:
        for when, args, kwargs in calls:
            writer.add_snapshot(args, kwargs, when=when)


@pytest.mark.parametrize("name,aggregate", [("seed", False), ("seed", True), ("text_classifier", False),
                                            ("text_classifier", True)])
def test_a_fleet_gives_the_catalog_of_its_calls_in_time_order_with_counts_per_replica(tmp_path, name, aggregate):
    spec, compile_options, calls = _calls(name)
    rng = random.Random(11)
    timed = [(EPOCH + 1000 * position, args, kwargs) for position, (args, kwargs) in enumerate(calls)]
    dealt: dict[int, list] = {k: [] for k in range(4)}
    for entry in timed:
        dealt[rng.randrange(4)].append(entry)
    for k, share in dealt.items():
        _write(tmp_path / "replicas" / f"web-{k}", spec, compile_options, f"web-{k}", share, aggregate)
    # The same calls as one replica recorded them, row by row in time order (every call its index).
    with CorpusWriter(tmp_path / "one", model=spec, compile=compile_options, keep="signatures", log="parquet",
                      replica="one", aggregate=False, dynamo_config={}, grad_mode="inference_mode") as writer:
        for when, args, kwargs in timed:
            writer.add_snapshot(args, kwargs, when=when)

    merged_path = pipeline.fleet_corpus([str(tmp_path / "replicas")], tmp_path / "fleet")
    fleet = json.loads(pipeline.analyze(merged_path, tmp_path / "fleet").catalog_path.read_text())
    alone = json.loads(pipeline.analyze(tmp_path / "one", tmp_path / "alone").catalog_path.read_text())

    assert fleet["replicas"] == {f"web-{k}": len(share) for k, share in dealt.items()}
    for topology in fleet["topologies"]:
        assert sum(topology["replicas"].values()) == topology["count"]
    # When each topology was first and last seen: alone, each call its row, sample k recorded at
    # EPOCH + k us; the fleet's rows (aggregated or not) cover the same calls of each topology.
    for topology in alone["topologies"]:
        assert topology["first_seen"] == instant_text(EPOCH + 1000 * topology["first_sample"])
        assert topology["last_seen"] == instant_text(EPOCH + 1000 * max(topology["samples"]))
    assert ([(t["first_seen"], t["last_seen"]) for t in fleet["topologies"]]
            == [(t["first_seen"], t["last_seen"]) for t in alone["topologies"]])
    without = {k: v for k, v in fleet.items() if k not in ("corpus", "replicas", "replica_compiles")}
    without["topologies"] = [{k: v for k, v in t.items() if k != "replicas"} for t in fleet["topologies"]]
    expected = {k: v for k, v in alone.items() if k != "corpus"}
    if not aggregate:  # every call its own row: the time-ordered concatenation, exactly
        assert without == expected
        return
    # A replica's repeats of a signature within a flush are one row, at the first of them: a
    # repeat's index moves (it never compiles), and the calls it moved past move by one. Topologies,
    # their counts, their graphs and every compile's failures stay.
    def kept(catalog: dict) -> dict:
        return {"topologies": [(t["graphs"], t["count"], t["facts"]) for t in catalog["topologies"]],
                "failures": [(c["compile_id"], c["failures"]) for c in catalog["compiles"]],
                "dimensions": catalog["dimensions"], "compiles": catalog["summary"]["compiles"]}

    assert kept(fleet) == kept(alone)
    assert fleet["production"]["failed_share"] == alone["production"]["failed_share"]


def test_the_analyze_command_merges_a_folder_of_replicas_and_says_so(tmp_path):
    spec, compile_options, calls = _calls("text_classifier")
    for k in range(2):
        _write(tmp_path / "traffic" / f"r{k}", spec, compile_options, f"r{k}",
               [(EPOCH + n, *calls[n]) for n in range(k, len(calls), 2)])
    result = CliRunner().invoke(main, ["analyze", str(tmp_path / "traffic" / "r*"), "--out", str(tmp_path / "out"),
                                       "-q"])
    assert result.exit_code == 0, result.output
    assert "merged      60 calls of 2 replicas in" in result.output
    catalog = json.loads((tmp_path / "out" / "catalog.json").read_text())
    assert catalog["corpus"]["path"] == "fleet-corpus" and catalog["replicas"] == {"r0": 30, "r1": 30}
    # The report's fleet view: each replica's calls, and each topology's calls per replica.
    fleet = parse((tmp_path / "out" / "report.html").read_text()).find("section", id="fleet")
    text = words(fleet)
    assert "merged the traffic of 2 replicas in fleet order" in text
    cells = [[words(cell) for cell in row.find_all("td")] for row in fleet.find_all("tr")]
    for topology in catalog["topologies"]:
        seen = topology["replicas"]
        label = f"T{topology['id']}" + (f" only {next(iter(seen))}" if len(seen) == 1 else "")
        when = [topology[key].replace("T", " ")[:23] for key in ("first_seen", "last_seen")]
        assert [label, str(topology["count"]), str(len(seen)), *when,
                *(str(seen[name]) if name in seen else "·" for name in ("r0", "r1"))] in cells
    # A second run without --force is refused before anything is merged again.
    again = CliRunner().invoke(main, ["analyze", str(tmp_path / "traffic"), "--out", str(tmp_path / "out"), "-q"])
    assert again.exit_code == 2 and "already holds an analysis" in again.output

    # Issue 51, item 4: what each replica's own process compiles (its first call's graph
    # included) is what that replica's traffic analysed alone compiles; the fleet compiles their
    # sum, more than the union this one analysis compiled.
    alone = {name: json.loads(pipeline.analyze(tmp_path / "traffic" / name, tmp_path / f"alone-{name}")
                              .catalog_path.read_text())["summary"]["compiles"] for name in ("r0", "r1")}
    union = catalog["summary"]["compiles"]
    assert catalog["replica_compiles"] == alone and sum(alone.values()) > union
    line = (f"  replicas  each replica's own process compiles r0 {alone['r0']}, r1 {alone['r1']} graphs, its first "
            f"call's included: {sum(alone.values())} in the fleet against the union's {union}")
    assert line in result.output.splitlines()
    assert f"compiles    {union} at samples" in result.output and "(the fleet's union, in one process)" in result.output
    assert ["r0", "30", "50.0 %", str(alone["r0"])] in cells and ["r1", "30", "50.0 %", str(alone["r1"])] in cells
    assert (f"{sum(alone.values())} graphs in the fleet in all, where this analysis, one process meeting every "
            f"replica's calls, compiled their union of {union}") in text


def test_the_shipped_fleet_is_the_seed_dealt_to_four_replicas_and_analyses_as_the_seed(tmp_path, seed_analysis,
                                                                                      shipped_fleet):
    import pyarrow.parquet as pq

    from samples.fleet.generate import generate

    for path in generate(tmp_path / "fleet"):  # the shipped replicas are what the script writes
        shipped = sorted((FLEET / path.name).glob("shard-*.parquet"))
        assert [p.name for p in shipped] == sorted(p.name for p in path.glob("shard-*.parquet"))
        for file in shipped:
            assert pq.read_table(file).equals(pq.read_table(path / file.name)), file
    # The session's analyses of both (the seed's strict: the seed has no failing sample to refuse).
    seed = json.loads(seed_analysis.catalog_path.read_text())
    fleet = json.loads((shipped_fleet[1] / "catalog.json").read_text())
    assert sum(fleet["replicas"].values()) == 300 and set(fleet["replicas"]) == {f"web-{k}" for k in range(4)}
    base = min(pq.read_table(path, columns=["first_seen"]).column("first_seen").cast("int64").to_numpy().min()
               for path in FLEET.glob("*/shard-*.parquet"))
    for topology in fleet["topologies"]:
        assert sum(topology.pop("replicas").values()) == topology["count"]
        # Request k was stamped k ms after the first.
        assert topology.pop("first_seen") == instant_text(int(base) + 1_000_000 * topology["first_sample"])
        assert topology.pop("last_seen") == instant_text(int(base) + 1_000_000 * max(topology["samples"]))
    for catalog in (seed, fleet):
        catalog.pop("corpus"), catalog.pop("replicas", None), catalog.pop("model")  # model: relative to each folder
        catalog.pop("replica_compiles", None)  # each replica's own process: the seed is one
    assert fleet == seed  # the fleet's order is the seed's: every compile, topology and member the same


def test_split_by_model_analyses_each_group_of_replicas_recorded_alike(tmp_path):
    """Replicas of two model versions (here: two compile settings, as a rollout changes them) are
    refused as one fleet, naming the groups; ``--split-by model`` analyses each group alike into
    its own folder, each the analysis of its replicas alone."""
    spec, compile_options, calls = _calls("text_classifier")
    settings = [compile_options, compile_options, {**compile_options, "dynamic": False}]
    for k, options in enumerate(settings):
        _write(tmp_path / "traffic" / f"r{k}", spec, options, f"r{k}",
               [(EPOCH + n, *calls[n]) for n in range(k, len(calls), 3)])
    refused = CliRunner().invoke(main, ["analyze", str(tmp_path / "traffic"), "--out", str(tmp_path / "one"), "-q"])
    assert refused.exit_code == 2 and "different compile options" in refused.output
    assert "--split-by model" in refused.output and not (tmp_path / "one" / "catalog.json").exists()
    result = CliRunner().invoke(main, ["analyze", str(tmp_path / "traffic"), "--out", str(tmp_path / "out"), "-q",
                                       "--split-by", "model"])
    assert result.exit_code == 0, result.output
    assert f"group       group-1: 2 replicas (compile options {compile_options})" in result.output
    assert "group       group-2: 1 replica (compile options" in result.output
    first = json.loads((tmp_path / "out" / "group-1" / "catalog.json").read_text())
    second = json.loads((tmp_path / "out" / "group-2" / "catalog.json").read_text())
    assert first["replicas"] == {"r0": 20, "r1": 20} and first["compile"]["dynamic"] is None
    assert second["corpus"]["samples"] == 20 and second["compile"]["dynamic"] is False
    # Group 1 is the fleet of its two replicas: what analysing them alone gives.
    alone = CliRunner().invoke(main, ["analyze", str(tmp_path / "traffic" / "r0"), str(tmp_path / "traffic" / "r1"),
                                      "--out", str(tmp_path / "alone"), "-q"])
    assert alone.exit_code == 0, alone.output
    expected = json.loads((tmp_path / "alone" / "catalog.json").read_text())
    assert {k: v for k, v in first.items() if k != "corpus"} == {k: v for k, v in expected.items() if k != "corpus"}
    # A group that fails (here: its folder already holds an analysis) does not stop the others;
    # the command says which failed and exits with its status.
    import shutil

    shutil.copytree(tmp_path / "out" / "group-1", tmp_path / "again" / "group-1")
    again = CliRunner().invoke(main, ["analyze", str(tmp_path / "traffic"), "--out", str(tmp_path / "again"), "-q",
                                      "--split-by", "model"])
    assert again.exit_code == 2 and "already holds an analysis" in again.output
    assert "1 of 2 groups did not analyse cleanly: group-1 (exit 2)" in again.output
    assert (tmp_path / "again" / "group-2" / "catalog.json").read_bytes() == (
        tmp_path / "out" / "group-2" / "catalog.json").read_bytes()


@pytest.mark.parametrize("name", ["seed", "text_classifier"])
def test_a_compact_merge_keeps_every_topology_count_replica_and_time_of_the_fleet(tmp_path, name):
    import pyarrow.parquet as pq

    from guardscope.corpus.fleet.merge import merge_fleet
    from guardscope.corpus.fleet.replicas import open_fleet

    spec, compile_options, calls = _calls(name)
    rng = random.Random(3)
    dealt: dict[int, list] = {k: [] for k in range(4)}
    for position, (args, kwargs) in enumerate(calls):
        dealt[rng.randrange(4)].append((EPOCH + 1000 * position, args, kwargs))
    for k, share in dealt.items():
        _write(tmp_path / "replicas" / f"web-{k}", spec, compile_options, f"web-{k}", share)
    fleet = open_fleet([tmp_path / "replicas"])
    ordered = merge_fleet(fleet, tmp_path / "ordered")
    compact = merge_fleet(fleet, tmp_path / "compact", compact=True)
    assert compact.samples == ordered.samples == len(calls) and compact.replicas == ordered.replicas

    table = pq.read_table(sorted((tmp_path / "compact").glob("shard-*.parquet")))
    digests = table.column("digest").to_pylist()
    kept = table.column("data").is_valid().to_numpy(zero_copy_only=False)
    signature_only = [d for d, full in zip(digests, kept) if not full]
    assert len(signature_only) == len(set(signature_only))  # one row per signature for its other calls
    assert sum(kept) == len({d for d, full in zip(digests, kept) if full})  # one call of each kept in full
    assert compact.rows <= ordered.rows and compact.rows <= 2 * len(set(digests))
    for row in table.to_pylist():  # a row's calls per replica sum to its count
        if row["replicas"] is not None:
            assert sum(entry["count"] for entry in row["replicas"]) == row["count"] and len(row["replicas"]) > 1

    def seen(path, out) -> dict:
        catalog = json.loads(pipeline.analyze(path, tmp_path / out).catalog_path.read_text())
        return {"replicas": catalog["replicas"], "compiles": catalog["summary"]["compiles"],
                "dimensions": catalog["dimensions"],
                "topologies": [(t["graphs"], t["count"], t["facts"], t["replicas"], t["first_seen"], t["last_seen"])
                               for t in catalog["topologies"]]}

    assert seen(tmp_path / "compact", "compact-out") == seen(tmp_path / "ordered", "ordered-out")
    # Its rows' order is gone: an ordered merge (what analyze makes of several folders) refuses it,
    # and merging it with a replica it already holds is two folders for one name.
    ordered_again = CliRunner().invoke(main, ["merge", str(tmp_path / "compact"), "--out", str(tmp_path / "o2"),
                                              "--keep-order"])
    assert ordered_again.exit_code == 2 and "is a compact merge" in ordered_again.output
    again = CliRunner().invoke(main, ["merge", str(tmp_path / "compact"), str(tmp_path / "replicas" / "web-0"),
                                      "--out", str(tmp_path / "twice")])
    assert again.exit_code == 2 and "both name their calls 'web-0'" in again.output
