"""corank: stable merge and sort of Arrow data and Parquet files, on CPU threads or a GPU.

Merge sorted runs (``merge``, ``merge_indices``, ``merge_stream``), sort (``sort``,
``sort_indices``), and merge or sort Parquet files as the ``corank`` command line does
(``merge_files``, ``sort_files``).

Data comes in through the Arrow PyCapsule interface, without copies: pyarrow tables, record
batches and readers, Polars and pandas data frames, DuckDB relations, anything with
``__arrow_c_stream__`` or ``__arrow_c_array__``. Results are pyarrow objects.

The merge is **stable, always**: equal keys keep run order, then row order within a run,
so the output is the stable sort of the runs' concatenation. The order is arrow's (and
DataFusion's): per column ascending or descending, nulls first or last, floats by IEEE
total order (-0.0 before +0.0, NaN above +inf when ascending), strings and binary by bytes.

``by`` is SQL ``ORDER BY`` text, as the command line's ``--by``: ``"k DESC NULLS LAST, j"``
(``ASC`` defaults to ``NULLS LAST``, ``DESC`` to ``NULLS FIRST``), or a list of such items.

Every call runs with the GIL released; Ctrl-C raises ``KeyboardInterrupt`` within about
100 ms (a file merge or sort stops and removes its temporary files first). Errors are
subclasses of :class:`corank.Error`.

Guide: docs/python.md in the repository.
"""

from __future__ import annotations

import ctypes
import glob
import importlib.util
import os
import re
import sys
from typing import Any, Callable, Iterable, Mapping, Optional, Sequence, Union

import pyarrow as pa

from . import _corank
from ._errors import (
    ArrowError,
    ColumnNotFoundError,
    Error,
    FileError,
    GpuError,
    GpuUnavailableError,
    InternalError,
    InvalidOptionError,
    NotSortedError,
    OutputExistsError,
    ParquetError,
    SchemaError,
    UnsupportedTypeError,
)

__version__ = "0.1.0"

#: Rows per output batch unless ``batch_size`` says otherwise.
DEFAULT_BATCH_SIZE: int = _corank.DEFAULT_BATCH_SIZE
#: With ``engine="auto"``, merges and sorts of at least this many rows use the GPU.
GPU_MIN_ROWS: int = _corank.GPU_MIN_ROWS

__all__ = [
    "merge",
    "merge_indices",
    "merge_stream",
    "sort",
    "sort_indices",
    "merge_files",
    "sort_files",
    "nvrtc_version",
    "DEFAULT_BATCH_SIZE",
    "GPU_MIN_ROWS",
    "Error",
    "NotSortedError",
    "SchemaError",
    "ColumnNotFoundError",
    "UnsupportedTypeError",
    "InvalidOptionError",
    "OutputExistsError",
    "GpuUnavailableError",
    "GpuError",
    "ArrowError",
    "FileError",
    "ParquetError",
    "InternalError",
]

By = Union[str, Sequence[str]]
Devices = Union[int, str, Sequence[int]]

# --------------------------------------------------------------------------------------
# NVRTC from the pip package nvidia-cuda-nvrtc (the extra corank[cu13])
# --------------------------------------------------------------------------------------

_nvrtc_searched = False
_nvrtc_path: Optional[str] = None


