"""Basalt: an embedded columnar analytical + vector database.

    import basalt
    con = basalt.connect("my.db")            # or basalt.connect() for an in-memory database
    con.sql("CREATE TABLE t (id BIGINT, name TEXT)")
    con.execute("INSERT INTO t VALUES (?, ?)", [1, "Ada"])
    con.sql("SELECT * FROM t").arrow()       # a pyarrow.Table, zero-copy
    con.sql("SELECT * FROM t").fetchall()    # [(1, 'Ada')]

The module follows PEP 249 (DB-API 2.0): ``paramstyle`` is ``qmark`` (``?``); the numeric
style (``:1``) and ``$1`` work too. Connections run in autocommit mode: every statement is its
own transaction until ``begin()`` (or ``BEGIN``), and ``commit()`` / ``rollback()`` end it.
Results cross into Python through the Arrow PyCapsule interface (``__arrow_c_stream__``).
Every engine call releases the GIL; a connection may be used from several threads.
"""

from __future__ import annotations

import datetime as _dt
import json as _json
import os as _os
import threading as _threading
from typing import Any, Callable, Iterable, Iterator, NamedTuple, Optional, Sequence

import numpy as _np
import pyarrow as _pa

from . import _basalt
from ._basalt import (  # noqa: F401  (the PEP 249 exception hierarchy)
    ConflictError,
    DatabaseError,
    DataError,
    Error,
    IntegrityError,
    InterfaceError,
    InternalError,
    NotFoundError,
    NotSupportedError,
    OperationalError,
    ProgrammingError,
    Warning,
)

__version__ = _basalt.__version__

apilevel = "2.0"
threadsafety = 2
paramstyle = "qmark"

__all__ = [
    "connect",
    "Connection",
    "Cursor",
    "Result",
    "Table",
    "TopK",
    "MemoryStore",
    "Subscription",
    "Error",
    "Warning",
    "InterfaceError",
    "DatabaseError",
    "DataError",
    "OperationalError",
    "IntegrityError",
    "InternalError",
    "ProgrammingError",
    "NotSupportedError",
    "ConflictError",
    "NotFoundError",
]


# PEP 249 type objects and constructors.
class _DBAPIType:
    def __init__(self, *prefixes: str) -> None:
        self._prefixes = prefixes

    def __eq__(self, other: object) -> bool:
        return isinstance(other, str) and other.lower().startswith(self._prefixes)

    def __hash__(self) -> int:
        return hash(self._prefixes)


STRING = _DBAPIType("utf8", "largeutf8", "utf8view", "string", "dictionary")
BINARY = _DBAPIType("binary", "largebinary", "binaryview", "fixedsizebinary")
NUMBER = _DBAPIType("int", "uint", "float", "decimal", "boolean")
DATETIME = _DBAPIType("date", "timestamp", "time", "duration", "interval")
ROWID = _DBAPIType("uint64")

Date = _dt.date
Time = _dt.time
Timestamp = _dt.datetime
Binary = bytes


def DateFromTicks(ticks: float) -> _dt.date:
    return _dt.date.fromtimestamp(ticks)


def TimeFromTicks(ticks: float) -> _dt.time:
    return _dt.datetime.fromtimestamp(ticks).time()


def TimestampFromTicks(ticks: float) -> _dt.datetime:
    return _dt.datetime.fromtimestamp(ticks)


def connect(
    path: Optional[str | _os.PathLike] = None, read_only: bool = False, **options: Any
) -> "Connection":
    """Opens the database at ``path`` (created when missing; ``None`` or ``":memory:"``: a
    new in-memory database) and returns a connection to it.

    Connections to the same file in one process share one database handle. Options:
    ``durability`` (``"buffered"``, ``"process_safe"`` (default), ``"power_safe"``),
    ``memory_limit`` (bytes for sorts, joins and aggregations; ``None``: no limit),
    ``lock_timeout`` and ``statement_timeout`` (seconds), ``memtable_flush_rows``,
    ``bulk_insert_rows``, ``auto_compact``.
    """
    p = None if path is None else _os.fspath(path)
    return Connection(_basalt.open(p, read_only, options or None))


