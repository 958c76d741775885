"""Compile-cache bundles: a plan's compiled graphs, saved once on a machine of the production kind
and loaded by the generated module before it compiles, so set-up reads torch's compile caches
instead of generating code again.

Making one (``guardscope bundle DIR``, :mod:`guardscope.proving.bundling`) starts
``python -m guardscope.proving.bundling ARTIFACT DIR ...`` in a fresh process whose inductor and
triton cache folders are new and empty. The child compiles the model with the
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

import hashlib
import json
import sys
import time
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from . import store

FORMAT = 1
# The cache folders torch reads these variables for (inductor's FX graph, AOTAutograd, autotune
# and PGO caches all live under TORCHINDUCTOR_CACHE_DIR).


class BundleWarning(RuntimeWarning):
    """A compile-cache bundle is present but not used (made for another torch, device, backend,
    compile settings or plan, or unreadable); the warmup compiles without it."""


# --- what a bundle is made for -----------------------------------------------------------------


def plan_hash(plan: dict[str, Any], warmup_dir: str | Path) -> str:
    """sha256 of a generated module's ``PLAN`` (samples, marks, compile options, model) and of its
    warmup corpus's shard checksums and request tags (which decode steps run on the KV cache an
    earlier one extended: :mod:`guardscope.corpus.chains`): it changes whenever the plan would
    compile other graphs."""
    from .corpus.storage.format import read_manifest
    from .corpus.storage.requests import read_requests
    from .errors import GuardscopeError

    requests = None
    try:
        manifest = read_manifest(warmup_dir)
        samples: list[str] | None = [shard.sha256 for shard in manifest.shards]
        requests = read_requests(Path(warmup_dir), manifest.samples)
    except GuardscopeError:
        samples = None  # the warmup itself will say what is wrong with the folder
    hashed: dict[str, Any] = {"plan": plan, "samples": samples}
    if requests is not None:  # (a warmup without tags hashes as it always did)
        hashed["requests"] = requests.runs
    text = json.dumps(hashed, sort_keys=True, separators=(",", ":"))
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


@dataclass(frozen=True)
class Refusal:
    """Why an artifact beside a generated module is not used: ``incompatible`` or ``unreadable``."""

    status: str
    reason: str


def read_fitting(path: Path, meta_path: Path, misfit: Any) -> tuple[dict[str, Any], bytes] | Refusal:
    """An artifact's manifest and bytes (a bundle, precompiled graphs) when its manifest can be
    read, ``misfit(manifest)`` finds no reason it does not fit here, and the bytes match the
    manifest's checksum; else why not."""
    try:
        manifest = store.read_bundle_manifest_at(meta_path)
    except (OSError, ValueError) as exc:
        return Refusal("unreadable", f"its manifest {meta_path.name} cannot be read ({exc})")
    reason = misfit(manifest)
    if reason is not None:
        return Refusal("incompatible", reason)
    try:
        data = store.read_bundle_at(path)
    except OSError as exc:
        return Refusal("unreadable", f"it cannot be read ({exc})")
    if hashlib.sha256(data).hexdigest() != manifest.get("sha256"):
        return Refusal("unreadable", f"its checksum differs from {meta_path.name}'s (truncated, or replaced "
                       "without its manifest)")
    return manifest, data


def manifest_path(bundle_path: str | Path) -> Path:
    path = Path(bundle_path)
    return path.with_name(path.name[: -len(store.BUNDLE_SUFFIX)] + store.BUNDLE_MANIFEST_SUFFIX)


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

    found = read_fitting(path, meta_path, lambda manifest: check_manifest(
        manifest, runtime_facts(plan, warmup_dir, model, device)))
    if isinstance(found, Refusal):
        return not_used(found.status, found.reason)
    manifest, data = found
    artifacts = torch_compat.load_compile_cache(data)
    if artifacts is None:
        return not_used("unreadable", "torch could not read its cache artifacts")
    seconds = round(time.perf_counter() - started, 6)
    counts = ", ".join(f"{kind} {count}" for kind, count in artifacts.items())
    print(f"guardscope: loaded compile-cache bundle {path.name} ({counts}; {len(data) / 1e6:.1f} MB, made with "
          f"torch {manifest['torch_version']} on {manifest['device_name']}) in {seconds:.2f} s", file=sys.stderr)
    return BundleLoad("loaded", path.name, None, seconds, artifacts)