def _load_nvrtc() -> Optional[str]:
    """Loads NVRTC from the ``nvidia-cuda-nvrtc`` wheel (``nvidia/cu13/lib``), once.

    corank's GPU engine loads ``libnvrtc.so.13`` by name at its first GPU use; a library
    already loaded under that name is the one it gets, so loading the wheel's copy here
    (``RTLD_GLOBAL``, with its builtins) needs no ``LD_LIBRARY_PATH``. Without the
    package, the system's NVRTC is found the usual way.
    """
    global _nvrtc_searched, _nvrtc_path
    if _nvrtc_searched:
        return _nvrtc_path
    _nvrtc_searched = True
    if not sys.platform.startswith("linux"):
        return None
    try:
        spec = importlib.util.find_spec("nvidia")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for base in spec.submodule_search_locations:
        lib = os.path.join(base, "cu13", "lib")
        nvrtc = os.path.join(lib, "libnvrtc.so.13")
        if not os.path.exists(nvrtc):
            continue
        try:
            # The builtins first: libnvrtc opens them by name when it compiles.
            for builtins in sorted(glob.glob(os.path.join(lib, "libnvrtc-builtins.so.13*"))):
                ctypes.CDLL(builtins, mode=ctypes.RTLD_GLOBAL)
            ctypes.CDLL(nvrtc, mode=ctypes.RTLD_GLOBAL)
        except OSError:
            continue
        _nvrtc_path = nvrtc
        return nvrtc
    return None


def nvrtc_version() -> Optional[tuple]:
    """NVRTC's version ``(major, minor)`` as corank's GPU engine would load it (from the
    ``nvidia-cuda-nvrtc`` package where it is installed), or ``None`` where it cannot."""
    _load_nvrtc()
    return _corank.nvrtc_version()


# --------------------------------------------------------------------------------------
# Arguments
# --------------------------------------------------------------------------------------


def _by(by: Optional[By], required: bool = True) -> Optional[str]:
    if by is None:
        if required:
            raise InvalidOptionError("`by` is required: the sort key, e.g. by=\"k DESC, j\"", setting="by")
        return None
    if isinstance(by, str):
        return by
    if isinstance(by, Iterable):
        items = list(by)
        if not all(isinstance(b, str) for b in items):
            raise InvalidOptionError(f"`by` must be ORDER BY text or a list of such items, not {by!r}", setting="by")
        return ", ".join(items)
    raise InvalidOptionError(f"`by` must be ORDER BY text or a list of such items, not {by!r}", setting="by")


def _engine(engine: str, kernel: str, devices: Devices, gpu_min_rows: Optional[int], on_gpu_failure: Optional[str]) -> dict:
    if isinstance(devices, bool):
        raise InvalidOptionError(f"`devices` must be an ordinal, a list of ordinals or \"all\", not {devices!r}")
    if isinstance(devices, int):
        devices = str(devices)
    elif not isinstance(devices, str):
        devices = ",".join(str(int(d)) for d in devices)
    if on_gpu_failure is None:
        on_gpu_failure = "error" if os.environ.get("CORANK_REQUIRE_GPU") == "1" else "cpu"
    if not isinstance(engine, str) or not isinstance(kernel, str):
        raise InvalidOptionError("`engine` and `kernel` are names (\"auto\", \"cpu\", \"gpu\"; \"auto\", \"kway\", ...)")
    if engine.lower() != "cpu":
        _load_nvrtc()
    return {
        "engine": engine,
        "kernel": kernel,
        "devices": devices,
        "gpu_min_rows": GPU_MIN_ROWS if gpu_min_rows is None else _count(gpu_min_rows, "gpu_min_rows"),
        "on_gpu_failure": on_gpu_failure,
    }


_SIZE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*$")
_BYTE_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mb": 1 << 20, "mib": 1 << 20,
               "g": 1 << 30, "gb": 1 << 30, "gib": 1 << 30, "t": 1 << 40, "tb": 1 << 40, "tib": 1 << 40}
_COUNT_UNITS = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9}


def _bytes(value: Union[int, str], setting: str) -> int:
    """``2GiB``, ``512M``, ``1.5g``, ``100000`` (K/M/G/T are powers of 1024), as the command
    line reads sizes."""
    if isinstance(value, bool):
        raise InvalidOptionError(f"`{setting}` {value!r} is not a size", setting=setting)
    if isinstance(value, int):
        if value < 0:
            raise InvalidOptionError(f"`{setting}` {value} is not a size", setting=setting)
        return value
    m = _SIZE.match(str(value))
    if not m or m.group(2).lower() not in _BYTE_UNITS:
        raise InvalidOptionError(f"`{setting}` '{value}' is not a size (e.g. 512MiB, 2G, 100000)", setting=setting)
    return int(float(m.group(1)) * _BYTE_UNITS[m.group(2).lower()])


