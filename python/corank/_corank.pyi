# The extension module (python/src): corank's functions as corank/__init__.py calls them.
from typing import Any, Callable, Mapping, Optional, Sequence

import os

DEFAULT_BATCH_SIZE: int
GPU_MIN_ROWS: int

class ArrowStream:
    """Arrow data on its way to Python, read once through ``__arrow_c_stream__``."""
    def __arrow_c_stream__(self, requested_schema: Optional[object] = None) -> object: ...

def merge(runs: Sequence[Any], by: str, engine: Mapping[str, Any], check_sorted: bool, batch_size: int, indices: bool) -> ArrowStream: ...
def sort(data: Sequence[Any], by: str, engine: Mapping[str, Any], batch_size: int, indices: bool) -> ArrowStream: ...
def merge_stream(
    runs: Sequence[Any], by: str, engine: Mapping[str, Any], check_sorted: bool, batch_size: int, window_rows: int, memory_limit: Optional[int]
) -> ArrowStream: ...
def merge_files(args: Mapping[str, Any], engine: Mapping[str, Any], passthrough: str, progress: Optional[Callable[[int, int], Any]]) -> dict: ...
def sort_files(
    args: Mapping[str, Any],
    engine: Mapping[str, Any],
    temp_dir: Optional[str],
    spill_compression: str,
    strategy: str,
    progress: Optional[Callable[[int, int], Any]],
) -> dict: ...
def nvrtc_version() -> Optional[tuple[int, int]]: ...
def cli_main(args: Sequence[str]) -> int: ...
