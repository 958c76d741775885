"""What the command line prints: the analysis summary, the what-if table and advice, the
compile-cache bundle line, the CUDA graphs lines, and the replay's progress line. Pure formatting
of the documents the pipeline returns (no torch, no files); ``guardscope.cli`` wires them to the
commands."""

from __future__ import annotations

from typing import Any

from . import store
from .catalog.stalls import stall_seconds
from .corpus.spec import model_label
from .text import compile_failure_cause, error_line, production_lines


def format_advice(document: dict[str, Any]) -> list[str]:
    """The catalog's advice: the transforms that apply and the ones that do not, in words."""
    return [f"{'applies' if a['applies'] else 'does not apply':<14}  {a['subject']}: {a['text']}"
            for a in document.get("advice", [])]


def format_whatif(document: dict[str, Any]) -> list[str]:
    """The what-if rows as a table (warmup: the samples of the row's warmup, one per graph;
    set-up s: that warmup run through a fresh compile), then what each row's notes say."""
    def outputs(row: dict[str, Any]) -> str:
        diff = "" if row["max_diff"] is None else f" (max diff {row['max_diff']:.3g})"
        if not row["transforms"]:
            return "(the reference)"
        if row["outputs_equal"] is None:
            return "not compared (the samples raise as recorded)"
        return f"equal{diff}" if row["outputs_equal"] else f"DIFFER{diff}: changes the results"

    table = [("transform", "graphs", "frames", "compile s", "warmup", "set-up s", "padding %", "outputs")]
    for row in document["rows"]:
        chain = row["transforms"]
        if len(chain) == 2:
            table.append((f"chained: {chain[0]}", "", "", "", "", "", "", "(as its own row above)"))
        label = f"  + {chain[-1]}" if len(chain) > 1 else row["label"]
        setup = row.get("warmup_setup_seconds")
        table.append((label, str(row["graphs"]), str(row["frames"]), f"{row['compile_seconds']:.2f}",
                      str(row.get("warmup_samples", "")), "" if setup is None else f"{setup:.2f}",
                      f"{row['padding_percent']:.1f}", outputs(row)))
    widths = [max(len(line[i]) for line in table) for i in range(7)]
    lines = ["  ".join([line[0].ljust(widths[0]), *(cell.rjust(w) for cell, w in zip(line[1:7], widths[1:])),
                        line[7]]).rstrip() for line in table]
    for row in document["rows"]:
        for note in row["notes"]:
            lines.append(f"note        {row['label']}: {note}")
        for topology in row["topologies"]:
            if topology["note"]:
                lines.append(f"note        {row['label']}: T{topology['topology']} (sample {topology['sample']}) "
                             f"{topology['note']}")
    return lines


class ReplayProgress:
    """Progress of a replay on stderr: samples done out of the total, compiles so far, and an
    ETA from the pace of samples that compiled nothing (a compile takes seconds, a guard-checked
    sample microseconds to milliseconds: the ETA assumes nothing else compiles). On a terminal one
    line is redrawn (at most 10 times a second); otherwise, in a CI log, a plain line is printed
    at most every ``every`` seconds, and at the end."""

    def __init__(self, total: int, *, stream: Any, quiet: bool = False, every: float = 10.0) -> None:
        import time

        self.total, self.stream, self.every = total, stream, every
        self.quiet = quiet
        self.terminal = stream.isatty()
        self._clock = time.monotonic
        self._last_call = self._clock()
        self._last_shown = float("-inf")
        self._steady_seconds = 0.0
        self._steady = 0
        self._done = self._compiles = 0
        self._shown = False

    def __call__(self, done: int, compiles: int) -> None:
        now = self._clock()
        if done > self._done and compiles == self._compiles and self._done:
            self._steady_seconds += now - self._last_call
            self._steady += done - self._done
        self._last_call = now
        self._done, self._compiles = done, compiles
        if self.quiet or now - self._last_shown < (0.1 if self.terminal else self.every):
            return
        self._last_shown = now
        self._show()

    def line(self) -> str:
        share = f" ({100 * self._done // self.total}%)" if self.total else ""
        eta = "--:--:--"
        if self._steady:
            seconds = int((self.total - self._done) * self._steady_seconds / self._steady)
            eta = f"{seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"
        return (f"replaying {self._done:,}/{self.total:,} samples{share}, {self._compiles} compile"
                f"{'' if self._compiles == 1 else 's'}, ETA {eta}")

    def _show(self) -> None:
        self._shown = True
        if self.terminal:
            self.stream.write("\r" + self.line().ljust(79))
        else:
            self.stream.write(self.line() + "\n")
        self.stream.flush()

    def note(self, text: str) -> None:
        """``text`` on a line of its own (a terminal's redrawn progress line is ended first)."""
        if self.terminal and self._shown:
            self.stream.write("\n")
        self.stream.write(text + "\n")
        self.stream.flush()

    def close(self) -> None:
        """The final line (a terminal's redrawn line is ended)."""
        if self.quiet or not self._shown and self._done == 0:
            return
        self._show()
        if self.terminal:
            self.stream.write("\n")
            self.stream.flush()