def _count(value: Union[int, str], setting: str) -> int:
    """``10M``, ``250k``, ``1000000`` (k/M/G are powers of 1000), as the command line reads
    row counts."""
    if isinstance(value, bool):
        raise InvalidOptionError(f"`{setting}` {value!r} is not a count", setting=setting)
    if isinstance(value, int):
        if value < 0:
            raise InvalidOptionError(f"`{setting}` {value} is not a count", setting=setting)
        return value
    m = _SIZE.match(str(value).replace("_", ""))
    if not m or m.group(2).lower() not in _COUNT_UNITS:
        raise InvalidOptionError(f"`{setting}` '{value}' is not a count (e.g. 250k, 10M)", setting=setting)
    return round(float(m.group(1)) * _COUNT_UNITS[m.group(2).lower()])


def _arrow(obj: Any) -> Any:
    """``obj`` as something with an Arrow PyCapsule method."""
    if hasattr(obj, "__arrow_c_stream__") or hasattr(obj, "__arrow_c_array__"):
        return obj
    # pandas before 2.2 has no __arrow_c_stream__; older DuckDB relations have .arrow().
    module = type(obj).__module__
    if module.startswith("pandas"):
        return pa.Table.from_pandas(obj, preserve_index=False)
    if module.startswith("duckdb") and hasattr(obj, "arrow"):
        return obj.arrow()
    if isinstance(obj, (list, tuple)) and obj and all(isinstance(b, pa.RecordBatch) for b in obj):
        return pa.Table.from_batches(obj)
    raise TypeError(
        f"expected Arrow data (an object with __arrow_c_stream__ or __arrow_c_array__, such as a "
        f"pyarrow Table, a Polars or pandas DataFrame, a DuckDB relation), got {type(obj).__name__}"
    )


def _runs(runs: Iterable[Any]) -> list:
    if hasattr(runs, "__arrow_c_stream__") or hasattr(runs, "__arrow_c_array__"):
        raise TypeError("`runs` is a list of sorted inputs (one table is one run: pass [table])")
    return [_arrow(r) for r in runs]


def _table(stream: Any) -> pa.Table:
    return pa.RecordBatchReader.from_stream(stream).read_all()


def _batch_size(batch_size: Optional[int]) -> int:
    if batch_size is None:
        return DEFAULT_BATCH_SIZE
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size <= 0:
        raise InvalidOptionError(f"`batch_size` must be a positive number of rows, not {batch_size!r}")
    return batch_size


# --------------------------------------------------------------------------------------
# In memory
# --------------------------------------------------------------------------------------


