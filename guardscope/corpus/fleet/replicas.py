"""Which replicas a command's corpus arguments name, and whether they are one fleet.

:func:`fleet_of` is the one place that answers "is this a fleet?" (``guardscope analyze``): one
corpus folder is not, and is replayed as it is; several paths, a glob pattern or a folder of corpus
folders are, and their replicas are found (:func:`find_corpora`), opened and checked to be one
fleet (:func:`open_fleet`) before anything is written. ``guardscope merge`` takes whatever it is
given as replicas (:func:`open_fleet`: one corpus too, which a merge compacts); ``analyze
--split-by model`` puts them in groups recorded alike (:func:`split_fleet`). Replicas must have been
recorded from one model, with one set of compile options, Dynamo settings, grad mode and torch
version: anything else is refused naming the replicas that differ.
"""

from __future__ import annotations

import glob
import json
import os
import pathlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ...errors import CorpusError
from ..reader import Corpus, load_corpus
from ..spec import respec
from ..storage.format import MANIFEST_NAME, TRAFFIC_FORMAT_VERSION


@dataclass(frozen=True)
class Replica:
    """One replica's corpus: where it is, as the user named it (``label``), and the replica
    names its rows carry (one for a recorder's corpus)."""

    label: str
    corpus: Corpus


def _folder_of_corpora(path: pathlib.Path) -> bool:
    """A folder that is no corpus itself but holds corpus folders (a fleet's replicas)."""
    return (not (path / MANIFEST_NAME).is_file() and path.is_dir()
            and any((child / MANIFEST_NAME).is_file() for child in path.iterdir()))


def fleet_of(paths: Sequence[str | os.PathLike[str]]) -> list[Replica] | None:
    """The one answer to "is this a fleet?" for a command's corpus arguments: None when ``paths``
    is one corpus folder (replayed as it is); otherwise the replicas they name (more than one path,
    a glob pattern, or one folder of corpus folders: :func:`find_corpora`), opened and checked to
    be one fleet (:func:`open_fleet`, its ``CorpusError`` when they are not)."""
    if len(paths) == 1 and not glob.has_magic(os.fspath(paths[0])) \
            and not _folder_of_corpora(pathlib.Path(paths[0])):
        return None
    return open_fleet(paths)


def find_corpora(paths: Sequence[str | os.PathLike[str]]) -> list[pathlib.Path]:
    """The corpus folders ``paths`` name: each a corpus folder (it holds ``corpus.json``), a
    folder of corpus folders (its subfolders holding one, by name), or a glob pattern of
    either. ``CorpusError`` for a path that is none of these, or a folder named twice."""
    found: list[pathlib.Path] = []
    for given in paths:
        text = os.fspath(given)
        matches = sorted(glob.glob(text)) if glob.has_magic(text) else [text]
        if not matches:
            raise CorpusError(f"{text} matches no folder")
        for match in matches:
            path = pathlib.Path(match)
            if (path / MANIFEST_NAME).is_file():
                found.append(path)
            elif _folder_of_corpora(path):
                found.extend(sorted(child for child in path.iterdir() if (child / MANIFEST_NAME).is_file()))
            elif glob.has_magic(text) and not path.is_dir():
                continue  # a pattern's file matches (a README beside the replica folders)
            else:
                raise CorpusError(f"{match} is neither a corpus folder (no {MANIFEST_NAME}) nor a folder of them")
    seen: dict[pathlib.Path, pathlib.Path] = {}
    for path in found:
        earlier = seen.setdefault(path.resolve(), path)
        if earlier is not path:
            raise CorpusError(f"{path} is named twice ({earlier} and {path}): give each replica once")
    if not found:
        raise CorpusError("no corpus folder given")
    return found


