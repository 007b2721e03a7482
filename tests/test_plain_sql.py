"""Migration files are plain SQL: only the token ``{dim}`` is replaced; applied files keep their checksums."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import psycopg
from psycopg import sql

from memory.store import migrations

ROOT = Path(__file__).resolve().parent.parent

#: SHA-256 of every migration file as released: schemas in use recorded these, so the
#: files (and how their text is read) must never change.
RELEASED = {
    "001_core_tables.sql": "43174cec7a166e8f73558d2afe4cdc70e5b447fed80ac6db9149cdd1c813be12",
    "003_facts_isolation.sql": "50693ca0b508885db6adc5a6e3b21615a4464f03858deb71baf3748b43530352",
    "004_long_memory_search.sql": "ff977b3d70f143a8b0113f84e5c61c47b3890bb122344269a8b75ae60b84ff4c",
    "005_dba_views.sql": "3cd86abd21c83e58cd81cf8cb7888f08638a4d447e702c7739cfcfc0573cada9",
    "006_gin_no_pending_list.sql": "ff7b8685e24f2d8b29de91b609806b6b712315d79cd542432b6ae18fb3cf8857",
    "007_own_tables_shared_rows.sql": "a6caaa9d5932045253e2a0b7e623fc46720ab932fc416f95c5b06e305e62b72d",
    "008_distribution_keys.sql": "d511f6d82f8115a84eb0bf1317ea7303f3d9e4f877d621251dcaaff8c078616d",
}

#: A later migration as a newcomer would write it: JSON literals, format() with %s and
#: braces, a DO block, and the dimension both as a type modifier and as a value.
BRACES = """\
-- braces {like these} and 100% literal text are fine in a comment
CREATE TABLE plain_sql_probe (
    id        int PRIMARY KEY,
    doc       jsonb NOT NULL DEFAULT '{"tags": [], "nested": {"a": 1}}',
    label     text NOT NULL DEFAULT format('%s-{x}', 'v'),
    embedding vector({dim})
);
DO $$
BEGIN
    INSERT INTO plain_sql_probe (id, embedding)
    VALUES (current_setting('agentmem.embedding_dim')::int,
            array_fill(0.5::real, ARRAY[current_setting('agentmem.embedding_dim')::int])::vector);
END
$$;
"""


def test_released_migration_files_are_unchanged():
    files = {m.filename: m.checksum for m in migrations.discover(ROOT / "sql") if m.version <= 8}
    assert files == RELEASED
    for name, digest in RELEASED.items():  # the bytes as well, not only the runner's view of them
        assert hashlib.sha256((ROOT / "sql" / name).read_bytes()).hexdigest() == digest


def test_released_files_compose_to_the_statements_they_were_applied_as(pg_uri):
    """What the old runner sent, ``sql.SQL(text).format(dim=...)``, is what compose() sends."""
    with psycopg.connect(pg_uri) as conn:
        for mig in migrations.discover(ROOT / "sql"):
            if mig.version > 8:
                continue
            old = sql.SQL(mig.text).format(dim=sql.Literal(384)).as_string(conn)  # type: ignore[arg-type]
            assert migrations.compose(mig.text, 384).as_string(conn) == old, mig.filename


def test_a_migration_with_braces_and_percent_signs_applies_as_written(pg_uri, fresh_schema, tmp_path):
    directory = tmp_path / "sql"
    shutil.copytree(ROOT / "sql", directory)
    (directory / "099_plain_sql_probe.sql").write_text(BRACES)
    applied = migrations.migrate(pg_uri, schema=fresh_schema, dimension=16, model_name="probe", directory=directory)
    assert applied[-1] == "099_plain_sql_probe"
    with psycopg.connect(pg_uri) as conn:
        row = conn.execute(sql.SQL("SELECT id, doc, label, vector_dims(embedding), "
                                   "format_type(a.atttypid, a.atttypmod) FROM {}.plain_sql_probe, pg_attribute a "
                                   "WHERE a.attrelid = {}::regclass AND a.attname = 'embedding'").format(
            sql.Identifier(fresh_schema), sql.Literal(f"{fresh_schema}.plain_sql_probe"))).fetchone()
    assert row is not None
    assert row[0] == 16 and row[1] == {"tags": [], "nested": {"a": 1}} and row[2] == "v-{x}"
    assert row[3] == 16 and row[4].endswith("vector(16)")