def merge(
    runs: Iterable[Any],
    by: By,
    *,
    engine: str = "auto",
    kernel: str = "auto",
    devices: Devices = 0,
    gpu_min_rows: Optional[int] = None,
    on_gpu_failure: Optional[str] = None,
    check_sorted: bool = True,
    batch_size: Optional[int] = None,
) -> pa.Table:
    """Merges sorted runs into one sorted table, stably.

    Args:
        runs: the sorted runs, in tie order: pyarrow tables, record batches or readers,
            Polars or pandas data frames, DuckDB relations (anything with
            ``__arrow_c_stream__`` or ``__arrow_c_array__``). Same column names and types;
            each sorted by ``by``. A table's chunks are merged in place, without copies.
        by: the sort key, SQL ``ORDER BY`` text: ``"k DESC NULLS LAST, j"``, or a list of
            such items (``["k DESC", "j"]``).
        engine: ``"auto"`` (the GPU from ``gpu_min_rows`` rows where one is usable, else the
            CPU), ``"cpu"`` or ``"gpu"`` (an error without a usable GPU).
        kernel: the GPU kernel: ``"auto"``, ``"basic"``, ``"tiled"``, ``"circular"``,
            ``"kway"``.
        devices: CUDA devices: an ordinal (``0``), a list (``[0, 1]``) or ``"all"``.
        gpu_min_rows: with ``engine="auto"``, the GPU from this many rows (default
            ``corank.GPU_MIN_ROWS``).
        on_gpu_failure: ``"cpu"`` (a missing or failing GPU falls back to the CPU) or
            ``"error"``; default ``"cpu"``, or ``"error"`` where the environment has
            ``CORANK_REQUIRE_GPU=1``.
        check_sorted: verify every run is sorted first (one pass over the keys); an
            unsorted run raises :class:`NotSortedError` naming the run and row.
        batch_size: rows per record batch of the result.

    Returns:
        The merged rows as a ``pyarrow.Table``.

    Raises:
        NotSortedError, SchemaError, ColumnNotFoundError, UnsupportedTypeError,
        InvalidOptionError, GpuUnavailableError, GpuError: see :class:`corank.Error`.

    Example:
        >>> a = pa.table({"k": [1, 3, 5], "v": ["a", "b", "c"]})
        >>> b = pa.table({"k": [2, 3, 4], "v": ["d", "e", "f"]})
        >>> corank.merge([a, b], by="k")["v"].to_pylist()
        ['a', 'd', 'b', 'e', 'f', 'c']
    """
    options = _engine(engine, kernel, devices, gpu_min_rows, on_gpu_failure)
    out = _corank.merge(_runs(runs), _by(by), options, bool(check_sorted), _batch_size(batch_size), False)
    return _table(out)


def merge_indices(
    runs: Iterable[Any],
    by: By,
    *,
    engine: str = "auto",
    kernel: str = "auto",
    devices: Devices = 0,
    gpu_min_rows: Optional[int] = None,
    on_gpu_failure: Optional[str] = None,
    check_sorted: bool = True,
) -> pa.Table:
    """The stable merge order of sorted runs, without gathering the rows.

    Takes what :func:`merge` takes. Only the key columns are read.

    Returns:
        A ``pyarrow.Table`` with one row per output row: ``run`` (int32, the index of the
        run in ``runs``) and ``row`` (int64, the row within that run).

    Example:
        >>> idx = corank.merge_indices([a, b], by="k")
        >>> list(zip(idx["run"].to_pylist(), idx["row"].to_pylist()))
        [(0, 0), (1, 0), (0, 1), (1, 1), (1, 2), (0, 2)]
    """
    options = _engine(engine, kernel, devices, gpu_min_rows, on_gpu_failure)
    out = _corank.merge(_runs(runs), _by(by), options, bool(check_sorted), DEFAULT_BATCH_SIZE, True)
    return _table(out)


_NOT_SORTED = re.compile(r"input partition (\d+) is not sorted by \[.*\]: row (\d+) sorts before row \d+: (.*)$", re.S)


class _StreamErrors:
    """Reads a merged stream, raising corank's exceptions for its errors."""

    def __init__(self, reader: pa.RecordBatchReader) -> None:
        self.reader = reader

    def __iter__(self):
        while True:
            try:
                batch = self.reader.read_next_batch()
            except StopIteration:
                return
            except pa.ArrowException as e:
                raise _stream_error(str(e)) from None
            yield batch


def _stream_error(message: str) -> Error:
    m = _NOT_SORTED.search(message)
    if m:
        run, row, detail = int(m.group(1)), int(m.group(2)), m.group(3)
        return NotSortedError(f"run {run} is not sorted: row {row} sorts before row {max(row - 1, 0)}: {detail}", run=run, row=row)
    if "Resources exhausted" in message or "Failed to allocate additional" in message:
        return InvalidOptionError(f"`memory_limit` is too small for the merge's windows: {message}", setting="memory_limit")
    if "GPU engine not available" in message:
        return GpuUnavailableError(message)
    return Error(message)


