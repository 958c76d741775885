"""Analysis of corpora holding signature records (format 3): the same catalog as the all-full
twin of the same requests, signature-only samples that must compile run on a full sample's data
or on materialised tensors, and a model with a graph break says its later frames are approximate."""

from __future__ import annotations

import json
import random
import shutil
from dataclasses import replace

import pytest
import torch

import guardscope
from guardscope.corpus import load_model
from guardscope.corpus.reader import SignatureRecord, load_corpus
from guardscope.corpus.writer import CorpusWriter
from guardscope.corpus.signatures.signature import signature
from guardscope.options import ReplayOptions
from guardscope.replay.session import SIGNATURE_CACHE, ReplaySession

from ..paths import SEED_CORPUS, model_spec
from ..sessions import made_once

SEED_SAMPLES = 90  # the seed corpus's first 90 requests hold 6 of its 11 compiles


def seed_requests() -> list[dict]:
    """The seed's first requests, each followed now and then by re-sends of an earlier request's
    shapes with new data (the same signature), once or twice in a row."""
    rng = random.Random(3)
    made: list[dict] = []
    for sample in list(load_corpus(SEED_CORPUS))[:SEED_SAMPLES]:
        made.append(sample.kwargs)
        if rng.random() < 0.5:
            shapes = rng.choice(made)
            for _ in range(rng.choice([1, 2])):
                made.append({k: torch.randint_like(v, 0, 3) if v.dtype == torch.long else torch.randn_like(v)
                             for k, v in shapes.items()})
    return made


@pytest.fixture(scope="module")
def twins(tmp_path_factory):
    """The same requests recorded in full, by signature, and by signature without any data;
    each analysed."""
    def make(root):
        manifest = load_corpus(SEED_CORPUS).manifest
        spec = str((SEED_CORPUS / manifest.model.split(":")[0]).resolve()) + ":" + manifest.model.split(":")[1]
        requests = seed_requests()
        made = {}
        for name, options in {"full": {}, "signatures": {"keep": "signatures"},
                              "no-data": {"keep": "signatures", "full_per_signature": 0}}.items():
            with CorpusWriter(root / name, model=spec, compile=manifest.compile, **options) as writer:
                for kwargs in requests:
                    writer.add(**kwargs)
            analysis = guardscope.analyze(root / name, root / f"out-{name}", strict=True)
            made[name] = (analysis, json.loads(analysis.catalog_path.read_text()), writer.signature_samples)
        return made

    return made_once(tmp_path_factory, "twins", make)


def without_corpus(catalog: dict) -> dict:
    return {key: value for key, value in catalog.items() if key != "corpus"}


def test_signature_records_give_the_catalog_of_the_full_twin(twins):
    _, full, _ = twins["full"]
    assert len(full["summary"]["compile_samples"]) >= 6  # the seed's 0/1 and duck-sizing compiles
    for name in ("signatures", "no-data"):
        _, catalog, signature_samples = twins[name]
        assert without_corpus(catalog) == without_corpus(full), name
        assert catalog["corpus"]["samples"] == full["corpus"]["samples"]
        assert catalog["corpus"]["signatures"]["samples"] == signature_samples > 0
    assert "signatures" not in full["corpus"]
    assert twins["signatures"][2] < twins["no-data"][2] == full["corpus"]["samples"]


def test_signature_samples_that_compile_say_what_they_ran_on(twins):
    section = twins["signatures"][1]["corpus"]["signatures"]
    # Every signature's first request is full, and its graph accepts the re-sends.
    assert (section["ran_on_full"], section["ran_on_materialised"]) == (0, 0)
    analysis, catalog, _ = twins["no-data"]
    section = catalog["corpus"]["signatures"]
    compiles = catalog["summary"]["compile_samples"]
    assert (section["ran_on_full"], section["ran_on_materialised"]) == (0, len(compiles))
    assert section["materialised_samples"] == compiles and section["later_frames_exact"] is True
    assert any("compiled on zero-filled tensors" in w for w in analysis.warnings)