def format_probed(probed: dict[str, Any]) -> list[str]:
    """What ``emit-warmup --include-probed`` added to the plans and at what cost (fixes.json's
    ``probed``): each probed topology covered, the warmup's samples and graphs with and without
    them, and the ones ``--exclude-probed-size`` left out. Pure."""
    if not probed.get("included"):
        return []
    added, excluded = probed.get("added", []), probed.get("excluded", [])
    with_, without = probed["warmup"], probed["warmup_without"]
    lines = [f"probed      --include-probed adds {len(added)} topolog{'y' if len(added) == 1 else 'ies'} probe found"
             + (f": the warmup runs {with_['samples']} samples that compile {with_['graphs']} graphs, against "
                f"{without['samples']} samples and {without['graphs']} graphs without them (set-up grows with the "
                "graphs; 'guardscope verify' measures its seconds)" if added else "")]
    for found in added:
        lines.append(f"              T{found['topology']} = {found['id']}: {found['found_by']}"
                     + ("" if found["in_warmup"] else " (served by a graph the warmup compiles anyway)"))
    empty = [found["id"] for found in added if 0 in found.get("sizes", [])]
    if empty:
        lines.append(f"              {', '.join(empty)} set{'s' if len(empty) == 1 else ''} a dimension to 0 (an empty "
                     "batch or sequence): if production never sends one, --exclude-probed-size 0 leaves "
                     f"{'it' if len(empty) == 1 else 'them'} out")
    if excluded:
        lines.append(f"probed      left out {len(excluded)}: "
                     + "; ".join(f"{found['id']} ({found['found_by']}) {found['reason']}" for found in excluded))
    return lines


def reason_lines(reason: str, document: str, indent: str = "          ", most: int = 3) -> str:
    """A result's reason under its line: its first ``most`` lines (a crash's root cause, where it
    was raised and what ended the process: :class:`guardscope.proving.isolation.PythonError`),
    each indented, then where the rest is when there is more."""
    lines = [line.strip() for line in reason.strip().splitlines() if line.strip()]
    shown = "\n".join(f"{indent}{line}" for line in lines[:most])
    return shown + (f" (the whole reason is in {document})" if len(lines) > most else "")


def format_bundle_setup(measured: dict) -> str:
    """One line on a plan's compile-cache bundle from its verification result."""
    line = f"bundle {measured['status'].upper()}"
    without, with_ = measured.get("without") or {}, measured.get("with") or {}
    if without.get("setup_seconds") is not None and with_.get("setup_seconds") is not None:
        cache = with_.get("cache") or {}
        line += (f": set-up {with_['setup_seconds']:.1f} s with {measured['file']} vs {without['setup_seconds']:.1f} s "
                 f"without ({measured['backend']}, {measured['device']}; fresh processes, empty caches; "
                 f"{cache.get('fxgraph_hits', 0)} graphs from the cache, {cache.get('fxgraph_misses', 0)} compiled)")
    if measured.get("reason"):
        line += f"; {measured['reason']}"
    return line