def merge_stream(
    runs: Iterable[Any],
    by: By,
    *,
    engine: str = "auto",
    kernel: str = "auto",
    devices: Devices = 0,
    gpu_min_rows: Optional[int] = None,
    on_gpu_failure: Optional[str] = None,
    check_sorted: bool = True,
    batch_size: Optional[int] = None,
    window_rows: int = 1 << 16,
    memory_limit: Optional[Union[int, str]] = None,
) -> pa.RecordBatchReader:
    """Merges sorted streams into one sorted stream, in bounded memory.

    Each run is read as the output is read: the merge holds a window of up to
    ``window_rows`` rows per run, in a memory pool of ``memory_limit`` bytes (unbounded
    when ``None``), so runs larger than memory merge. Runs are readers (a
    ``pyarrow.RecordBatchReader``, a Polars ``LazyFrame``'s stream, a DuckDB result), or
    anything :func:`merge` takes. The rows are checked for order as they stream (with
    ``check_sorted``); an unsorted run raises :class:`NotSortedError` when the output
    reaches it.

    Returns:
        A ``pyarrow.RecordBatchReader`` of the merged rows (read it once).

    Example:
        >>> readers = [pa.RecordBatchReader.from_batches(t.schema, t.to_batches()) for t in (a, b)]
        >>> corank.merge_stream(readers, by="k").read_all()["v"].to_pylist()
        ['a', 'd', 'b', 'e', 'f', 'c']
    """
    options = _engine(engine, kernel, devices, gpu_min_rows, on_gpu_failure)
    if isinstance(window_rows, bool) or not isinstance(window_rows, int) or window_rows <= 0:
        raise InvalidOptionError(f"`window_rows` must be a positive number of rows, not {window_rows!r}")
    limit = None if memory_limit is None else _bytes(memory_limit, "memory_limit")
    stream = _corank.merge_stream(_runs(runs), _by(by), options, bool(check_sorted), _batch_size(batch_size), window_rows, limit)
    reader = pa.RecordBatchReader.from_stream(stream)
    return pa.RecordBatchReader.from_batches(reader.schema, _StreamErrors(reader))


def _sort_input(data: Any) -> list:
    if isinstance(data, (list, tuple)) and not (data and all(isinstance(b, pa.RecordBatch) for b in data)):
        return [_arrow(d) for d in data]
    return [_arrow(data)]


def sort(
    data: Any,
    by: By,
    *,
    engine: str = "auto",
    kernel: str = "auto",
    devices: Devices = 0,
    gpu_min_rows: Optional[int] = None,
    on_gpu_failure: Optional[str] = None,
    batch_size: Optional[int] = None,
) -> pa.Table:
    """Sorts Arrow data, stably: equal keys keep their input order.

    Args:
        data: a table, record batch, reader or data frame (anything :func:`merge` takes), or a
            list of them (sorted as their concatenation).
        by, engine, kernel, devices, gpu_min_rows, on_gpu_failure, batch_size: as for
            :func:`merge`.

    Returns:
        The sorted rows as a ``pyarrow.Table``.

    Example:
        >>> t = pa.table({"k": [3, 1, 2, 1], "v": ["a", "b", "c", "d"]})
        >>> corank.sort(t, by="k DESC")["v"].to_pylist()
        ['a', 'c', 'b', 'd']
    """
    options = _engine(engine, kernel, devices, gpu_min_rows, on_gpu_failure)
    out = _corank.sort(_sort_input(data), _by(by), options, _batch_size(batch_size), False)
    return _table(out)


def sort_indices(
    data: Any,
    by: By,
    *,
    engine: str = "auto",
    kernel: str = "auto",
    devices: Devices = 0,
    gpu_min_rows: Optional[int] = None,
    on_gpu_failure: Optional[str] = None,
) -> pa.Int64Array:
    """The stable sort order of Arrow data: the input position of every output row (what
    ``pyarrow.compute.sort_indices`` returns, computed by corank). Takes what :func:`sort`
    takes; only the key columns are read.

    Example:
        >>> corank.sort_indices(t, by="k").to_pylist()
        [1, 3, 2, 0]
    """
    options = _engine(engine, kernel, devices, gpu_min_rows, on_gpu_failure)
    out = _corank.sort(_sort_input(data), _by(by), options, DEFAULT_BATCH_SIZE, True)
    return _table(out).column("index").combine_chunks()