def open_fleet(paths: Sequence[str | os.PathLike[str]]) -> list[Replica]:
    """The replicas ``paths`` name (:func:`find_corpora`), opened and checked to be one fleet:
    traffic logs (format 5) recorded from one model with one set of settings. ``CorpusError``
    naming the replicas that differ, and from which."""
    replicas = _opened(paths)
    check_fleet(replicas)
    return replicas


def _opened(paths: Sequence[str | os.PathLike[str]]) -> list[Replica]:
    """The replicas ``paths`` name, each opened and checked to be a traffic log."""
    replicas = [Replica(str(path), load_corpus(path)) for path in find_corpora(paths)]
    for replica in replicas:
        _check_format(replica)
    return replicas


def _check_format(replica: Replica) -> None:
    version = replica.corpus.manifest.format_version
    if version != TRAFFIC_FORMAT_VERSION:
        raise CorpusError(
            f"replica {replica.label} is a format {version} corpus: its calls carry no timestamps, so they "
            "have no place in the fleet's order; record replicas with guardscope.TrafficRecorder "
            "(a traffic log, format 5)")


def _settings(replica: Replica) -> dict[str, Any]:
    manifest = replica.corpus.manifest
    anchor = pathlib.Path("/")  # the model spec as an absolute path: equal when it names one file
    return {
        "model": f"{respec(manifest.model, replica.corpus.path, anchor)}"
                 + (f" .{manifest.method}" if manifest.method else ""),
        "recorded model": manifest.recorded_model.to_json() if manifest.recorded_model is not None else None,
        "compile options": manifest.compile,
        "Dynamo settings": manifest.dynamo_config or {},
        "grad mode": manifest.grad_mode,
        "torch version": manifest.torch_version,
    }


def check_fleet(replicas: Sequence[Replica]) -> None:
    """``CorpusError`` when the replicas were not recorded alike (model, recorded model print,
    compile options, Dynamo settings, grad mode, torch version), naming which replicas differ
    from which."""
    settings = [_settings(replica) for replica in replicas]
    for what in settings[0]:
        groups: dict[str, list[str]] = {}
        for replica, values in zip(replicas, settings):
            groups.setdefault(json.dumps(values[what], sort_keys=True), []).append(replica.label)
        if len(groups) > 1:
            parts = []
            for text, labels in groups.items():
                shown = text if len(text) <= 80 else text[:77] + "..."
                parts.append(f"{_listed(labels)} {'has' if len(labels) == 1 else 'have'} {shown}")
            raise CorpusError(f"the replicas were recorded with different {what}: {'; '.join(parts)}; "
                              "analyse each group on its own (analyze --split-by model)")


def split_fleet(paths: Sequence[str | os.PathLike[str]]) -> list[tuple[str, list[str], dict[str, Any]]]:
    """The replicas ``paths`` name (:func:`find_corpora`) in groups recorded alike (what
    :func:`check_fleet` requires of one fleet), in order of each group's first replica: per group
    its name (``group-1``, ...), its replicas' folders and the settings that tell it from the
    other groups. ``CorpusError`` as :func:`open_fleet` raises it for a replica that cannot be
    in any fleet (not a traffic log)."""
    replicas = _opened(paths)
    settings = [_settings(replica) for replica in replicas]
    groups: dict[str, list[int]] = {}
    for position, values in enumerate(settings):
        groups.setdefault(json.dumps(values, sort_keys=True), []).append(position)
    differing = [what for what in settings[0] if len({json.dumps(values[what], sort_keys=True)
                                                      for values in settings}) > 1]
    return [(f"group-{number}", [replicas[k].label for k in members],
             {what: settings[members[0]][what] for what in differing})
            for number, members in enumerate(groups.values(), start=1)]


def _listed(labels: list[str], shown: int = 3) -> str:
    if len(labels) <= shown:
        return ", ".join(labels)
    return f"{', '.join(labels[:shown])} and {len(labels) - shown} more"


__all__ = ["Replica", "check_fleet", "find_corpora", "fleet_of", "open_fleet", "split_fleet"]