def format_precompiled_setup(measured: dict) -> str:
    """One line on the warmup's precompiled graphs from its verification result."""
    line = f"precompiled {measured['status'].upper()}"
    run = measured.get("run") or {}
    served = (run.get("precompiled") or {}).get("stats") or {}
    if measured["status"] in ("used", "failed") and run.get("setup_seconds") is not None:
        outputs = (run.get("precompiled") or {}).get("outputs") or {}
        line += (f": ready in {run['setup_seconds']:.1f} s from {measured['file']} ({measured['backend']}, "
                 f"{measured['device']}; fresh process, empty caches); replay of {run.get('samples_replayed')} samples "
                 f"through its {measured['graphs']} graphs: {run.get('replay_recompiles')} compiled, "
                 f"{served.get('misses', 0)} missed, outputs "
                 f"{'equal to' if outputs.get('equal') else 'DIFFERENT from'} eager's")
    if measured.get("reason"):
        line += f"; {measured['reason']}"
    return line


def replica_compile_lines(compiled: dict[str, int] | None, union: int, replicas: dict[str, int] | None) -> list[str]:
    """A fleet's compiles as its replicas' processes make them: each replica compiles its own
    first call's graph and each later one its calls need, so the fleet compiles more graphs in
    all than the union one process makes. Pure."""
    if not compiled:
        return [] if not replicas else [
            f"  replicas  each of the {len(replicas)} replicas compiles its own first call's graph and those its "
            "calls need, whatever the others compiled: not counted (--replica-compiles replays each replica alone)"]
    shown = ", ".join(f"{name} {graphs}" for name, graphs in list(compiled.items())[:8])
    more = f", {len(compiled) - 8} more" if len(compiled) > 8 else ""
    return [f"  replicas  each replica's own process compiles {shown}{more} graphs, its first call's included: "
            f"{sum(compiled.values())} in the fleet against the union's {union}"]


def stall_lines(catalog: Any) -> list[str]:
    """What the compiles cost, each figure in its own currency: production's stalls as its
    recorder timed them (``production_compiles``), and the analysis's own compile seconds (its
    backend, this machine), never the one passed off as the other. Pure."""
    lines = []
    recorded = catalog.production_compiles
    stalls = stall_seconds(recorded)
    if stalls:
        slowest_id = max(stalls, key=lambda compile_id: (stalls[compile_id], compile_id))
        sample = next((c.event.sample for c in catalog.compiles if c.event.compile_id == slowest_id), None)
        lines.append(f"stalls      production compiled these graphs in {sum(stalls.values()):.2f} s in all "
                     f"({recorded.get('backend') or 'its backend'}, as its recorder timed them); slowest "
                     f"{stalls[slowest_id]:.2f} s (compile {slowest_id}, sample {sample})")
        if recorded.get("unmatched"):
            lines.append(f"  unmatched {len(recorded['unmatched'])} of the analysis's compiles have no recorded compile "
                         f"(first {', '.join(recorded['unmatched'][:5])}): the recorder started after them")
    elif recorded is not None and len(recorded.get("replicas") or {}) == 1:
        (r,) = recorded["replicas"].values()
        lines.append(f"stalls      production's process compiled {r['compiles']} graphs while serving in {r['seconds']:.2f} s "
                     f"and {r['startup_compiles']} before serving in {r['startup_seconds']:.2f} s "
                     f"({recorded.get('backend') or 'its backend'}, as its recorder timed them; a warmup's graphs "
                     "shift its compile numbers, so none is matched to the analysis's)")
    elif recorded is not None and len(recorded.get("replicas") or {}) > 1:
        shown = ", ".join(f"{name} {r['compiles']} graphs in {r['seconds']:.2f} s"
                          + (f" (+{r['startup_compiles']} before serving)" if r.get("startup_compiles") else "")
                          for name, r in list(recorded["replicas"].items())[:6])
        lines.append(f"stalls      each replica's process, as its recorder timed it ({recorded.get('backend') or 'its backend'}): "
                     f"{shown}{', ...' if len(recorded['replicas']) > 6 else ''}")
    timed = [c for c in catalog.compiles if c.event.seconds is not None]
    if timed:
        slowest = max(timed, key=lambda c: c.event.seconds)
        backend = catalog.compile.get("backend")
        lines.append(
            f"analysis    compiling took {sum(c.event.seconds for c in timed):.2f} s in all, slowest "
            f"{slowest.event.seconds:.2f} s (compile {slowest.event.compile_id}): the analysis's own cost with "
            f"backend={backend} on this machine"
            + ("" if recorded is not None else ", not production's stall (a TrafficRecorder records that)"))
    return lines