# --------------------------------------------------------------------------------------
# Parquet files
# --------------------------------------------------------------------------------------

Progress = Union[bool, Callable[[int, int], Any], None]


def _progress(progress: Progress, what: str) -> Optional[Callable[[int, int], Any]]:
    if progress is None or progress is False:
        return None
    if callable(progress):
        return progress
    if progress is True:
        return _ProgressBar(what)
    raise InvalidOptionError(f"`progress` must be True, False or a callable(done, total), not {progress!r}")


class _ProgressBar:
    """A one-line progress bar on stderr."""

    def __init__(self, what: str) -> None:
        self.what = what

    def __call__(self, done: int, total: int) -> None:
        width = 30
        frac = done / total if total else 1.0
        bar = "#" * int(frac * width)
        end = "\n" if done >= total else ""
        sys.stderr.write(f"\r{self.what} [{bar:<{width}}] {100 * frac:5.1f}% ({done:,} of {total:,}){end}")
        sys.stderr.flush()


def _paths(inputs: Union[str, os.PathLike, Iterable[Union[str, os.PathLike]]]) -> list:
    if isinstance(inputs, (str, os.PathLike)):
        return [os.fspath(inputs)]
    return [os.fspath(p) for p in inputs]


def _hive(hive_partitioning: Union[bool, str]) -> str:
    if isinstance(hive_partitioning, bool):
        return "true" if hive_partitioning else "false"
    if isinstance(hive_partitioning, str):
        return hive_partitioning
    raise InvalidOptionError(f"`hive_partitioning` is \"auto\", True or False, not {hive_partitioning!r}", setting="hive_partitioning")


def _storage_options(storage_options) -> list:
    if storage_options is None:
        return []
    if not isinstance(storage_options, Mapping):
        raise InvalidOptionError(f"`storage_options` is a dict of str keys and values, not {storage_options!r}", setting="storage_options")
    pairs = []
    for key, value in storage_options.items():
        if not isinstance(key, str):
            raise InvalidOptionError(f"`storage_options` keys are str, not {key!r}", setting="storage_options")
        if isinstance(value, bool):
            value = "true" if value else "false"
        elif isinstance(value, (int, float)):
            value = str(value)
        elif not isinstance(value, str):
            raise InvalidOptionError(f"`storage_options[{key!r}]` is a str, bool or number, not {value!r}", setting="storage_options")
        pairs.append((key, value))
    return pairs


def _hive_types(hive_types) -> list:
    if hive_types is None:
        return []
    if not isinstance(hive_types, Mapping) or not all(isinstance(k, str) and isinstance(v, str) for k, v in hive_types.items()):
        raise InvalidOptionError(f"`hive_types` is a dict of partition keys to type names such as {{'date': 'DATE'}}, not {hive_types!r}", setting="hive_types")
    return list(hive_types.items())


def _file_args(inputs, output, by, overwrite, memory_limit, compression, row_group_rows, row_group_bytes, union_by_name, hive_partitioning, max_file_rows, max_file_bytes, storage_options=None, hive_types=None) -> dict:
    if not isinstance(compression, str):
        raise InvalidOptionError(f"`compression` is a codec name such as \"zstd(3)\", not {compression!r}", setting="compression")
    return {
        "inputs": _paths(inputs),
        "output": os.fspath(output),
        "by": _by(by, required=False),
        "overwrite": bool(overwrite),
        "memory_limit": None if memory_limit is None else _bytes(memory_limit, "memory_limit"),
        "compression": compression,
        "row_group_rows": _count(row_group_rows, "row_group_rows"),
        "row_group_bytes": _bytes(row_group_bytes, "row_group_bytes"),
        "union_by_name": bool(union_by_name),
        "hive_partitioning": _hive(hive_partitioning),
        "hive_types": _hive_types(hive_types),
        "max_file_rows": None if max_file_rows is None else _count(max_file_rows, "max_file_rows"),
        "max_file_bytes": None if max_file_bytes is None else _bytes(max_file_bytes, "max_file_bytes"),
        "storage_options": _storage_options(storage_options),
    }