def _arrow_type_name(t: str) -> str:
    return t.lower().replace("(", " ").split(" ")[0]


def _description(columns: Sequence[tuple]) -> list[tuple]:
    return [(name, _arrow_type_name(t), None, None, None, None, nullable) for name, t, nullable in columns]


class Result:
    """The result of one statement: its rows (as Arrow, pandas, polars or tuples) or, for a
    write, the number of rows it changed (``rowcount``)."""

    def __init__(self, native: "_basalt.NativeResult") -> None:
        self._native = native

    def __arrow_c_stream__(self, requested_schema: Any = None) -> Any:
        return self._native.__arrow_c_stream__(requested_schema)

    def arrow(self) -> _pa.Table:
        """The whole result as a ``pyarrow.Table`` (the engine's buffers, not a copy)."""
        return _pa.table(self._native)

    def fetch_arrow_table(self) -> _pa.Table:
        """The same as :meth:`arrow`."""
        return self.arrow()

    def fetch_arrow_reader(self) -> _pa.RecordBatchReader:
        """The result as a ``pyarrow.RecordBatchReader``."""
        return _pa.RecordBatchReader.from_stream(self._native)

    def df(self) -> Any:
        """The result as a pandas ``DataFrame`` (needs pandas)."""
        return self.arrow().to_pandas()

    def pl(self) -> Any:
        """The result as a polars ``DataFrame`` (needs polars)."""
        import polars

        return polars.from_arrow(self.arrow())

    def numpy(self) -> dict:
        """The columns as numpy arrays, by name."""
        t = self.arrow()
        return {name: t.column(name).to_numpy() for name in t.column_names}

    def fetchone(self) -> Optional[tuple]:
        """The next row as a tuple, or ``None``."""
        return self._native.fetchone()

    def fetchmany(self, size: int = 1) -> list[tuple]:
        """Up to ``size`` more rows."""
        return self._native.fetch(size)

    def fetchall(self) -> list[tuple]:
        """Every row not yet fetched."""
        return self._native.fetch(None)

    @property
    def columns(self) -> list[str]:
        """The column names."""
        return [c[0] for c in self._native.columns]

    @property
    def types(self) -> list[str]:
        """The column types, as Arrow writes them."""
        return [c[1] for c in self._native.columns]

    @property
    def description(self) -> Optional[list[tuple]]:
        """PEP 249's description of the columns (``None`` for a write)."""
        if self._native.changed is not None:
            return None
        return _description(self._native.columns)

    @property
    def rowcount(self) -> int:
        """Rows a write changed, or rows a query returned."""
        changed = self._native.changed
        return changed if changed is not None else self._native.num_rows

    def __len__(self) -> int:
        return self._native.num_rows

    def __iter__(self) -> Iterator[tuple]:
        while True:
            row = self._native.fetchone()
            if row is None:
                return
            yield row

    def __repr__(self) -> str:
        if self._native.changed is not None:
            return f"<basalt.Result: {self._native.changed} row(s) changed>"
        t = self.arrow()
        return f"<basalt.Result {t.num_rows} row(s)>\n{t.slice(0, 20).to_string(preview_cols=12)}"


