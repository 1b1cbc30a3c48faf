"""Reads reel's Parquet exports with DuckDB and prints what the test compares, as JSON.

Usage: parquet_totals.py SESSION_FILE DAY_DIR SESSION_ID
"""

import json
import sys

import duckdb

session_file, day_dir, session_id = sys.argv[1:4]
every_day = f"{day_dir}/**/*.parquet"


def rows(sql):
    return duckdb.sql(sql).fetchall()


print(
    json.dumps(
        {
            # Event counts per type of one session, from its own file.
            "counts": dict(
                rows(f"SELECT event_type, count(*) FROM '{session_file}' GROUP BY event_type")
            ),
            # The total cost per model, from the files of every day.
            "cost_per_model": dict(
                rows(
                    f"SELECT model, sum(cost_usd) FROM '{every_day}' "
                    "WHERE cost_usd IS NOT NULL GROUP BY model"
                )
            ),
            "rows": rows(f"SELECT count(*) FROM '{every_day}'")[0][0],
            "days": rows(
                f"SELECT count(DISTINCT day) FROM read_parquet('{every_day}', hive_partitioning = true)"
            )[0][0],
            # Every row of the session in the day files is in its own file, in ordinal order.
            "same_rows": rows(
                f"SELECT count(*) FROM (SELECT * EXCLUDE (day) FROM read_parquet('{every_day}', "
                f"hive_partitioning = true) WHERE session_id = '{session_id}' "
                f"EXCEPT SELECT * FROM '{session_file}')"
            )[0][0],
            "first_ordinals": [
                r[0] for r in rows(f"SELECT ordinal FROM '{session_file}' LIMIT 3")
            ],
        }
    )
)