def merge_files(
    inputs: Union[str, os.PathLike, Iterable[Union[str, os.PathLike]]],
    output: Union[str, os.PathLike],
    by: Optional[By] = None,
    *,
    overwrite: bool = False,
    memory_limit: Optional[Union[int, str]] = None,
    compression: str = "zstd(3)",
    row_group_rows: Union[int, str] = "1M",
    row_group_bytes: Union[int, str] = "128MiB",
    passthrough: str = "auto",
    engine: str = "auto",
    kernel: str = "auto",
    devices: Devices = 0,
    gpu_min_rows: Optional[int] = None,
    on_gpu_failure: Optional[str] = None,
    union_by_name: bool = False,
    hive_partitioning: Union[bool, str] = "auto",
    hive_types: Optional[Mapping[str, str]] = None,
    max_file_rows: Optional[Union[int, str]] = None,
    max_file_bytes: Optional[Union[int, str]] = None,
    storage_options: Optional[Mapping[str, Union[str, int, bool]]] = None,
    progress: Progress = None,
) -> dict:
    """Merges sorted Parquet files into one sorted Parquet file, as ``corank merge`` does.

    Args:
        inputs: files, directories (their ``*.parquet`` files, by name) and glob patterns,
            in tie order. Each file sorted as a whole or per row group. The output is never
            an input.
        output: the file to write: under a temporary name beside it, renamed when complete
            (a failure or Ctrl-C leaves no partial file and an existing output untouched).
        by: the key, SQL ``ORDER BY`` text; default: the inputs' common ``sorting_columns``.
        overwrite: replace an existing output (``--force``).
        memory_limit: approximate cap on the memory the merge holds (``"2GiB"``, or bytes);
            ``None``: half the memory available to the process (its cgroup's limit where
            lower), as the command line's default.
        compression: the output's codec: ``none``, ``snappy``, ``lz4``, ``zstd``,
            ``zstd(1..22)``, ``gzip``, ``gzip(0..9)``, ``brotli``, ``brotli(0..11)``.
        row_group_rows: most rows per output row group (``"1M"``, or a number).
        row_group_bytes: most bytes of Arrow data per output row group.
        passthrough: ``"auto"``, ``"always"`` or ``"never"``: row groups that overlap no
            other input are copied as they are, not decoded.
        engine, kernel, devices, gpu_min_rows, on_gpu_failure: as for :func:`merge`.
        union_by_name: match columns by name across inputs (``--union-by-name``): a column
            missing from a file reads as nulls, types widen where every value fits.
        hive_partitioning: ``"auto"`` (``key=value`` directories of the paths become
            columns where every path has the same keys, as DuckDB detects them), ``True``
            (required) or ``False`` (``--hive-partitioning``).
        hive_types: partition keys' types instead of inferred ones, as DuckDB's
            ``hive_types``: ``{"date": "DATE", "k": "INTEGER"}`` (``--hive-types``); a value
            that does not cast raises InvalidOptionError naming its file.
        max_file_rows, max_file_bytes: split the output into ``output/part-00000.parquet``,
            ... of at most so many rows, or about so many bytes, cut where the key changes
            (``--max-file-rows``, ``--max-file-bytes``); the summary's ``output_files``
            lists them with their first and last keys.
        storage_options: settings of the object stores that URL inputs and outputs
            (``s3://``, ``gs://``, ``az://``, ``https://``) are read from and written to, the
            command line's ``--storage-option`` keys: ``endpoint``, ``region``,
            ``allow_http``, ``access_key_id``, ``secret_access_key``, ... and corank's
            ``max_retries``, ``retry_timeout``, ``retry_backoff``, ``part_size``,
            ``max_concurrency`` (docs/object-stores.md). They win over the provider's
            environment variables (``AWS_*``, ...). The process has one set at a time: a
            call with other options waits for the calls running with theirs.
        progress: ``True`` for a progress bar on stderr, or a callable ``(rows_done,
            rows_total)`` called on the calling thread about every 50 ms.

    Returns:
        The summary that ``corank merge --json`` prints, as a dict: ``rows``, ``files``,
        ``runs``, ``input_bytes``, ``output_bytes``, ``engine``, ``by``, ``elapsed_s``, ...

    Raises:
        NotSortedError (``path``, ``row_group``, ``row``), SchemaError (``path``),
        InvalidOptionError, OutputExistsError, FileError, ParquetError,
        GpuUnavailableError. Nothing is written when one is raised.

    Example:
        >>> corank.merge_files(["day1.parquet", "day2.parquet"], "week.parquet", by="ts")["rows"]
        2000000
    """
    args = _file_args(
        inputs, output, by, overwrite, memory_limit, compression, row_group_rows, row_group_bytes, union_by_name, hive_partitioning, max_file_rows, max_file_bytes, storage_options, hive_types
    )
    options = _engine(engine, kernel, devices, gpu_min_rows, on_gpu_failure)
    return _corank.merge_files(args, options, passthrough, _progress(progress, "merging"))


