"""Traffic logs: a corpus's signature records as Apache Parquet (format 5), one file per flush.

A format 3 corpus keeps its signature records as deflated JSON inside torch archives, which only
guardscope can read. A format 5 corpus writes every call a flush holds as one row of a Parquet
file (``shard-NNNNN.parquet``), so DuckDB, pandas, polars or plain pyarrow read a traffic log as it
is; the tensors of the calls kept in full stay in the safe shard format, in a companion
``shard-NNNNN.pt`` that the row names by position (``data``).

One row per record, in recorded order (the columns, as :data:`SCHEMA` declares them):

==============  =======================  ====================================================
column          type                     meaning
==============  =======================  ====================================================
``first``       int64                    index of the record's first sample
``count``       int64                    samples (calls) it stands for
``first_seen``  timestamp[ns, UTC]       when the first of them was recorded (null: unknown)
``last_seen``   timestamp[ns, UTC]       when the last of them was recorded (null: unknown)
``replica``     string                   the process that recorded them (``host:pid``)
``digest``      string                   the signature's digest (16 hex digits)
``template``    string                   the call template's digest, or null (see below)
``sizes``       list<list<int64>>        each tensor's sizes, in argument order
``strides``     list<list<int64>>        each tensor's strides
``offsets``     list<int64>              each tensor's storage offset
``dtypes``      list<string>             each tensor's dtype (``"float32"``)
``ints``        list<int64>              each int argument's value, in argument order
``full``        int64                    index of the sample of this signature kept in full
``data``        int64                    this row's position in the companion data shard
                                         (null: a signature-only record)
``signature``   string                   the signature's JSON text, for a row with no template
``replicas``    list<struct<name:        only in a compact merge (``guardscope merge``), and
                string, count: int64>>   optional: the row's calls per replica, by name
                                         (null: all of them ``replica``'s)
``positions``   list<int64>              version 2: the index of each of the row's calls,
                                         when they are not ``first`` .. ``first + count - 1``
                                         (null: they are)
==============  =======================  ====================================================

Version 2 keeps every call's index: a row's ``first`` is its first call's and a row whose calls
are not consecutive (a signature's repeats gathered in one row, :mod:`guardscope.corpus.traffic_log.window`)
lists them in ``positions``; :func:`read_log` puts each call back in its place, so sample ``i``
is the ``i``-th call. A version 1 log gathered repeats without saying where they came: its
indices are the rows' order (:attr:`Log.call_indices` false where a row holds several calls).

A *call template* (:class:`~guardscope.corpus.signatures.call_template.CallTemplate`) is a call structure
whose signatures differ only in tensor sizes, strides and offsets and in int values; the file's
key-value metadata ``guardscope.templates`` maps each template digest to one signature of it (JSON),
so a row of a template is that signature with the row's ``sizes``, ``strides``, ``offsets`` and
``ints`` put in. A signature no template holds (tensors sharing storage) keeps its whole JSON text
in ``signature``. ``guardscope.format`` in the same metadata says what the file is.

Counting calls of one layout per replica is then one query::

    SELECT replica, digest, sum(count) FROM 'corpus/shard-*.parquet' GROUP BY ALL
"""

from __future__ import annotations

import hashlib
import io
import json
import pathlib
from dataclasses import dataclass
from typing import Any

from ...errors import ShardError
from ...text import message_line
from ..signatures.signature import signature_to_json

LOG_FORMAT = "guardscope-traffic-log"
LOG_VERSION = 2
READ_VERSIONS = (1, 2)  # a version 1 log (no positions) is read as its rows say
_FORMAT_KEY = b"guardscope.format"
_TEMPLATES_KEY = b"guardscope.templates"

# The columns a reader needs, with their pyarrow types (built on first use: pyarrow is imported
# only by the code that reads or writes a log).
COLUMNS = ("first", "count", "first_seen", "last_seen", "replica", "digest", "template", "sizes", "strides",
            "offsets", "dtypes", "ints", "full", "data", "signature")


def _pa() -> Any:
    import pyarrow

    return pyarrow