def test_a_signature_sample_that_compiles_runs_on_its_full_samples_data(tmp_path):
    """A signature whose full sample raised: no graph accepts it, so the re-send runs again, on the
    full sample's data (not on zeros, which pass the model's check)."""
    with CorpusWriter(tmp_path / "c", model=model_spec("Fails"), compile={"dynamic": True, "fullgraph": False},
                      keep="signatures") as writer:
        writer.add(torch.ones(3))
        writer.add(-torch.ones(4))   # raises: no graph accepts its signature
        writer.add(torch.ones(4))    # its signature only: runs on sample 1's data, raises again
    samples = list(load_corpus(tmp_path / "c"))
    assert [(s.recorded, s.data_of) for s in samples] == [("full", None), ("full", None), ("signature", 1)]
    analysis = guardscope.analyze(tmp_path / "c", tmp_path / "out")
    catalog = json.loads(analysis.catalog_path.read_text())
    assert [f["sample"] for f in catalog["failed_samples"]] == [1, 2]
    assert catalog["corpus"]["signatures"]["ran_on_full"] == 1


def test_a_guard_only_replay_checks_each_signature_once():
    corpus = load_corpus(SEED_CORPUS)
    samples = list(corpus)[:40]
    # Then the first 10 requests' signatures, 4 times each, recorded as signatures.
    resent = [replace(samples[n % 10], index=40 + n, signature=signature(samples[n % 10].args, samples[n % 10].kwargs))
              for n in range(40)]
    assert len({s.signature for s in resent}) == 10
    metas = []
    options = ReplayOptions(dynamic=True, fullgraph=True)
    with ReplaySession(corpus_model(), options, on_sample=metas.append, guard_only=True,
                       signature_cache=SIGNATURE_CACHE) as session:
        session.replay(samples + resent)
    assert session.signature_hits == 30  # each signature's first re-send is checked, not the 3 after it
    assert [m.serving for m in metas[40:]] == [metas[n % 10].serving for n in range(40)]
    assert [m.index for m in metas[40:]] == list(range(40, 80))
    assert {m.recorded for m in metas[40:]} == {"signature"} and {m.ran_on for m in metas[40:]} == {None}


def corpus_model():
    return load_model(load_corpus(SEED_CORPUS).manifest.model, SEED_CORPUS)


def test_a_graph_break_model_says_later_frames_are_approximate(tmp_path):
    with CorpusWriter(tmp_path / "c", model=model_spec("DataBranch"), compile={"dynamic": True},
                      keep="signatures") as writer:
        for rows in (4, 4, 4, 6, 6):
            writer.add(torch.randn(rows, 3))
    analysis = guardscope.analyze(tmp_path / "c", tmp_path / "out")
    catalog = json.loads(analysis.catalog_path.read_text())
    assert catalog["summary"]["frames"] > 1
    section = catalog["corpus"]["signatures"]
    # Every sample runs (later frames need data): each re-send ran on its signature's full sample.
    assert section == {"samples": 3, "ran_on_full": 3, "ran_on_materialised": 0, "materialised_samples": [],
                       "later_frames_exact": False}
    (warning,) = [w for w in analysis.warnings if "signature only" in w]
    assert "later frames see values computed from tensor data" in warning
    report = (tmp_path / "out" / "report.html").read_text()
    assert 'id="signature-samples"' in report and "approximate" in report


def test_a_replay_of_records_describes_samples_as_a_replay_of_samples(twins, tmp_path):
    """Signature records checked on their call template's shared arguments get the descriptions
    that the same samples, materialised one by one, get."""
    corpus = load_corpus(twins["no-data"][0].out_dir.parent / "no-data")
    records = [item for shard in corpus.manifest.shards for item in corpus.load_records(shard)]
    assert any(type(r) is SignatureRecord and r.key is not None for r in records)
    described = replayed_both_ways(corpus_model, corpus, records)
    assert described["records"] == described["samples"]


