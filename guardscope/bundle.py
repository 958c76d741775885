"""Compile-cache bundles: a plan's compiled graphs, saved once on a machine of the production kind
and loaded by the generated module before it compiles, so set-up reads torch's compile caches
instead of generating code again.

Making one (``guardscope bundle DIR``): :func:`make_bundle` starts
``python -m guardscope.bundle ARTIFACT DIR ...`` in a fresh process whose inductor and triton cache
folders are new and empty (:func:`isolated_caches`). The child compiles the model with the
production backend (inductor unless told otherwise) and the plan's options, runs the plan's warmup
as the generated module does, and saves ``torch.compiler.save_cache_artifacts()`` to
``DIR/<plan>.compile-cache.bin`` with a manifest ``DIR/<plan>.compile-cache.json``: torch version,
device name, backend and compile settings, the plan hash, the bundle's checksum.

Loading one (:func:`load_bundle`, called by ``warmup.py`` / ``unbacked.py``): the manifest must
match this torch, device, backend and settings of the compiled model, and plan; then
``torch.compiler.load_cache_artifacts`` fills the local caches and the warmup compiles from them.
Any mismatch is a :class:`BundleWarning` saying why, and the warmup compiles as usual — a bundle
can make set-up faster, never wrong: torch's caches check their own keys as well.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterator

from . import output
from .isolation import child_environment, run_module

FORMAT = 1
ARTIFACTS = ("warmup", "unbacked")
# The cache folders torch reads these variables for (inductor's FX graph, AOTAutograd, autotune
# and PGO caches all live under TORCHINDUCTOR_CACHE_DIR).
CACHE_VARIABLES = ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR")


class BundleWarning(RuntimeWarning):
    """A compile-cache bundle is present but not used (made for another torch, device, backend,
    compile settings or plan, or unreadable); the warmup compiles without it."""


# --- what a bundle is made for -----------------------------------------------------------------


def plan_hash(plan: dict[str, Any], warmup_dir: str | Path) -> str:
    """sha256 of a generated module's ``PLAN`` (samples, marks, compile options, model) and of its
    warmup corpus's shard checksums: it changes whenever the plan would compile other graphs."""
    from .corpus import read_manifest
    from .errors import GuardscopeError

    try:
        samples: list[str] | None = [shard.sha256 for shard in read_manifest(warmup_dir).shards]
    except GuardscopeError:
        samples = None  # the warmup itself will say what is wrong with the folder
    text = json.dumps({"plan": plan, "samples": samples}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def runtime_facts(plan: dict[str, Any], warmup_dir: str | Path, model: Any, device: Any) -> dict[str, Any]:
    """What this process would compile with: compared with a bundle's manifest."""
    import torch

    from . import torch_compat

    return {
        "torch_version": str(torch.__version__),
        "device_name": torch_compat.cache_device_name(device),
        "compiled": torch_compat.compiled_settings(model),
        "plan_hash": plan_hash(plan, warmup_dir),
    }


def _settings_text(settings: dict[str, Any]) -> str:
    options = settings.get("options") or {}
    return f"dynamic={settings.get('dynamic')!r}" + (f", options {options}" if options else ", no options")


def check_manifest(manifest: Any, facts: dict[str, Any]) -> str | None:
    """Why a bundle with this manifest must not be used here, or None when it fits. Pure.

    Checked in order: format, torch version, device, backend, compile settings, plan — the
    first mismatch is the reason. Settings are compared only where torch describes the compiled
    model (a ``torch.compile``d ``nn.Module``)."""
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        found = manifest.get("format") if isinstance(manifest, dict) else None
        return f"its manifest has format {found!r}, this guardscope reads format {FORMAT}"
    if manifest.get("torch_version") != facts["torch_version"]:
        return f"it was made with torch {manifest.get('torch_version')}, this is torch {facts['torch_version']}"
    if manifest.get("device_name") != facts["device_name"]:
        return f"it was made on {manifest.get('device_name')}, this runs on {facts['device_name']}"
    made, now = manifest.get("compiled") or {}, facts.get("compiled")
    if now is not None and made:
        if made.get("backend") != now.get("backend"):
            return (f"it was made for backend {made.get('backend')!r}, the model is compiled with "
                    f"backend {now.get('backend')!r}")
        if made.get("dynamic") != now.get("dynamic") or (made.get("options") or {}) != (now.get("options") or {}):
            return f"it was made with {_settings_text(made)}, the model is compiled with {_settings_text(now)}"
    if manifest.get("plan_hash") != facts["plan_hash"]:
        return (f"it was made for another plan (plan hash {str(manifest.get('plan_hash'))[:12]}..., this plan "
                f"{facts['plan_hash'][:12]}...): the warmup samples, marks or compile options changed since")
    return None


# --- loading (the generated modules call this) ---------------------------------------------------


@dataclass(frozen=True)
class BundleLoad:
    """What :func:`load_bundle` did: ``loaded``, ``absent`` (no bundle: compile as usual),
    ``incompatible`` or ``unreadable`` (with the reason; a :class:`BundleWarning` was issued)."""

    status: str
    file: str
    reason: str | None = None
    seconds: float = 0.0
    artifacts: dict[str, int] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def manifest_path(bundle_path: str | Path) -> Path:
    path = Path(bundle_path)
    return path.with_name(path.name[: -len(output.BUNDLE_SUFFIX)] + output.BUNDLE_MANIFEST_SUFFIX)


def load_bundle(bundle_path: str | Path, plan: dict[str, Any], warmup_dir: str | Path, *, model: Any,
                device: Any) -> BundleLoad:
    """Load a plan's bundle into this process's compile caches when it was made for this torch,
    device, compiled model and plan; say so on stderr. A bundle that does not fit is a
    :class:`BundleWarning` with the reason, and nothing is loaded. Call before the first compile."""
    from . import torch_compat

    path = Path(bundle_path)
    started = time.perf_counter()
    meta_path = manifest_path(path)
    if not path.is_file() and not meta_path.is_file():
        return BundleLoad("absent", path.name)

    def not_used(status: str, reason: str) -> BundleLoad:
        warnings.warn(
            f"compile-cache bundle {path.name} not used: {reason}. The warmup compiles without it; "
            f"make a new one on this machine with 'guardscope bundle DIR'.",
            BundleWarning,
            stacklevel=3,
        )
        return BundleLoad(status, path.name, reason, round(time.perf_counter() - started, 6))

    try:
        manifest = json.loads(meta_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        return not_used("unreadable", f"its manifest {meta_path.name} cannot be read ({exc})")
    reason = check_manifest(manifest, runtime_facts(plan, warmup_dir, model, device))
    if reason is not None:
        return not_used("incompatible", reason)
    try:
        data = path.read_bytes()
    except OSError as exc:
        return not_used("unreadable", f"it cannot be read ({exc})")
    if hashlib.sha256(data).hexdigest() != manifest.get("sha256"):
        return not_used("unreadable", f"its checksum differs from {meta_path.name}'s (truncated, or replaced "
                        "without its manifest)")
    artifacts = torch_compat.load_compile_cache(data)
    if artifacts is None:
        return not_used("unreadable", "torch could not read its cache artifacts")
    seconds = round(time.perf_counter() - started, 6)
    counts = ", ".join(f"{kind} {count}" for kind, count in artifacts.items())
    print(f"guardscope: loaded compile-cache bundle {path.name} ({counts}; {len(data) / 1e6:.1f} MB, made with "
          f"torch {manifest['torch_version']} on {manifest['device_name']}) in {seconds:.2f} s", file=sys.stderr)
    return BundleLoad("loaded", path.name, None, seconds, artifacts)


# --- cache folders ---------------------------------------------------------------------------------


@contextlib.contextmanager
def isolated_caches() -> Iterator[dict[str, str]]:
    """Environment variables pointing torch's compile caches at new, empty folders (removed on
    exit): a child started with them compiles as a fresh machine would."""
    root = Path(tempfile.mkdtemp(prefix="guardscope-caches-"))
    try:
        env = {}
        for variable in CACHE_VARIABLES:
            folder = root / variable.split("_")[0].lower()
            folder.mkdir()
            env[variable] = str(folder)
        yield env
    finally:
        shutil.rmtree(root, ignore_errors=True)


def cache_dirs_empty() -> bool:
    """True when every cache folder variable is set and names an empty (or missing) folder."""
    for variable in CACHE_VARIABLES:
        value = os.environ.get(variable)
        if not value:
            return False
        folder = Path(value)
        if folder.exists() and any(folder.iterdir()):
            return False
    return True


def read_manifest(out_dir: str | Path, artifact: str) -> dict[str, Any] | None:
    """The manifest of a plan's bundle in ``out_dir``, or None when there is no bundle."""
    path = Path(out_dir) / output.bundle_files(artifact)[1]
    if not path.is_file():
        return None
    return output.read_json(path, f"re-run 'guardscope bundle {out_dir} --artifact {artifact}'")


# --- making one ----------------------------------------------------------------------------------


def make_bundle(out_dir: str | Path, artifact: str, *, backend: str, device: str, timeout: float,
                corpus: str | Path | None = None) -> dict[str, Any]:
    """Compile ``artifact``'s plan in a fresh process with empty caches and write its bundle and
    manifest into ``out_dir``; returns the manifest. Raises :class:`BundleError` when it fails."""
    from .errors import BundleError

    out = Path(out_dir)
    result_path = out / f".bundle-{artifact}.json"
    with isolated_caches() as caches:
        where = ["--corpus", str(Path(corpus).resolve())] if corpus is not None else []
        outcome = run_module("guardscope.bundle", [artifact, str(out), str(result_path), "--backend", backend,
                                                   "--device", device, *where], result_path, timeout=timeout,
                             what="the process", environment=child_environment(caches))
    if outcome.timed_out:
        raise BundleError(f"compiling the {artifact} plan for its bundle took over {timeout:.0f} s; "
                          "raise --timeout")
    if outcome.result is None:
        raise BundleError(f"compiling the {artifact} plan for its bundle failed: {outcome.failure}")
    if "error" in outcome.result:
        raise BundleError(outcome.result["error"])
    return outcome.result


def _make_in_child(out: Path, artifact: str, backend: str, device: str, corpus: Path | None = None) -> dict[str, Any]:
    """Run the plan with the production backend in this (fresh) process and save its caches."""
    import torch

    from . import __version__, torch_compat
    from .pipeline import _load_analysis, production_options
    from .verify import set_up_plan

    if not cache_dirs_empty():
        return {"error": "the compile-cache folders are not empty: start this through 'guardscope bundle', "
                         "which gives the compile new, empty ones"}
    _, catalog, corpus, model = _load_analysis(out, corpus)
    options = production_options(catalog, backend=backend, device=device)
    module, runner, seconds, _ = set_up_plan(artifact, out, model, options, use_bundle=False,
                                             warm_sample=corpus.sample(0) if len(corpus) else None)
    saved = torch_compat.save_compile_cache()
    if saved is None:
        return {"error": f"torch saved no compile-cache artifacts after compiling the {artifact} plan with backend "
                         f"{backend!r}: bundles need a backend with caches (inductor), and inductor's caches on "
                         "(TORCHINDUCTOR_FORCE_DISABLE_CACHES, TORCHINDUCTOR_FX_GRAPH_CACHE=0 turn them off)"}
    data, artifacts = saved
    bundle_name, manifest_name = output.bundle_files(artifact)
    manifest = {
        "format": FORMAT,
        "artifact": artifact,
        "file": bundle_name,
        "bytes": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
        "plan_hash": plan_hash(module.PLAN, module.WARMUP_DIR),
        "torch_version": str(torch.__version__),
        "device": options.device,
        "device_name": torch_compat.cache_device_name(runner.device),
        "compile": {"backend": options.backend, "dynamic": options.dynamic, "fullgraph": options.fullgraph,
                    "mode": options.mode},
        "compiled": torch_compat.compiled_settings(runner.compiled),
        "inference_mode": options.inference_mode,
        "graphs": runner.graphs(),
        "artifacts": artifacts,
        "cache": torch_compat.compile_cache_counters(),
        "compile_seconds": round(seconds, 3),
        "guardscope_version": __version__,
    }
    output.write_bytes(out / bundle_name, data)
    output.write_json(out / manifest_name, manifest)
    return manifest


def child_main(argv: list[str]) -> int:
    import argparse

    from .errors import GuardscopeError

    parser = argparse.ArgumentParser(prog="python -m guardscope.bundle")
    parser.add_argument("artifact", choices=ARTIFACTS)
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("result", type=Path)
    parser.add_argument("--backend", required=True)
    parser.add_argument("--device", required=True)
    parser.add_argument("--corpus", type=Path, default=None)
    arguments = parser.parse_args(argv)
    try:
        result = _make_in_child(arguments.out_dir, arguments.artifact, arguments.backend, arguments.device,
                                arguments.corpus)
    except GuardscopeError as exc:
        result = {"error": str(exc)}
    output.write_json(arguments.result, result)
    return 0


if __name__ == "__main__":
    sys.exit(child_main(sys.argv[1:]))