def schema() -> Any:
    """The log's Arrow schema (:data:`COLUMNS` in order)."""
    pa = _pa()
    stamp = pa.timestamp("ns", tz="UTC")
    return pa.schema([
        ("first", pa.int64()), ("count", pa.int64()), ("first_seen", stamp), ("last_seen", stamp),
        ("replica", pa.string()), ("digest", pa.string()), ("template", pa.string()),
        ("sizes", pa.list_(pa.list_(pa.int64()))), ("strides", pa.list_(pa.list_(pa.int64()))),
        ("offsets", pa.list_(pa.int64())), ("dtypes", pa.list_(pa.string())), ("ints", pa.list_(pa.int64())),
        ("full", pa.int64()), ("data", pa.int64()), ("signature", pa.string()),
    ])


def positions_type() -> Any:
    """The ``positions`` column's type (version 2): ``list<int64>``."""
    return _pa().list_(_pa().int64())


def replicas_type() -> Any:
    """The optional ``replicas`` column's type: ``list<struct<name: string, count: int64>>``."""
    pa = _pa()
    return pa.list_(pa.struct([("name", pa.string()), ("count", pa.int64())]))


@dataclass(frozen=True)
class Layout:
    """What a row holds of one signature: its columns, and its template (digest and one
    signature's JSON text) when it has one."""

    digest: str
    template: str | None
    template_json: str | None
    sizes: list
    strides: list
    offsets: list
    dtypes: list
    ints: list
    signature: str | None  # the JSON text, for a signature with no template
    shape: tuple | None = None  # the template's shape (split_signature), when known


def split_signature(sig: tuple) -> tuple[tuple | None, list, list, list, list, list]:
    """A signature's varying numbers and its call template's shape: ``(shape, sizes, strides,
    offsets, dtypes, ints)``, every tensor's sizes, strides, offset and dtype and every int
    argument's value in walk order, and the signature with those numbers blanked (None when its
    tensors share storage or it holds a value a template cannot hold). Equal shapes are one
    template."""
    sizes: list[list[int]] = []
    strides: list[list[int]] = []
    offsets: list[int] = []
    dtypes: list[str] = []
    ints: list[int] = []
    plain = [True]

    def blank(node: tuple) -> tuple:  # on the writer thread once per new signature: kept lean
        kind = node[0] if node else None
        if kind == "tensor" and len(node) == 11:
            if node[1] != "Tensor" or node[3] is None or node[10] is not None:
                plain[0] = False  # a subclass, another layout, or storage shared with another tensor
            sizes.append(node[2])
            strides.append(node[3] if node[3] is not None else ())
            offsets.append(node[4] if node[4] is not None else 0)
            dtypes.append(node[5])
            return ("tensor", node[1], len(node[2]), *node[5:])
        if kind == "int" and len(node) == 2:
            ints.append(node[1])
            return ("int",)
        if kind == "object":
            plain[0] = False
        return tuple([blank(item) if type(item) is tuple else item for item in node])

    shape = blank(sig)
    return (shape if plain[0] else None), sizes, strides, offsets, dtypes, ints


def template_digest(shape: tuple) -> str:
    """A call template's name in a log: 16 hex digits of the sha256 of its shape."""
    return hashlib.sha256(repr(shape).encode()).hexdigest()[:16]


def signature_text(sig: tuple) -> str:
    """A signature's JSON text as a log holds it (compact)."""
    return json.dumps(signature_to_json(sig), separators=(",", ":"))


def layout_of(sig: tuple, digest: str) -> Layout:
    """A signature's row: its columns (:func:`split_signature`) and its call template's digest
    and one signature's JSON text, or, for a signature no template holds, its own JSON text."""
    shape, sizes, strides, offsets, dtypes, ints = split_signature(sig)
    if shape is None:
        return Layout(digest, None, None, sizes, strides, offsets, dtypes, ints, signature_text(sig))
    return Layout(digest, template_digest(shape), signature_text(sig), sizes, strides, offsets, dtypes, ints, None)


def signature_with(template: tuple, sizes: list, strides: list, offsets: list, ints: list) -> tuple:
    """The signature of ``template`` (one signature of a call template) with these numbers put in,
    tensors and ints in walk order; ``ValueError`` when the numbers do not fit its structure."""
    tensors = iter(zip(sizes, strides, offsets))
    values = iter(ints)

    def fill(node: Any) -> Any:
        if type(node) is not tuple:
            return node
        kind = node[0] if node else None
        if kind == "tensor" and len(node) == 11:
            try:
                shape, stride, offset = next(tensors)
            except StopIteration:
                raise ValueError("fewer tensors than its call template") from None
            if len(shape) != len(node[2]) or len(stride) != len(node[2]):
                raise ValueError(f"a tensor of {len(shape)} sizes where its call template has {len(node[2])}")
            return ("tensor", node[1], tuple(shape), tuple(stride), offset, *node[5:])
        if kind == "int" and len(node) == 2:
            try:
                return ("int", next(values))
            except StopIteration:
                raise ValueError("fewer ints than its call template") from None
        return tuple(fill(item) for item in node)

    filled = fill(template)
    if next(tensors, None) is not None or next(values, None) is not None:
        raise ValueError("more tensors or ints than its call template")
    return filled