def replayed_both_ways(model, corpus, records) -> dict[str, list]:
    """The descriptions a guard-only replay gives, fed ``records`` and fed the corpus's samples."""
    described = {}
    for name, items in {"records": records, "samples": list(corpus)}.items():
        metas: list = []
        options = ReplayOptions(dynamic=True, fullgraph=True)
        with ReplaySession(model(), options, on_sample=metas.append, guard_only=True,
                           signature_cache=SIGNATURE_CACHE) as session:
            session.replay(items)
        described[name] = metas
    return described


class Stepped(torch.nn.Module):
    """A call with an int and a str keyword: the replay describes its ints as they are."""

    def forward(self, x, y=None, *, steps: int = 1, mode: str = "sum"):
        out = x * steps
        if y is not None:
            out = out + y.sum()
        return out.sum() if mode == "sum" else out.mean()


def test_records_with_int_arguments_are_described_with_their_values(tmp_path):
    calls = [((torch.ones(n, 3),), {"steps": steps, "mode": "sum"}) for n, steps in
             [(4, 1), (5, 1), (5, 1), (6, 2), (7, 2), (4, 1), (8, 3)]]
    calls.append(((torch.ones(3, 3), torch.ones(2)), {"steps": 2, "mode": "mean"}))
    with CorpusWriter(tmp_path / "c", model="tests.x:y", keep="signatures", full_per_signature=0) as writer:
        for args, kwargs in calls:
            writer.add(*args, **kwargs)
    corpus = load_corpus(tmp_path / "c")
    described = replayed_both_ways(Stepped, corpus, corpus.load_records(corpus.manifest.shards[0]))
    assert described["records"] == described["samples"]
    assert described["records"][3].scalars == (("y", "NoneType:None"), ("steps", "int:2"), ("mode", "str:'sum'"))
    assert all(m.serving is not None for m in described["records"])


def test_an_analysis_interrupted_inside_a_record_resumes_to_the_same_catalog(twins, tmp_path, monkeypatch):
    """Records checked over columns are handed on a run of rows at a time, so an interrupt lands
    between rows there: the interrupted runs check record by record (an interrupt inside a
    record), the resumed ones over columns, whose rows are then cut inside a record."""
    from guardscope.replay import session as replay_session

    source = twins["no-data"][0].out_dir.parent / "no-data"
    corpus = load_corpus(source)
    records = [item for shard in corpus.manifest.shards for item in corpus.load_records(shard)]
    inside = next(r for r in records if type(r) is SignatureRecord and r.repeat > 1 and r.first > 40).first + 1
    out = tmp_path / "out"

    def interrupt(done, compiles):
        if done >= inside:
            raise KeyboardInterrupt

    monkeypatch.setattr(replay_session, "COLUMN_CHECKS", False)
    with pytest.raises(KeyboardInterrupt):
        guardscope.analyze(source, out, strict=True, checkpoint_every=0, progress=interrupt)
    checkpoint = json.loads((out / ".guardscope-checkpoint.json").read_text())
    assert checkpoint["next_sample"] == inside
    # The members are streamed to a file beside the checkpoint, not held in it.
    assert "members" not in checkpoint["builder"] and sum(checkpoint["builder"]["member_counts"].values()) == inside
    assert (out / ".guardscope-members.jsonl").stat().st_size == checkpoint["members_bytes"]
    # A version 2 checkpoint (an earlier guardscope's: the members inside it) resumes as well.
    older = tmp_path / "older"
    shutil.copytree(out, older)
    members: dict[str, list[int]] = {}
    for line in (older / ".guardscope-members.jsonl").read_text().splitlines():
        for key, found in json.loads(line).items():
            members.setdefault(key, []).extend(found)
    (older / ".guardscope-members.jsonl").unlink()
    del checkpoint["members_bytes"], checkpoint["builder"]["member_counts"]
    checkpoint.update(version=2)
    checkpoint["builder"]["members"] = [[key, found] for key, found in members.items()]
    (older / ".guardscope-checkpoint.json").write_text(json.dumps(checkpoint))

    def interrupt_again(done, compiles):
        if done >= inside + 5:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):  # its members now go to the file: interrupted again
        guardscope.analyze(source, older, strict=True, checkpoint_every=0, resume=True, progress=interrupt_again)
    assert json.loads((older / ".guardscope-checkpoint.json").read_text())["version"] == 3
    monkeypatch.setattr(replay_session, "COLUMN_CHECKS", True)
    expected = json.loads(twins["no-data"][0].catalog_path.read_text())
    del expected["corpus"]["path"]  # relative to the analysis folder
    for folder in (out, older):
        guardscope.analyze(source, folder, strict=True, checkpoint_every=0, resume=True)
        got = json.loads((folder / "catalog.json").read_text())
        del got["corpus"]["path"]
        assert got == expected