def _head_lines(analysis: Any, data: dict[str, Any]) -> list[str]:
    """Production's limits first, then the corpus, the compile settings and the compile counts."""
    catalog = analysis.catalog
    # What production lives through under its recompile limits comes first.
    lines = [f"{'production' if i == 0 else '':<11} {line}"
             for i, line in enumerate(production_lines(catalog.production) if catalog.production else [])]
    lines += [
        f"corpus      {analysis.corpus_dir} ({catalog.samples} samples), model {model_label(catalog.model)}",
        f"compile     backend={catalog.compile['backend']} dynamic={catalog.compile['dynamic']} "
        f"fullgraph={catalog.compile['fullgraph']} device={catalog.compile['device']} "
        f"torch {catalog.torch_version}",
        f"compiles    {data['compiles']} at samples {data['compile_samples']}"
        + (" (the fleet's union, in one process)" if catalog.replicas else ""),
        *replica_compile_lines(catalog.replica_compiles, data["compiles"], catalog.replicas),
        f"recompiles  {data['recompiles']} at samples {data['recompile_samples']}",
    ]
    return lines


def _skipped_frame_lines(catalog: Any) -> list[str]:
    """A compile that failed and stopped Dynamo compiling a frame matters more than anything below."""
    lines = []
    for skipped in catalog.skipped_frames:
        eager = skipped["eager_samples"]
        lines.append(f"compile failed {skipped['compile_id']} of {skipped['frame_label']} at sample {skipped['sample']}: "
                     f"{compile_failure_cause(skipped)}")
        lines.append("  eager     Dynamo stopped compiling the frame: every later call ran it eagerly"
                     + ("" if eager is None else f", {len(eager)} samples, first {eager[:10]}"))
    return lines


def _request_lines(tagged: dict[str, Any] | None) -> list[str]:
    """The tagged requests, the first that compiled, and the chance of an unseen topology."""
    if tagged is None:
        return []
    where = ", ".join(f"{c['compile_id']} at request {c['request']} step {c['step']}" for c in tagged["compiles"][:5])
    lines = [f"requests    {tagged['requests']} tagged ({tagged['calls']} calls); {tagged['compiling']} of them "
             f"compiled" + (f": {where}" + (", ..." if len(tagged["compiles"]) > 5 else "") if where else "")]
    if tagged["unseen_topology_probability"] is not None:
        lines.append(f"  unseen    {tagged['unseen_topology_probability']:.1%} chance the next request brings a new "
                     f"topology ({len(tagged['singleton_topologies'])} topologies seen in one request only; "
                     "counted by requests, not calls)")
    return lines


def _frame_lines(catalog: Any) -> list[str]:
    """The frames graph breaks split the model into, and the first graph breaks; none for one frame."""
    if len(catalog.frames) <= 1:
        return []
    lines = [f"frames      {len(catalog.frames)} (graph breaks split the model; each frame compiles on its own)"]
    for frame in catalog.frames:
        lines.append(f"  {frame['frame']:<4} {frame['graphs']:>3} graphs, {frame['recompiles']:>3} recompiles  "
                     f"{frame['label']}")
    lines.append(f"graph breaks {len(catalog.graph_breaks)}")
    for found in catalog.graph_breaks[:10]:
        lines.append(f"  frame {found['frame']:<3} at {found['location'] or '?'}: {found['reason']}")
    if len(catalog.graph_breaks) > 10:
        lines.append(f"  ... {len(catalog.graph_breaks) - 10} more in catalog.json")
    return lines


