# Type stubs of the package corank (the implementation and the docstrings: __init__.py).
import os
from typing import Any, Callable, Iterable, Mapping, Optional, Sequence, Union

import pyarrow as pa

from ._errors import (
    ArrowError as ArrowError,
    ColumnNotFoundError as ColumnNotFoundError,
    Error as Error,
    FileError as FileError,
    GpuError as GpuError,
    GpuUnavailableError as GpuUnavailableError,
    InternalError as InternalError,
    InvalidOptionError as InvalidOptionError,
    NotSortedError as NotSortedError,
    OutputExistsError as OutputExistsError,
    ParquetError as ParquetError,
    SchemaError as SchemaError,
    UnsupportedTypeError as UnsupportedTypeError,
)

__version__: str
DEFAULT_BATCH_SIZE: int
GPU_MIN_ROWS: int

By = Union[str, Sequence[str]]
Devices = Union[int, str, Sequence[int]]
Progress = Union[bool, Callable[[int, int], Any], None]
Paths = Union[str, os.PathLike[str], Iterable[Union[str, os.PathLike[str]]]]
Size = Union[int, str]

def nvrtc_version() -> Optional[tuple[int, int]]: ...
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
) -> pa.Table: ...
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
) -> pa.Table: ...
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
    window_rows: int = 65536,
    memory_limit: Optional[Size] = None,
) -> pa.RecordBatchReader: ...
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
) -> pa.Table: ...
def sort_indices(
    data: Any,
    by: By,
    *,
    engine: str = "auto",
    kernel: str = "auto",
    devices: Devices = 0,
    gpu_min_rows: Optional[int] = None,
    on_gpu_failure: Optional[str] = None,
) -> pa.Int64Array: ...
def merge_files(
    inputs: Paths,
    output: Union[str, os.PathLike[str]],
    by: Optional[By] = None,
    *,
    overwrite: bool = False,
    memory_limit: Optional[Size] = None,
    compression: str = "zstd(3)",
    row_group_rows: Union[int, str] = "1M",
    row_group_bytes: Size = "128MiB",
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
) -> dict[str, Any]: ...
def sort_files(
    inputs: Paths,
    output: Union[str, os.PathLike[str]],
    by: Optional[By] = None,
    *,
    overwrite: bool = False,
    memory_limit: Optional[Size] = None,
    compression: str = "zstd(3)",
    row_group_rows: Union[int, str] = "1M",
    row_group_bytes: Size = "128MiB",
    temp_dir: Optional[Union[str, os.PathLike[str]]] = None,
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
) -> dict[str, Any]: ...
