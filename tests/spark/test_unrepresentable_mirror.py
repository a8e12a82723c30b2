"""Values a typed column cannot hold reach Spark through the envelope's ``unrepresentable`` map.

Postgres → pgbridge → Apache Kafka → the mirror job: ``infinity`` dates and timestamps, a ``NaN``
numeric and a two-dimensional array are null in their typed columns and exact in the
``unrepresentable`` map column — of the changelog as the envelope has it (``after.<column>``), of
the mirror per current row (``_pgbridge_unrepresentable``: column → text), through updates that
make a value representable again or not, an update that leaves a TOAST column unchanged, a delete,
a table without key columns whose rows differ only in such a value, and a second run of the job
that merges into what the first one stored. Both decoders (``from_avro`` and fastavro) give the
same mirror.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from decimal import Decimal
from pathlib import Path
from typing import Any

import psycopg
import pytest

from pgbridge_spark.config import MirrorConfig
from pgbridge_spark.merge import UNREPRESENTABLE_COLUMN
from pgbridge_spark.mirror import MirrorJob
from tests.spark.mirror_support import read_table, run_available_now
from tests.support.bridge import BridgeProcess, bridge_env
from tests.support.broker import Broker
from tests.support.postgres import wait_published

# Delta commits cost Spark jobs; a shared 2-core machine runs them slowly
pytestmark = [pytest.mark.spark, pytest.mark.integration, pytest.mark.timeout(1800)]

SCHEMA = """
CREATE TABLE spans (id int PRIMARY KEY, d date, ts timestamptz, n numeric(10,2), a int[], note text, doc text);
CREATE TABLE log (d date, note text);
ALTER TABLE log REPLICA IDENTITY FULL;
"""

UTC = dt.UTC
# The mirror after the workload: id → (typed columns d, ts, n, a, note; the row's unrepresentable map)
EXPECTED_SPANS: dict[int, tuple[tuple[Any, ...], dict[str, str]]] = {
    1: ((None, None, None, None, "special, updated"),
        {"d": "infinity", "ts": "-infinity", "n": "NaN", "a": "(BIG_ARRAY's text, read back from Postgres)"}),
    2: ((dt.date(2026, 1, 2), dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC), Decimal("1.50"), [1, None, 3], "plain"),
        {}),
    3: ((dt.date(2026, 3, 4), None, None, None, "made representable"), {}),
    4: ((dt.date(2026, 5, 6), None, Decimal("2.00"), None, "made special"), {"ts": "infinity"}),
}
# The keyless table as a multiset of (d, note, its unrepresentable map as sorted items)
EXPECTED_LOG = Counter({(None, "x", (("d", "infinity"),)): 1, (None, "x", (("d", "-infinity"),)): 1,
                        (dt.date(2020, 1, 1), "y", ()): 1})


# TOASTed values (stored out of line, incompressible): an update of other columns leaves them
# unchanged; BIG_ARRAY has two dimensions, so it is unrepresentable as well
DOC = "(SELECT string_agg(md5(g::text), '') FROM generate_series(1, 400) g)"
BIG_ARRAY = "(SELECT array_agg(ARRAY[(random() * 1e9)::int, g]) FROM generate_series(1, 1000) g)"


def first_part(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"INSERT INTO spans VALUES (1, 'infinity', '-infinity', 'NaN', {BIG_ARRAY}, 'special', {DOC})")
        conn.execute("INSERT INTO spans VALUES (2, '2026-01-02', '2026-01-02 03:04:05+00', 1.5, '{1,NULL,3}', "
                     "'plain', NULL)")
        conn.execute("INSERT INTO spans VALUES (3, 'infinity', NULL, NULL, NULL, 'will be made representable')")
        conn.execute("INSERT INTO log VALUES ('infinity', 'x'), ('infinity', 'x'), ('-infinity', 'x'), "
                     "('2020-01-01', 'y')")


def second_part(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE spans SET note = 'special, updated' WHERE id = 1")  # doc: unchanged TOAST
        conn.execute("UPDATE spans SET d = '2026-03-04', note = 'made representable' WHERE id = 3")
        conn.execute("INSERT INTO spans VALUES (4, '2026-05-06', '2026-05-06 00:00:00+00', 2, NULL, 'x')")
        conn.execute("UPDATE spans SET ts = 'infinity', note = 'made special' WHERE id = 4")
        conn.execute("INSERT INTO spans VALUES (5, '-infinity', NULL, 'NaN', NULL, 'deleted')")
        conn.execute("DELETE FROM spans WHERE id = 5")
        # one of the two equal rows goes: the mirror must remove a row with the same text, not the other
        conn.execute("DELETE FROM log WHERE ctid = (SELECT ctid FROM log WHERE d = 'infinity' LIMIT 1)")


def read_mirror(directory: Path) -> list[dict[str, Any]]:
    _, rows = read_table(directory)
    for row in rows:
        row[UNREPRESENTABLE_COLUMN] = dict(row[UNREPRESENTABLE_COLUMN] or [])
    return rows


def assert_mirror(output: Path, doc: str, big_array: str) -> None:
    rows = read_mirror(output / "public.spans")
    spans = {r["id"]: ((r["d"], r["ts"], r["n"], r["a"], r["note"]), r[UNREPRESENTABLE_COLUMN]) for r in rows}
    assert spans == {**EXPECTED_SPANS, 1: (EXPECTED_SPANS[1][0], {**EXPECTED_SPANS[1][1], "a": big_array})}
    assert {r["id"]: r["doc"] for r in rows} == {1: doc, 2: None, 3: None, 4: None}
    log = Counter((r["d"], r["note"], tuple(sorted(r[UNREPRESENTABLE_COLUMN].items())))
                  for r in read_mirror(output / "public.log"))
    assert log == EXPECTED_LOG


def test_unrepresentable_values_reach_the_changelog_and_the_mirror(
        spark: Any, pg_dsn: str, apache_kafka: Broker, topic_prefix: str, tmp_path: Path) -> None:
    # given
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(SCHEMA)
    env = bridge_env(pg_dsn, apache_kafka.bootstrap, topic_prefix,
                     extra={"PGBRIDGE_POSTGRES__TABLES": "public.spans,public.log", "PGBRIDGE_SNAPSHOT__MODE": "never"})
    with BridgeProcess(env).start() as bridge:
        bridge.wait_confirmed(pg_dsn, topic_prefix)
        jobs = {}
        for name, mode, decoder in (("jvm", "mirror", "jvm"), ("python", "mirror", "python"),
                                    ("changelog", "changelog", "jvm")):
            config = MirrorConfig(bootstrap_servers=apache_kafka.bootstrap, prefix=topic_prefix,
                                  output=str(tmp_path / name), checkpoint=str(tmp_path / f"{name}-checkpoint"),
                                  mode=mode, decoder=decoder)
            jobs[name] = MirrorJob(spark, config)
        # when: each job runs over the first part, then over the second (merging into what it stored)
        for part in (first_part, second_part):
            part(pg_dsn)
            wait_published(pg_dsn, topic_prefix)
            for job in jobs.values():
                run_available_now(job)
        assert bridge.terminate() == 0, bridge.log()
        with psycopg.connect(pg_dsn) as conn:
            row = conn.execute("SELECT doc, a::text FROM spans WHERE id = 1").fetchone()
            assert row is not None
            doc, big_array = row

    # then: each decoder mirrors the typed values and the texts
    assert jobs["jvm"].decoder_counts["python"] == 0 and jobs["jvm"].decoder_counts["jvm"] > 0
    assert jobs["python"].decoder_counts["jvm"] == 0 and jobs["python"].decoder_counts["python"] > 0
    assert big_array.startswith("{{")
    assert_mirror(tmp_path / "jvm", doc, big_array)
    assert_mirror(tmp_path / "python", doc, big_array)
    # ... and the changelog holds the envelope's map as it was published
    changes = sorted(read_table(tmp_path / "changelog" / "public.spans")[1],
                     key=lambda r: (r["commit_lsn"], r["total_order"]))
    seen = [(r["op"], (r["after"] or r["before"])["id"], dict(r["unrepresentable"] or [])) for r in changes]
    assert seen == [
        ("c", 1, {"after.d": "infinity", "after.ts": "-infinity", "after.n": "NaN", "after.a": big_array}),
        ("c", 2, {}),
        ("c", 3, {"after.d": "infinity"}),
        ("u", 1, {"after.d": "infinity", "after.ts": "-infinity", "after.n": "NaN"}),  # a: unchanged TOAST
        ("u", 3, {}),
        ("c", 4, {}),
        ("u", 4, {"after.ts": "infinity"}),
        ("c", 5, {"after.d": "-infinity", "after.n": "NaN"}),
        ("d", 5, {}),  # a keyed table's delete carries only the key in before
    ]
    special = next(r for r in changes if r["op"] == "c" and r["after"]["id"] == 1)["after"]
    assert (special["d"], special["ts"], special["n"], special["a"]) == (None, None, None, None)
    toast_update = next(r for r in changes if r["op"] == "u" and r["after"]["id"] == 1)
    assert sorted(toast_update["unchanged_toast_columns"]) == ["a", "doc"]
    assert toast_update["after"]["doc"] is None and toast_update["after"]["a"] is None
