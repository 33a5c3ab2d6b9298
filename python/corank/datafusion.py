"""SQL ``ORDER BY`` through corank in datafusion-python sessions.

corank's merge and sort run inside a datafusion-python ``SessionContext`` (version 55)
through DataFusion's FFI: a physical optimizer rule, the ``corank.*`` settings in the
session config, and a table of sorted row groups::

    import corank.datafusion
    ctx = corank.datafusion.session_context()
    ctx.register_parquet("t", "data/", file_sort_order=[[datafusion.col("k").sort()]])
    ctx.sql("SELECT * FROM t ORDER BY k").to_arrow_table()   # merged by corank

What crosses the FFI decides what corank can take over (docs/python.md, "SQL"):

- A ``SortPreservingMergeExec`` stays the host's and keeps its ``LIMIT``; corank's merge
  goes below it, so the host's node has one sorted input and passes it through.
- A ``SortExec`` without a ``LIMIT`` becomes corank's sort (or corank's merge, where its
  input's partitions are sorted already, as ``SortedRowGroupsTable``'s are); a TopK
  (``ORDER BY .. LIMIT``) stays DataFusion's.
- ``EXPLAIN`` shows corank's nodes as ``FFI_ExecutionPlan: CoRankMergeExec`` and
  ``FFI_ExecutionPlan: CoRankSortExec``.

``SET corank.engine = 'cpu'`` and the other settings work as in Rust once the session's
config carries :class:`Settings` (``session_context`` does that).
"""

from __future__ import annotations

import os
from typing import Any, Iterable, Mapping, Optional, Union

from . import _corank
from . import _by

__all__ = ["session_context", "Rule", "Settings", "SortedRowGroupsTable"]

#: corank's physical optimizer rule, for ``SessionContext.add_physical_optimizer_rule``.
Rule = _corank.Rule
#: The ``corank.*`` settings, for ``SessionConfig.with_extension``.
Settings = _corank.Settings


def _settings(settings: Mapping[str, Any]) -> "Settings":
    def text(value: Any) -> str:
        if isinstance(value, bool):
            return "true" if value else "false"
        return str(value)

    names = {name[len("corank.") :] if name.startswith("corank.") else name: text(value) for name, value in settings.items()}
    return _corank.Settings(names)


def session_context(config: Optional[Any] = None, runtime: Optional[Any] = None, **settings: Any) -> Any:
    """A datafusion-python ``SessionContext`` with corank's rule and settings.

    ``config`` (a ``datafusion.SessionConfig``, changed in place) and ``runtime`` (a
    ``datafusion.RuntimeEnvBuilder``) are passed on; ``settings`` are ``corank.*`` settings
    by name without the prefix (``engine="cpu"``, ``window_rows=65536``, ``sort=False``),
    checked now: an unknown name or a bad value raises :class:`corank.InvalidOptionError`.
    """
    import datafusion

    config = datafusion.SessionConfig() if config is None else config
    config = config.with_extension(_settings(settings))
    ctx = datafusion.SessionContext(config, runtime)
    ctx.add_physical_optimizer_rule(Rule())
    return ctx


class SortedRowGroupsTable:
    """Parquet files whose row groups are each sorted (the files need not be, and may
    overlap), as one table whose scan has a sorted partition per row group: ``ORDER BY``
    over it merges the row groups instead of sorting the rows. Register it with
    ``ctx.register_table(name, table)``.

    ``paths``: files, directories or glob patterns (local files). ``by``: the order of every
    row group as ``ORDER BY`` text (``"k DESC, j"``), which the caller vouches for; ``None``
    reads it from the row groups' ``sorting_columns`` (every row group must carry the same).
    """

    def __init__(self, paths: Union[str, os.PathLike, Iterable[Union[str, os.PathLike]]], by: Optional[Union[str, Iterable[str]]] = None):
        items = [os.fspath(paths)] if isinstance(paths, (str, os.PathLike)) else [os.fspath(p) for p in paths]
        self._table = _corank.SortedRowGroups(items, _by(by, required=False))

    @property
    def order(self) -> str:
        """The order of every row group, as ``ORDER BY`` text."""
        return self._table.order

    @property
    def num_row_groups(self) -> int:
        """The number of row groups: the partitions of a scan."""
        return self._table.num_row_groups

    def __datafusion_table_provider__(self, session: Any) -> object:
        return self._table.__datafusion_table_provider__(session)

    def __repr__(self) -> str:
        return f"SortedRowGroupsTable(row_groups={self.num_row_groups}, by={self.order!r})"