def encode_log(rows: list[dict[str, Any]], templates: dict[str, str]) -> bytes:
    """A flush's rows as Parquet bytes (deterministic for the same rows). Each row holds
    ``first``, ``count``, ``first_seen``/``last_seen`` (ns since the epoch, or None),
    ``replica``, ``layout`` (a :class:`Layout`), ``full`` and ``data``; ``templates`` the
    template digest -> signature JSON of those the rows use."""
    pa = _pa()
    layouts = [row["layout"] for row in rows]
    columns = {
        "first": [row["first"] for row in rows],
        "count": [row["count"] for row in rows],
        "first_seen": [row["first_seen"] for row in rows],
        "last_seen": [row["last_seen"] for row in rows],
        "replica": [row["replica"] for row in rows],
        "digest": [layout.digest for layout in layouts],
        "template": [layout.template for layout in layouts],
        "sizes": [layout.sizes for layout in layouts],
        "strides": [layout.strides for layout in layouts],
        "offsets": [layout.offsets for layout in layouts],
        "dtypes": [layout.dtypes for layout in layouts],
        "ints": [layout.ints for layout in layouts],
        "full": [row["full"] for row in rows],
        "data": [row["data"] for row in rows],
        "signature": [layout.signature for layout in layouts],
        "positions": [row.get("positions") for row in rows],
    }
    fields = schema().append(pa.field("positions", positions_type()))
    return encode_table(pa.Table.from_pydict(columns, schema=fields), templates)


def encode_table(table: Any, templates: dict[str, str]) -> bytes:
    """Parquet bytes of a log's rows given as an Arrow table of :func:`schema`'s columns and
    optionally ``replicas`` and ``positions`` (other columns dropped, metadata replaced): what
    :func:`encode_log` writes, for rows taken from other logs (``guardscope merge``).
    ``templates``: digest -> signature JSON text."""
    import pyarrow.parquet as pq

    replicas = "replicas" in table.column_names  # a compact merge's calls per replica
    positions = "positions" in table.column_names and table.column("positions").null_count < table.num_rows
    fields = log_schema(templates, positions=positions, replicas=replicas)
    table = _pa().Table.from_arrays([table.column(name) for name in fields.names], schema=fields)
    buffer = io.BytesIO()
    pq.write_table(table, buffer, **WRITE_OPTIONS)
    return buffer.getvalue()


def log_schema(templates: dict[str, str], *, positions: bool = False, replicas: bool = False) -> Any:
    """A log file's Arrow schema with its metadata (``templates``: digest -> signature JSON text),
    with the optional ``replicas`` and ``positions`` columns when asked."""
    pa = _pa()
    metadata = {_FORMAT_KEY: json.dumps({"format": LOG_FORMAT, "version": LOG_VERSION}).encode(),
                _TEMPLATES_KEY: json.dumps(dict(sorted(templates.items())), separators=(",", ":")).encode()}
    fields = schema()
    if replicas:
        fields = fields.append(pa.field("replicas", replicas_type()))
    if positions:
        fields = fields.append(pa.field("positions", positions_type()))
    return fields.with_metadata(metadata)


# How every log file is written (pyarrow.parquet.write_table's and ParquetWriter's options).
WRITE_OPTIONS = {"compression": "zstd", "use_dictionary": ["replica", "digest", "template", "dtypes", "signature"]}