def _topology_lines(catalog: Any, data: dict[str, Any]) -> list[str]:
    """The topologies, one line each with its count, first sample, graph and first facts."""
    lines = [f"topologies  {data['topologies']}"]
    for topology in catalog.topologies:
        facts = "; ".join(topology.facts[:4]) + (" ..." if len(topology.facts) > 4 else "")
        later = len(topology.graphs) - 1
        graphs = f"graph {topology.compile_id}" + (f" +{later} in later frames" if later > 0 else "")
        lines.append(
            f"  T{topology.id:<3} {topology.count:>6} samples, first {topology.first_sample:<6} "
            f"{graphs}: {facts}"
        )
    return lines


def _replica_lines(catalog: Any) -> list[str]:
    """A fleet's replicas with their calls, and the topologies only one of them met."""
    if catalog.replicas is None:
        return []
    single = [t for t in catalog.topologies if t.replicas is not None and len(t.replicas) == 1]
    shown = ", ".join(f"{name} {calls:,}" for name, calls in list(catalog.replicas.items())[:6])
    more = f", {len(catalog.replicas) - 6} more" if len(catalog.replicas) > 6 else ""
    return [f"replicas    {len(catalog.replicas)} ({shown}{more} calls); "
            + (f"{len(single)} topologies met by one replica only: "
               + ", ".join(f"T{t.id} ({next(iter(t.replicas))})" for t in single[:8])
               + (", ..." if len(single) > 8 else "") if single else "every topology met by several")]


def _shortfall_lines(catalog: Any) -> list[str]:
    """What the analysis could not cover: failed and unanalysed samples, corrupt shards, unparsed lines."""
    lines = []
    if catalog.failed_samples:
        first = catalog.failed_samples[0]
        lines.append(f"failed      {len(catalog.failed_samples)} samples raised, first sample {first.index}: "
                     f"{error_line(first.error)} (every error, whole, in catalog.json)")
    if catalog.not_analysed:
        from .catalog.caveats import limit_reached

        cause = (f"the replay reached its own recompile limit ({catalog.compile.get('recompile_limit')}) first"
                 if limit_reached(catalog, catalog.compile.get("recompile_limit", 0)) else "no graph accepted them")
        lines.append(f"not analysed {len(catalog.not_analysed)} samples got no compiled graph in the replay "
                     f"({cause}), first {list(catalog.not_analysed[:10])}")
    if catalog.skipped_shards:
        lines.append(f"skipped     {len(catalog.skipped_shards)} corrupt shards: "
                     + ", ".join(s['file'] for s in catalog.skipped_shards))
    if catalog.unparsed:
        lines.append(f"unparsed    {dict(sorted(catalog.unparsed.items()))}")
    return lines


def _replay_line(analysis: Any) -> str:
    """How long the replay took, in which mode and grad mode, and the recompile limit it ran under."""
    catalog = analysis.catalog
    forced = " — CUDA graphs record at run time, so every sample ran" if (catalog.cudagraphs or {}).get("observed") else ""
    seen = (f" to see past production's {catalog.production['recompile_limit']}" if catalog.production else " for it")
    return (f"replay      {analysis.replay_seconds:.1f} s ({catalog.replay_mode} replay{forced}; "
            f"under {catalog.compile.get('grad_mode', 'inference_mode')}; "
            f"Dynamo's recompile limit raised to {catalog.compile.get('recompile_limit')}{seen})")


def _guard_check_lines(checks: dict[str, Any] | None) -> list[str]:
    """How the guards were checked: over columns, or one by one with Dynamo's check."""
    if not checks:
        return []
    line = (f"guards      {checks['samples']:,} signature samples found their graph over columns; "
            f"{checks['calls']:,} checks made one by one with Dynamo's check")
    if checks["reasons"]:
        compile_id, reason = next(iter(checks["reasons"].items()))
        line += (f" ({len(checks['reasons'])} graphs' guards not translatable, e.g. graph {compile_id}: "
                 f"{reason[:80]})")
    return [line]


