"""Reads the stream_sequence of every row of every Parquet file under a directory, for the
fault matrix (tests/common/fault_matrix/readback.rs): pyarrow, not jetsink's own reader.

Usage: parquet_sequences.py DIRECTORY

Prints one JSON object: {"sequences": [<one per row, repeats kept>], "origins": [<for
each row, its file and delivery count>]}. Temporary files (*.tmp) and hidden ones are not
archive files and are skipped.
"""
import glob
import json
import os
import sys

import pyarrow.parquet as pq


def main():
    directory = sys.argv[1]
    paths = sorted(glob.glob(os.path.join(directory, "**", "*.parquet"), recursive=True))
    sequences, origins = [], []
    for path in paths:
        table = pq.read_table(path, columns=["stream_sequence", "delivered"])
        name = os.path.relpath(path, directory)
        sequences.extend(table.column("stream_sequence").to_pylist())
        origins.extend(
            f"{name} delivered {d}" for d in table.column("delivered").to_pylist()
        )
    print(json.dumps({"sequences": sequences, "origins": origins}))


main()