class Log:
    """A traffic log file as read: its table (columns checked, every call in its place: one row
    per run of consecutive calls of a row) and templates. ``call_indices``: whether a sample's
    index is its call's (false for a version 1 log that gathered a signature's repeats)."""

    def __init__(self, path: pathlib.Path, table: Any, templates: dict[str, list], call_indices: bool = True,
                 file_rows: Any = None) -> None:
        self.path, self.table, self.templates, self.call_indices = path, table, templates, call_indices
        self._file_rows = file_rows  # each row's row in the file, where in_call_order split rows

    def file_row(self, row: int) -> int:
        """Row ``row``'s row in the file (they differ where a row's calls were put back in place)."""
        return row if self._file_rows is None else int(self._file_rows[row])

    def column(self, name: str) -> list:
        return self.table.column(name).to_pylist()

    def numbers(self) -> tuple[list, list, list, list, list, list, list, list]:
        """The rows' tensor numbers and ints as flat lists, read a column at a time (``to_pylist``
        of the nested columns costs ~50 us a row): ``(tensors, size_starts, sizes, stride_starts,
        strides, offsets, int_starts, ints)``; row ``r``'s tensors are ``tensors[r]`` to
        ``tensors[r + 1]``, tensor ``t``'s sizes ``sizes[size_starts[t]:size_starts[t + 1]]``;
        ``ShardError`` when a number is negative or not below 2**62, or the columns disagree."""
        return tuple(array.tolist() for array in self.arrays())  # type: ignore[return-value]

    def arrays(self) -> tuple[Any, ...]:
        """:meth:`numbers` as numpy arrays (checked alike, no Python object per number)."""
        import numpy as np

        def flat(name: str) -> Any:
            column = self.table.column(name).combine_chunks()
            if column.null_count:
                raise ShardError(f"traffic log {self.path}: column {name!r} has nulls; re-record the corpus")
            return column

        sizes, strides, offsets, ints = flat("sizes"), flat("strides"), flat("offsets"), flat("ints")
        tensors = sizes.offsets.to_numpy()
        if not (np.array_equal(tensors, strides.offsets.to_numpy())
                and np.array_equal(tensors, offsets.offsets.to_numpy())):
            raise ShardError(f"traffic log {self.path}: its sizes, strides and offsets hold different numbers of "
                             "tensors; re-record the corpus")
        size_values = sizes.values.values.to_numpy()
        stride_values = strides.values.values.to_numpy()
        offset_values = offsets.values.to_numpy()
        for values in (size_values, stride_values, offset_values):
            if len(values) and (values.min() < 0 or values.max() >= 2**62):
                raise ShardError(f"traffic log {self.path}: a size, stride or offset is outside [0, 2**62); "
                                 "re-record the corpus")
        return (tensors, sizes.values.offsets.to_numpy(), size_values, strides.values.offsets.to_numpy(),
                stride_values, offset_values, ints.offsets.to_numpy(), ints.values.to_numpy())


def read_log(path: pathlib.Path, data: bytes) -> Log:
    """A traffic log from its bytes (its checksum checked already): ``ShardError`` naming the file
    when it is not Parquet, not a guardscope traffic log, or lacks a column or its type."""
    pa = _pa()
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(pa.BufferReader(data))
    except Exception as exc:  # ArrowInvalid and friends: truncated, not Parquet
        raise ShardError(f"traffic log {path} is not a readable Parquet file ({message_line(exc)}); "
                         "restore it or re-record the corpus") from None
    metadata = table.schema.metadata or {}
    try:
        stated = json.loads(metadata.get(_FORMAT_KEY, b"null"))
    except ValueError:
        stated = None
    if not isinstance(stated, dict) or stated.get("format") != LOG_FORMAT:
        raise ShardError(f"traffic log {path} is a Parquet file but not a guardscope traffic log "
                         f"(no {_FORMAT_KEY.decode()} metadata); a corpus lists only the logs its writer made")
    if stated.get("version") not in READ_VERSIONS:
        raise ShardError(f"traffic log {path} is version {stated.get('version')!r} of the log, this guardscope "
                         f"reads versions {', '.join(map(str, READ_VERSIONS))}; upgrade guardscope")
    expected = schema()
    for field in expected:
        if field.name not in table.column_names:
            raise ShardError(f"traffic log {path} has no column {field.name!r}; re-record the corpus")
        if not table.schema.field(field.name).type.equals(field.type):
            raise ShardError(f"traffic log {path}: column {field.name!r} is {table.schema.field(field.name).type}, "
                             f"not {field.type}; re-record the corpus")
    if "replicas" in table.column_names and not table.schema.field("replicas").type.equals(replicas_type()):
        raise ShardError(f"traffic log {path}: column 'replicas' is {table.schema.field('replicas').type}, "
                         f"not {replicas_type()}; re-record the corpus")
    try:
        raw = json.loads(metadata.get(_TEMPLATES_KEY, b"{}"))
        if not isinstance(raw, dict):
            raise ValueError("not an object")
        templates = {str(name): json.loads(text) for name, text in raw.items()}
    except (ValueError, TypeError) as exc:
        raise ShardError(f"traffic log {path}: its {_TEMPLATES_KEY.decode()} metadata is not JSON "
                         f"({message_line(exc)}); re-record the corpus") from None
    for column in ("first", "count"):
        if table.column(column).null_count:
            raise ShardError(f"traffic log {path}: column {column!r} has nulls; re-record the corpus")
    if "positions" in table.column_names:
        if not table.schema.field("positions").type.equals(positions_type()):
            raise ShardError(f"traffic log {path}: column 'positions' is {table.schema.field('positions').type}, "
                             f"not {positions_type()}; re-record the corpus")
        table, file_rows = in_call_order(path, table)
    else:
        file_rows = None
    import pyarrow.compute as pc

    calls = stated.get("version") != 1 or not table.num_rows or int(pc.max(table.column("count")).as_py()) == 1
    return Log(path, table, templates, calls, file_rows)