def format_summary(analysis: Any) -> str:
    catalog = analysis.catalog
    data = catalog.to_json()["summary"]
    lines = _head_lines(analysis, data)
    lines += _skipped_frame_lines(catalog)
    if data["failures_by_kind"]:
        kinds = ", ".join(f"{k} {v}" for k, v in data["failures_by_kind"].items())
        lines.append(f"failures    {kinds}")
    lines += _request_lines(catalog.requests)
    lines += stall_lines(catalog)
    lines += _frame_lines(catalog)
    lines += _topology_lines(catalog, data)
    lines += _replica_lines(catalog)
    lines += _shortfall_lines(catalog)
    if catalog.cudagraphs is not None:
        lines.extend(format_cudagraphs(catalog.cudagraphs))
    lines.append(_replay_line(analysis))
    lines += _guard_check_lines(getattr(analysis, "column_checks", None))
    lines.append(f"wrote       {analysis.catalog_path}, {analysis.timings_path}, "
                 f"{analysis.out_dir / store.REPORT}, {analysis.trace_path}")
    return "\n".join(lines)


def format_cudagraphs(section: dict[str, Any]) -> list[str]:
    """The summary lines of the catalog's ``cudagraphs`` section."""
    lines = []
    expected = section["expected"]
    recorded = section.get("recorded")
    expected_skips = f", {expected['skips']} skips" if expected.get("skips") else ""
    if recorded is not None:
        skips = sum(s["count"] for s in recorded["skips"])
        lines.append(
            f"cudagraphs  {recorded['new_shapes']['count']} new shapes (warm-ups) at "
            f"{len(recorded['new_shapes']['samples'])} samples, {recorded['recordings']['count']} recordings, "
            f"{skips} skips (expected from the shapes: {expected['new_shapes']} new shapes, "
            f"{expected['recordings']} recordings{expected_skips})"
        )
        for skip in recorded["skips"][:5]:
            lines.append(f"  skipped   {skip['count']}x at samples {skip['samples'][:10]}: {skip['reason']}")
    else:
        lines.append(
            f"cudagraphs  expected from the shapes: {expected['new_shapes']} new shapes (warm-ups), "
            f"{expected['recordings']} recordings{expected_skips} (not observed: run --backend inductor --device cuda to see them)"
        )
    if (section.get("settings") or {}).get("skip_dynamic_graphs"):
        from .catalog.buckets import skip_effect

        lines.append("  setting   cudagraph_skip_dynamic_graphs = True. "
                     + skip_effect(section["settings"]["graph_partition"]))
    padding = section["padding"]
    chosen = padding.get("chosen")
    if padding["verdict"] == "pad" and chosen:
        bounds = "; ".join(f"{g['name']} to {chosen['bounds'][g['name']]}" for g in padding["groups"] if g["name"] in chosen["bounds"])
        confirmed = "" if padding["paddable_confirmed"] else " [dims assumed paddable: confirm with --paddable]"
        lines.append(
            f"padding     pad {bounds}: {chosen['shapes']} shapes (at most {chosen['max_per_graph']} per graph) "
            f"for {100 * chosen['padding_waste']:.1f}% more input elements{confirmed}"
        )
    elif padding["verdict"] == "skip_dynamic_graphs":
        lines.append("padding     set torch._inductor.config.triton.cudagraph_skip_dynamic_graphs = True: "
                     + padding["reasons"][-1].split(": ", 1)[-1])
    else:
        lines.append(f"padding     none needed: {padding['reasons'][0]}")
    if padding.get("unknown_paddable"):
        lines.append(f"  unknown   --paddable dims that are not dynamic: {padding['unknown_paddable']}")
    return lines


def format_replicas(replicas: dict[str, dict[str, Any]]) -> str:
    """``verify``'s line for a plan's replicas (a fleet's analysis: :mod:`guardscope.proving.verify_replicas`)."""
    failing = {name: r for name, r in replicas.items() if r["status"] != "passed"}
    if not failing:
        how = ("the fleet's replay compiled nothing" if all(r["from"] == "fleet" for r in replicas.values())
               else "each replayed alone")
        return f"replicas  {len(replicas)}: 0 recompiles on each ({how})"
    parts = []
    for name, r in failing.items():
        first = r["recompile_samples"][0] if r["recompile_samples"] else None
        parts.append(f"{name} {r['recompiles']} recompiles" + (f", first at sample {first}" if first is not None else "")
                     if r["recompiles"] is not None else f"{name} {r['status']}")
    return f"replicas  {len(failing)} of {len(replicas)} would compile: " + "; ".join(parts)