def _to_stream(data: Any, schema: Optional[_pa.Schema] = None) -> Any:
    """Python data as an Arrow stream source: Arrow objects and frames as they are; dicts of
    columns and lists of rows through pyarrow, typed by the table's schema when it exists."""
    mod = type(data).__module__.split(".")[0]
    if mod == "pandas":
        # The index is not data (a frame's own stream would carry a non-default one).
        return _pa.Table.from_pandas(data, preserve_index=False)
    if hasattr(data, "__arrow_c_stream__"):
        return data
    if mod == "polars":
        return data.to_arrow()
    if isinstance(data, dict):
        cols = {}
        for name, values in data.items():
            arr = values
            if isinstance(values, _np.ndarray) and values.ndim == 2:
                flat = _pa.array(_np.ascontiguousarray(values, dtype=_np.float32).ravel())
                arr = _pa.FixedSizeListArray.from_arrays(flat, values.shape[1])
            elif schema is not None and schema.get_field_index(name) >= 0:
                arr = _pa.array(values, type=schema.field(name).type)
            cols[name] = arr
        return _pa.table(cols)
    if isinstance(data, (list, tuple)):
        rows = list(data)
        if not rows:
            return _pa.table({})
        if isinstance(rows[0], dict):
            names = list(rows[0].keys())
        else:
            if schema is None:
                raise ProgrammingError("rows given as tuples need an existing table (or pass dicts)")
            names = [f.name for f in schema]
            rows = [dict(zip(names, r)) for r in rows]
        if schema is not None:
            fields = [schema.field(n) for n in names if schema.get_field_index(n) >= 0]
            return _pa.Table.from_pylist(rows, schema=_pa.schema(fields))
        return _pa.Table.from_pylist(rows)
    raise TypeError(
        f"cannot insert a {type(data).__name__}: pass Arrow data (a pyarrow Table, RecordBatch or "
        "reader), a pandas or polars DataFrame, a dict of columns or a list of rows"
    )


def _floats(v: Any) -> tuple[bytes, int, int]:
    """A vector or a 2-D array of them as float32 bytes, the dimension and the count."""
    a = _np.ascontiguousarray(v, dtype="<f4")
    if a.ndim == 1:
        return a.tobytes(), a.shape[0], 1
    if a.ndim == 2:
        return a.tobytes(), a.shape[1], a.shape[0]
    raise ValueError("a query is a 1-D vector or a 2-D array of vectors")


class TopK(NamedTuple):
    """Search hits, best first: row ids and their distances (or scores)."""

    ids: _np.ndarray
    distances: _np.ndarray


def _hits(pair: tuple[bytes, bytes]) -> TopK:
    return TopK(_np.frombuffer(pair[0], dtype="<u8"), _np.frombuffer(pair[1], dtype="<f4"))


class Table:
    """A table of a connection: inserts, reads by id, vector and full-text search."""

    def __init__(self, con: "Connection", name: str) -> None:
        self._con = con
        self.name = name

    @property
    def schema(self) -> _pa.Schema:
        """The table's Arrow schema."""
        return _pa.table(self._con._native.table_schema(self.name)).schema

    def insert(self, data: Any) -> int:
        """Inserts rows (see :meth:`Connection.insert`); returns how many."""
        return self._con.insert(self.name, data)

    def count(self) -> int:
        """The number of rows (kept by the table: no scan)."""
        return self._con._native.count_rows(self.name)

    def insert_row(self, values: Optional[dict] = None, **columns: Any) -> int:
        """Inserts one row given as ``{column: value}`` (or keyword arguments); columns left
        out take their default or NULL. Returns the new row's ``_id``."""
        return self._con._native.insert_row(self.name, {**(values or {}), **columns})

    def update(self, id: int, values: Optional[dict] = None, **columns: Any) -> bool:
        """Sets the given columns of the row with this ``_id`` (the others keep their
        values); ``False`` when there is no such row."""
        return self._con._native.update_row(self.name, int(id), {**(values or {}), **columns})

    def delete(self, ids: Sequence[int] | int) -> int:
        """Deletes the rows with these ``_id`` values (missing ones ignored), as one
        commit; returns how many were deleted."""
        if isinstance(ids, int):
            ids = [ids]
        return self._con._native.delete_rows(self.name, [int(i) for i in ids])

    def get(self, ids: Sequence[int] | int, columns: Optional[Sequence[str]] = None) -> Result:
        """Rows by ``_id`` (in the order given; missing ids left out)."""
        if isinstance(ids, int):
            ids = [ids]
        cols = None if columns is None else list(columns)
        return Result(self._con._native.get_many(self.name, [int(i) for i in ids], cols))

    def topk(
        self,
        column: str,
        query: Any,
        k: int = 10,
        metric: str = "l2",
        where: Optional[str] = None,
        params: Optional[Sequence[Any]] = None,
    ) -> TopK | list[TopK]:
        """The ``k`` rows whose ``column`` vectors are nearest to ``query`` under ``metric``
        (``l2``, ``l2sq``, ``cosine``, ``dot``), optionally among rows where the SQL condition
        ``where`` holds (with ``?`` bound to ``params``). A 1-D query gives one :class:`TopK`;
        a 2-D array of queries gives a list of them, in order."""
        data, dim, n = _floats(query)
        out = self._con._native.topk(self.name, column, data, dim, k, metric, where, params)
        hits = [_hits(p) for p in out]
        return hits[0] if _np.ndim(query) == 1 else hits

    def create_fts_index(self, columns: Sequence[str] | str, tokenizer: str = "default") -> None:
        """Creates the table's full-text index over ``columns``."""
        cols = [columns] if isinstance(columns, str) else list(columns)
        self._con._native.create_fts_index(self.name, cols, tokenizer)

    def search(self, query: str, k: Optional[int] = 10, column: Optional[str] = None) -> TopK:
        """BM25 full-text search: ids and scores, best first."""
        return _hits(self._con._native.search_text(self.name, query, k, column))

    def hybrid_search(
        self,
        text: str,
        column: str,
        vector: Any,
        k: int = 10,
        metric: str = "cosine",
        text_weight: float = 1.0,
        vector_weight: float = 1.0,
        candidates: int = 100,
    ) -> TopK:
        """Full-text and vector search fused by reciprocal rank: ids and fused scores."""
        data, _, n = _floats(vector)
        if n != 1:
            raise ValueError("hybrid search takes one vector")
        return _hits(
            self._con._native.hybrid_search(
                self.name, text, column, data, k, metric, text_weight, vector_weight, candidates
            )
        )

    def __repr__(self) -> str:
        return f"<basalt.Table {self.name}>"