def in_call_order(path: pathlib.Path, table: Any) -> tuple[Any, Any]:
    """A version 2 log's rows with every call in its place: a row whose calls are not consecutive
    (``positions``) becomes one row per run of consecutive calls, each with its ``first`` and
    ``count``, in the calls' order (``ShardError`` when the rows' calls are not each index from
    the first row's once); ``positions`` dropped. With each row's row in the file (None: the
    same)."""
    import numpy as np
    import pyarrow.compute as pc

    positions = table.column("positions").combine_chunks()
    table = table.drop_columns(["positions"])
    if positions.null_count == len(positions):
        return table, None
    first = table.column("first").to_numpy()
    count = table.column("count").to_numpy()
    total = int(count.sum())
    if (count < 1).any():
        raise ShardError(f"traffic log {path}: a row's 'count' is below 1; re-record the corpus")
    rows = np.repeat(np.arange(len(count)), count)
    starts = np.cumsum(count) - count
    calls = np.repeat(first, count) + (np.arange(total) - np.repeat(starts, count))
    listed = ~pc.is_null(positions).to_numpy(zero_copy_only=False)
    lengths = np.diff(positions.offsets.to_numpy())
    if (lengths[listed] != count[listed]).any():
        raise ShardError(f"traffic log {path}: a row's 'positions' do not hold its 'count' calls; re-record the corpus")
    values = positions.values.to_numpy(zero_copy_only=False)
    slots = np.repeat(listed, count)
    calls[slots] = values[np.repeat(positions.offsets.to_numpy()[:-1][listed], count[listed])
                          + (np.arange(int(count[listed].sum())) - np.repeat(np.cumsum(count[listed]) - count[listed],
                                                                              count[listed]))]
    order = np.argsort(calls, kind="stable")
    base = int(first[0]) if len(first) else 0
    if not np.array_equal(calls[order], np.arange(base, base + total)):
        raise ShardError(_bad_row(path, base, total, first.tolist(), count.tolist(), np.split(calls, starts[1:])))
    runs = rows[order]
    edges = np.flatnonzero(runs[1:] != runs[:-1]) + 1
    begins = np.concatenate([[0], edges])
    taken = table.take(pa_array(runs[begins]))
    taken = taken.set_column(taken.column_names.index("first"), "first", pa_array(base + begins))
    return taken.set_column(taken.column_names.index("count"), "count",
                            pa_array(np.diff(np.concatenate([begins, [total]])))), runs[begins]


def _bad_row(path: pathlib.Path, base: int, total: int, firsts: list, counts: list, calls: list) -> str:
    """Why a version 2 log's rows do not give each call once: the first row whose ``first`` is
    not the first call no row before it holds, or one of whose calls another row holds or lies
    outside the log, named as the row reader names a row."""
    claimed: set[int] = set()
    expected = base
    for row, (first, count, held) in enumerate(zip(firsts, counts, calls)):
        held = held.tolist()
        if first != expected or held[0] != first or any(at in claimed or not base <= at < base + total for at in held):
            return (f"traffic log {path}, row {row} (sample {expected}): 'first' {first} and 'count' {count} do not "
                    "continue the rows before it; re-record the corpus")
        claimed.update(held)
        while expected in claimed:
            expected += 1
    return f"traffic log {path}: its rows' calls are not each index from {base} once; re-record the corpus"


def pa_array(values: Any) -> Any:
    """An int64 Arrow array of numpy ``values``."""
    return _pa().array(values.astype("int64"), type=_pa().int64())