class Layered(torch.nn.Module):
    """Containers as arguments: a list of (key, value) pairs per layer and a dict of options."""

    def forward(self, x, cache, options=None):
        out = x.sum()
        for key, value in cache:
            out = out + key.sum() * value.mean()
        if options is not None and options.get("mask") is not None:
            out = out + options["mask"].sum()
        return out


def test_records_with_containers_are_described_as_their_samples(tmp_path):
    def request(rows, layers, mask):
        cache = [(torch.ones(1, rows, 4), torch.ones(1, rows, 2)) for _ in range(layers)]
        return (torch.ones(rows, 3), cache), {"options": {"mask": torch.ones(rows) if mask else None}}

    calls = [request(rows, layers, mask) for rows, layers, mask in
             [(4, 2, True), (5, 2, True), (5, 2, True), (6, 3, False), (1, 2, True), (7, 3, False), (4, 2, True)]]
    with CorpusWriter(tmp_path / "c", model="tests.x:y", keep="signatures", full_per_signature=0) as writer:
        for args, kwargs in calls:
            writer.add(*args, **kwargs)
    corpus = load_corpus(tmp_path / "c")
    records = corpus.load_records(corpus.manifest.shards[0])
    assert all(record.key is not None for record in records)  # all checked on shared tensors
    described = replayed_both_ways(Layered, corpus, records)
    assert described["records"] == described["samples"]
    assert described["records"][3].lengths == (("cache", 3), ("cache[0]", 2), ("cache[1]", 2), ("cache[2]", 2),
                                              ("options", 1))


@pytest.mark.parametrize("full_per_signature", [1, 0])
def test_signature_samples_run_on_normal_tensors_under_fullgraph_false(tmp_path, full_per_signature):
    """Issue 23 item 5: a signature sample run on its full sample's data (loaded while the replay
    is in inference mode) must not become an inference tensor and invent a recompile."""
    calls = [(4, 50), (1, 1), (2, 7), (1, 1)]
    catalogs = []
    for keep in ("all", "signatures"):
        options = {"full_per_signature": full_per_signature} if keep == "signatures" else {}
        with CorpusWriter(tmp_path / keep, model=model_spec("TextClassifier"), compile={"dynamic": None}, keep=keep,
                          **options) as writer:
            for batch, length in calls:
                writer.add(torch.randint(0, 100, (batch, length)), torch.zeros(batch, length, dtype=torch.bool))
        guardscope.analyze(tmp_path / keep, tmp_path / f"out-{keep}")
        catalogs.append(json.loads((tmp_path / f"out-{keep}" / "catalog.json").read_text()))
    full, signatures = catalogs
    assert [c["sample"] for c in signatures["compiles"]] == [c["sample"] for c in full["compiles"]] == [0, 1, 2]
    assert signatures["summary"]["failures_by_kind"] == full["summary"]["failures_by_kind"] == {"size_mismatch": 3}
    assert signatures["topologies"] == full["topologies"]