class Cursor:
    """A PEP 249 cursor. Cursors of one connection share its transaction."""

    arraysize = 1

    def __init__(self, con: "Connection") -> None:
        self.connection = con
        self._result: Optional[Result] = None
        self._rowcount = -1
        self._closed = False

    def _check(self) -> None:
        if self._closed:
            raise InterfaceError("the cursor is closed")

    def execute(self, operation: str, parameters: Optional[Sequence[Any]] = None) -> "Cursor":
        """Runs a statement (or a script, without parameters)."""
        self._check()
        self._result = self.connection.sql(operation, parameters)
        self._rowcount = self._result.rowcount if self._result._native.changed is not None else -1
        return self

    def executemany(self, operation: str, seq_of_parameters: Iterable[Sequence[Any]]) -> "Cursor":
        """Runs one statement for each parameter row, all in one transaction."""
        self._check()
        self._result = None
        self._rowcount = self.connection._native.execute_many(operation, list(seq_of_parameters))
        return self

    @property
    def description(self) -> Optional[list[tuple]]:
        return None if self._result is None else self._result.description

    @property
    def rowcount(self) -> int:
        return self._rowcount

    lastrowid = None

    def _rows(self) -> Result:
        self._check()
        if self._result is None or self._result._native.changed is not None:
            raise ProgrammingError("no result set: the last statement returned no rows")
        return self._result

    def fetchone(self) -> Optional[tuple]:
        return self._rows().fetchone()

    def fetchmany(self, size: Optional[int] = None) -> list[tuple]:
        return self._rows().fetchmany(self.arraysize if size is None else size)

    def fetchall(self) -> list[tuple]:
        return self._rows().fetchall()

    def arrow(self) -> _pa.Table:
        return self._rows().arrow()

    fetch_arrow_table = arrow

    def df(self) -> Any:
        return self._rows().df()

    def pl(self) -> Any:
        return self._rows().pl()

    def setinputsizes(self, sizes: Any) -> None:
        pass

    def setoutputsize(self, size: Any, column: Any = None) -> None:
        pass

    def close(self) -> None:
        self._closed = True
        self._result = None

    def __iter__(self) -> Iterator[tuple]:
        return iter(self._rows())

    def __enter__(self) -> "Cursor":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class Connection:
    """A connection to a Basalt database (see :func:`connect`)."""

    # PEP 249's optional extension: the exceptions as attributes of the connection.
    Error = Error
    Warning = Warning
    InterfaceError = InterfaceError
    DatabaseError = DatabaseError
    DataError = DataError
    OperationalError = OperationalError
    IntegrityError = IntegrityError
    InternalError = InternalError
    ProgrammingError = ProgrammingError
    NotSupportedError = NotSupportedError

    def __init__(self, native: "_basalt.NativeConnection") -> None:
        self._native = native

    def sql(self, query: str, params: Optional[Sequence[Any]] = None) -> Result:
        """Runs SQL and returns its :class:`Result`. Without ``params`` the text may be a
        script of several statements (the result is the last one's)."""
        return Result(self._native.execute(query, params))

    def stream(self, query: str) -> _pa.RecordBatchReader:
        """Runs a query (the last statement of a script) and returns a
        ``pyarrow.RecordBatchReader`` that computes each batch as it is read, so a result
        larger than memory can be processed; the statement timeout covers the reading."""
        return _pa.RecordBatchReader.from_stream(self._native.stream(query))

    def execute(self, query: str, params: Optional[Sequence[Any]] = None) -> Cursor:
        """Runs SQL on a new cursor and returns the cursor (as ``sqlite3`` does)."""
        return self.cursor().execute(query, params)

    def executemany(self, query: str, seq_of_params: Iterable[Sequence[Any]]) -> Cursor:
        """Runs one statement for each parameter row, all in one transaction."""
        return self.cursor().executemany(query, seq_of_params)

    def cursor(self) -> Cursor:
        """A new PEP 249 cursor on this connection."""
        return Cursor(self)

    def begin(self) -> None:
        """Starts a transaction (until :meth:`commit` or :meth:`rollback`)."""
        self._native.begin()

    def commit(self) -> None:
        """Commits the open transaction (nothing when none is open)."""
        self._native.commit()

    def rollback(self) -> None:
        """Rolls the open transaction back (nothing when none is open)."""
        self._native.rollback()

    @property
    def in_transaction(self) -> bool:
        return self._native.in_transaction

    def close(self) -> None:
        """Closes the connection, rolling back an open transaction."""
        self._native.close()

    @property
    def closed(self) -> bool:
        return self._native.closed

    def duplicate(self) -> "Connection":
        """A new connection to the same database, with its own transactions (one per
        thread when threads must not share a transaction)."""
        return Connection(self._native.duplicate())

    def interrupt(self) -> None:
        """Stops the statement running on this connection (call it from another thread)."""
        self._native.interrupt()

    def insert(self, table: str, data: Any) -> int:
        """Inserts ``data`` into ``table`` and returns the number of rows; creates the table
        from the data's schema when it does not exist. ``data``: anything with
        ``__arrow_c_stream__`` (pyarrow tables, batches and readers, polars and pandas frames),
        a pandas or polars DataFrame, a dict of columns (2-D numpy arrays become vector
        columns) or a list of rows (dicts, or tuples in the table's column order). Columns are
        matched by name and cast to the table's types; all rows are written or none."""
        schema = None
        if isinstance(data, (dict, list, tuple)) and table in self._native.tables():
            schema = _pa.table(self._native.table_schema(table)).schema
        return self._native.insert(table, _to_stream(data, schema))

    def register(self, name: str, data: Any) -> None:
        """Makes ``data`` (the same kinds :meth:`insert` takes) a read-only table of this
        connection only, queried in place by SQL (joins with stored tables included) until
        :meth:`unregister` or :meth:`close`. Arrow data is imported without a copy; a stored
        table or view of the same name hides it."""
        self._native.register(name, _to_stream(data))

    def unregister(self, name: str) -> bool:
        """Removes a registration; ``False`` when ``name`` was not registered."""
        return self._native.unregister(name)

    def create_table(self, name: str, schema: _pa.Schema | Any) -> Table:
        """Creates a table from a pyarrow schema (or the schema of Arrow data)."""
        if isinstance(schema, _pa.Schema):
            schema = schema.empty_table()
        self._native.create_table(name, _to_stream(schema))
        return Table(self, name)

    def table(self, name: str) -> Table:
        """A handle on a table."""
        if name not in self._native.tables():
            raise ProgrammingError(f"no table '{name}'")
        return Table(self, name)

    def tables(self) -> list[str]:
        """The database's tables."""
        return self._native.tables()

    def flush(self) -> None:
        """Writes in-memory rows to segment files and empties the write-ahead log."""
        self._native.flush()

    def checkpoint(self, name: str) -> None:
        """Saves a named checkpoint of the whole database."""
        self._native.checkpoint(name)

    def restore(self, name: str) -> None:
        """Restores the whole database to a named checkpoint."""
        self._native.restore(name)

    def checkpoints(self) -> list[str]:
        return self._native.checkpoints()

    def memory(
        self,
        name: str = "memory",
        model: Optional[str] = None,
        dim: int = 256,
        embedder: Callable[[list[str]], Any] | str | None = "hash",
        dedupe_exact: bool = True,
        dedupe_near: Optional[float] = None,
        strict_namespaces: bool = False,
        max_text_bytes: Optional[int] = None,
        max_metadata_bytes: Optional[int] = None,
    ) -> "MemoryStore":
        """Opens (creating on first use) the agent-memory store ``name``. ``embedder``:
        ``"hash"`` (Basalt's offline hashing embedder, model ``basalt-hash-v1``), a function
        ``f(texts) -> vectors`` of dimension ``dim`` (name its ``model``), or ``None`` (every
        write and recall brings its own vector)."""
        if model is None:
            model = "basalt-hash-v1" if embedder == "hash" else getattr(embedder, "__name__", "python")
        native = _basalt.open_memory(
            self._native,
            name,
            model,
            dim,
            embedder,
            dedupe_exact,
            dedupe_near,
            strict_namespaces,
            max_text_bytes,
            max_metadata_bytes,
        )
        return MemoryStore(native)

    def __enter__(self) -> "Connection":
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if not self.closed:
            if exc_type is None:
                self.commit()
            else:
                self.rollback()
            self.close()

    def __repr__(self) -> str:
        return repr(self._native)