def sort_files(
    inputs: Union[str, os.PathLike, Iterable[Union[str, os.PathLike]]],
    output: Union[str, os.PathLike],
    by: Optional[By] = None,
    *,
    overwrite: bool = False,
    memory_limit: Optional[Union[int, str]] = None,
    compression: str = "zstd(3)",
    row_group_rows: Union[int, str] = "1M",
    row_group_bytes: Union[int, str] = "128MiB",
    temp_dir: Optional[Union[str, os.PathLike]] = None,
    spill_compression: str = "lz4",
    strategy: str = "auto",
    engine: str = "auto",
    kernel: str = "auto",
    devices: Devices = 0,
    gpu_min_rows: Optional[int] = None,
    on_gpu_failure: Optional[str] = None,
    union_by_name: bool = False,
    hive_partitioning: Union[bool, str] = "auto",
    hive_types: Optional[Mapping[str, str]] = None,
    max_file_rows: Optional[Union[int, str]] = None,
    max_file_bytes: Optional[Union[int, str]] = None,
    storage_options: Optional[Mapping[str, Union[str, int, bool]]] = None,
    progress: Progress = None,
) -> dict:
    """Sorts Parquet files in any order into one sorted Parquet file, as ``corank sort``
    does: sorted runs spilled to ``temp_dir`` and merged where the rows exceed
    ``memory_limit``, or one column at a time where that fits.

    Args:
        inputs, output, by, overwrite, memory_limit, compression, row_group_rows,
            row_group_bytes, engine, kernel, devices, gpu_min_rows, on_gpu_failure,
            union_by_name, hive_partitioning, hive_types, max_file_rows, max_file_bytes, storage_options,
            progress: as
            for :func:`merge_files` (``by`` is needed unless the
            inputs declare a common ``sorting_columns``).
        temp_dir: where the spill directory goes (default: beside the output).
        spill_compression: the spilled runs' codec (default ``lz4``).
        strategy: ``"auto"``, ``"columns"`` (one column at a time) or ``"runs"``
            (an external merge sort).

    Returns:
        The summary that ``corank sort --json`` prints, as a dict.

    Example:
        >>> corank.sort_files("data/", "sorted.parquet", by="l_partkey", memory_limit="4GiB")["strategy"]
        'columns'
    """
    args = _file_args(
        inputs, output, by, overwrite, memory_limit, compression, row_group_rows, row_group_bytes, union_by_name, hive_partitioning, max_file_rows, max_file_bytes, storage_options, hive_types
    )
    options = _engine(engine, kernel, devices, gpu_min_rows, on_gpu_failure)
    temp = None if temp_dir is None else os.fspath(temp_dir)
    return _corank.sort_files(args, options, temp, spill_compression, strategy, _progress(progress, "sorting"))
