"""Reads jetsink's Parquet files with two independent readers, for tests/parquet_archive.rs.

Usage: parquet_read.py DIRECTORY SQL

pyarrow reads every *.parquet file under DIRECTORY (each file on its own, so a broken one
fails here) and reports each file's schema, row groups and which columns carry min/max
statistics, and every row (bytes as base64, times as ISO 8601) with, in the same order,
the file it is in. DuckDB runs SQL, in which
{files} stands for the glob of those files, and reports the result rows and the column
types DuckDB sees. One JSON object goes to stdout.
"""
import base64
import datetime
import glob
import json
import os
import sys

import duckdb
import pyarrow
import pyarrow.parquet as pq


def plain(value):
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    if isinstance(value, (datetime.datetime, datetime.date)):
        return value.isoformat()
    if isinstance(value, list):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    return value


def main():
    directory, sql = sys.argv[1], sys.argv[2]
    paths = sorted(glob.glob(os.path.join(directory, "**", "*.parquet"), recursive=True))
    files, rows, row_files = [], [], []
    for path in paths:
        meta = pq.ParquetFile(path).metadata
        table = pq.read_table(path)
        group = meta.row_group(0) if meta.num_row_groups else None
        files.append({
            "name": os.path.relpath(path, directory),
            "rows": meta.num_rows,
            "row_groups": meta.num_row_groups,
            "schema": {f.name: str(f.type) for f in table.schema},
            "statistics": sorted(
                group.column(i).path_in_schema
                for i in range(group.num_columns)
                if group.column(i).statistics is not None
                and group.column(i).statistics.has_min_max
            ) if group else [],
            "compression": sorted({
                group.column(i).compression for i in range(group.num_columns)
            }) if group else [],
        })
        # pyarrow gives a map as a list of (key, value) pairs: made an object here.
        maps = {f.name for f in table.schema if pyarrow.types.is_map(f.type)}
        rows.extend(
            {k: plain(dict(v) if k in maps and v is not None else v) for k, v in r.items()}
            for r in table.to_pylist()
        )
        row_files.extend([os.path.relpath(path, directory)] * table.num_rows)
    glob_text = os.path.join(directory, "**", "*.parquet").replace("'", "''")
    con = duckdb.connect()
    query = sql.replace("{files}", f"read_parquet('{glob_text}')")
    result = con.execute(query)
    sql_rows = [[plain(v) for v in r] for r in result.fetchall()]
    types = con.execute(
        f"DESCRIBE SELECT * FROM read_parquet('{glob_text}')"
    ).fetchall() if paths else []
    print(json.dumps({
        "files": files,
        "rows": rows,
        "row_files": row_files,
        "sql": sql_rows,
        "duckdb_types": {name: kind for name, kind, *_ in types},
    }))


main()