def _vec(v: Any) -> Optional[list[float]]:
    if v is None:
        return None
    return _np.asarray(v, dtype=_np.float32).tolist()


def _js(v: Any) -> Optional[str]:
    return None if v is None else _json.dumps(v)


class MemoryStore:
    """An agent-memory store: namespaced items (text, JSON metadata, vector, optional key)
    with versions, history, TTL, deduplication and recall by vector, keyword or both. Metadata
    filters are dicts: ``{"topic": "x", "n": {"$gt": 3}, "$or": [...]}`` with ``$eq``, ``$ne``,
    ``$gt``, ``$gte``, ``$lt``, ``$lte``, ``$in``, ``$contains``, ``$exists``, ``$and``, ``$or``,
    ``$not``."""

    def __init__(self, native: "_basalt.NativeMemory") -> None:
        self._native = native

    @property
    def name(self) -> str:
        return self._native.name

    def remember(self, namespace: str, text: str, metadata: Any = None, vector: Any = None,
                 ttl: Optional[float] = None) -> int:
        """Stores a memory; returns its id (an exact duplicate returns the existing id)."""
        return self._native.remember(namespace, text, _js(metadata), _vec(vector), ttl)

    def remember_many(self, namespace: str, items: Iterable[Any]) -> list[int | Exception]:
        """Stores several memories in one write. ``items``: texts or dicts with ``text`` and
        optional ``metadata``, ``vector``, ``ttl``. Returns per item its id or its error."""
        rows = []
        for it in items:
            if isinstance(it, str):
                rows.append((it, None, None, None))
            else:
                rows.append((it["text"], _js(it.get("metadata")), _vec(it.get("vector")), it.get("ttl")))
        return self._native.remember_many(namespace, rows)

    def put(self, namespace: str, key: str, text: str, metadata: Any = None, vector: Any = None,
            ttl: Optional[float] = None) -> int:
        """Creates or replaces the memory at ``key``; returns its id."""
        return self._native.put(namespace, key, text, _js(metadata), _vec(vector), ttl)

    def get(self, id: int) -> Optional[dict]:
        return self._native.get(id)

    def get_key(self, namespace: str, key: str) -> Optional[dict]:
        return self._native.get_key(namespace, key)

    def list(self, namespace: str = "", filter: Any = None, limit: int = 100,
             after: Optional[int] = None) -> list[dict]:
        """Live items of ``namespace`` and below by ascending id; ``after``: the last id of the
        previous page."""
        return self._native.list(namespace, _js(filter), limit, after)

    def namespaces(self) -> list[tuple[str, int]]:
        return self._native.namespaces()

    def recall(self, namespace: str, query: str, k: int = 5, vector: Any = None, filter: Any = None,
               min_similarity: Optional[float] = None, mode: str = "hybrid",
               keyword_weight: float = 1.0, vector_weight: float = 1.0) -> list[dict]:
        """The ``k`` best items for ``query`` (``mode``: ``vector``, ``keyword`` or ``hybrid``),
        the filter applied before ranking. Each hit is the item with ``score``."""
        return self._native.recall(namespace, query, k, _vec(vector), _js(filter), min_similarity,
                                   mode, keyword_weight, vector_weight)

    def update(self, id: int, text: Optional[str] = None, metadata: Any = None, vector: Any = None,
               archived: Optional[bool] = None, expected_version: Optional[int] = None) -> int:
        """Changes an item (only if still at ``expected_version`` when given, else
        :class:`ConflictError`); returns its new version."""
        return self._native.update(id, text, _js(metadata), _vec(vector), archived, expected_version)

    def forget(self, id: int) -> bool:
        return self._native.forget(id)

    def forget_key(self, namespace: str, key: str) -> bool:
        return self._native.forget_key(namespace, key)

    def forget_namespace(self, namespace: str, filter: Any = None) -> int:
        return self._native.forget_namespace(namespace, _js(filter))

    def history(self, id: int) -> list[dict]:
        return self._native.history(id)

    def sweep_expired(self) -> int:
        return self._native.sweep_expired()

    def checkpoint(self, name: str) -> None:
        self._native.checkpoint(name)

    def restore(self, name: str) -> None:
        self._native.restore(name)

    def checkpoints(self) -> list[str]:
        return self._native.checkpoints()

    def subscribe(self, name: str) -> "Subscription":
        """A durable subscription to the store's changes (see :class:`Subscription`)."""
        return Subscription(self._native.subscribe(name))

    def unsubscribe(self, name: str) -> None:
        self._native.unsubscribe(name)


class Subscription:
    """Committed changes of a memory store, delivered at least once. Iterating yields the
    events available now (each acknowledged once the next one is asked for); :meth:`poll` /
    :meth:`ack` give manual control; :meth:`wait` blocks until events arrive."""

    def __init__(self, native: "_basalt.NativeSubscription") -> None:
        self._native = native
        self._stop = _threading.Event()

    def poll(self, max_commits: int = 100) -> list[dict]:
        return self._native.poll(max_commits)

    def ack(self, lsn: int) -> None:
        self._native.ack(lsn)

    def __iter__(self) -> Iterator[dict]:
        while True:
            events = self._native.poll(100)
            if not events:
                return
            for e in events:
                yield e
            self._native.ack(events[-1]["lsn"])

    def wait(self, timeout: Optional[float] = None, interval: float = 0.05) -> list[dict]:
        """Polls until events arrive or ``timeout`` seconds pass; returns them (unacknowledged)."""
        import time

        end = None if timeout is None else time.monotonic() + timeout
        while True:
            events = self._native.poll(100)
            if events or (end is not None and time.monotonic() >= end):
                return events
            time.sleep(interval)
