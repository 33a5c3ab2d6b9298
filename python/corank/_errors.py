"""corank's exceptions: one class per kind of failure, all under :class:`Error`.

The message is the library's (the command line prints the same words); the details are
attributes (``run``, ``row``, ``path``, ``row_group``, ``column``, ``setting``), ``None``
where they do not apply.
"""

from __future__ import annotations

from typing import Any, Optional


class Error(Exception):
    """Base class of every error corank raises (``except corank.Error`` catches them all)."""

    run: Optional[int] = None
    row: Optional[int] = None
    path: Optional[str] = None
    row_group: Optional[int] = None
    column: Optional[str] = None
    setting: Optional[str] = None

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message)
        self.message = message
        for name, value in details.items():
            setattr(self, name, value)

    def __str__(self) -> str:
        return self.message


class NotSortedError(Error):
    """An input is not sorted by the key.

    In memory: ``run`` and ``row`` (counted from 0 within the run) name the first row out of
    order. Files: ``path``, ``row_group`` and ``row`` (within the row group).
    """


class SchemaError(Error):
    """The inputs' schemas differ: ``run`` (in memory) or ``path`` (files) names the first
    input that differs from the first one."""


class ColumnNotFoundError(SchemaError):
    """A sort column is missing from an input (``column``; ``run`` in memory)."""


class UnsupportedTypeError(Error, TypeError):
    """A sort column has a type corank cannot order (``column``, ``data_type``)."""


class InvalidOptionError(Error, ValueError):
    """An argument cannot work: a bad ``by``, an unknown engine or codec, a memory limit too
    small, no sort key. ``setting`` names the argument where one is to blame."""


class OutputExistsError(InvalidOptionError):
    """The output file exists and ``overwrite`` is off (``path``)."""


class GpuUnavailableError(Error):
    """The GPU engine was asked for (``engine="gpu"``, or ``on_gpu_failure="error"``) and
    cannot run here: no driver, no device, or no NVRTC (``pip install corank[cu13]``)."""


class GpuError(Error):
    """A GPU call failed (out of memory, launch failure, kernel compile error)."""


class ArrowError(Error):
    """Arrow refused the data (importing, gathering or converting it)."""


class FileError(Error, OSError):
    """A file could not be read or written, or is not what it must be: missing, a
    directory without Parquet files, fewer rows than its footer counts (``path``)."""


class ParquetError(FileError):
    """Parquet could not read or write a file (``path``): a corrupt or truncated file."""


class InternalError(Error):
    """A bug in corank: an invariant did not hold. Worth a report."""


__all__ = [
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
