//! The deployment's own schema (`--db-schema`, `idempotent_tool` by
//! default): made if it is absent, and an earlier release's tables — which
//! lived in `public` — moved into it in place, rows, indexes, constraints
//! and identity sequences with them (`ALTER TABLE … SET SCHEMA`), before
//! any migration step runs. Every session of the service has the schema as
//! its whole `search_path` (`PgTarget::set_schema`), so the statements in
//! `sql` and the migrations name tables without a schema and find this
//! deployment's alone.
//!
//! It runs inside the migration's transaction, under its advisory lock, so
//! nodes starting at once make the schema and move the tables once. It never
//! moves a table while a node of an earlier release still uses it (a live
//! heartbeat in `public.instances`): that node's statements would stop
//! finding their tables. It refuses instead, naming the two ways out.

use super::super::db_schema::DbSchema;
use super::super::instance::DEAD_AFTER;
use super::session::{GenericClient, Transaction};

/// Every table a release that kept its tables in `public` made. A table
/// added since is created by its migration step in the deployment's schema
/// and never needs moving.
const EARLIER_TABLES: [&str; 6] = [
    "idem_schema",
    "calls",
    "effects",
    "audit",
    "instances",
    "business_keys",
];

/// Why the schema could not be prepared: the database's own error, or a
/// refusal to move tables that nodes of an earlier release still use.
pub(super) enum NotPrepared {
    Postgres(tokio_postgres::Error),
    InUse(String),
}

impl From<tokio_postgres::Error> for NotPrepared {
    fn from(e: tokio_postgres::Error) -> NotPrepared {
        NotPrepared::Postgres(e)
    }
}

/// Make `schema` if it does not exist, and move an earlier release's tables
/// from `public` into it when it holds none of its own yet. Returns the
/// tables moved (none on every start but the first).
pub(super) fn prepare(
    tx: &mut Transaction<'_>,
    schema: &DbSchema,
) -> Result<Vec<&'static str>, NotPrepared> {
    let earlier = schema.as_str() != "public" && earlier_layout(tx, schema)?;
    if earlier {
        refuse_while_earlier_nodes_run(tx)?;
    }
    let exists = tx
        .query_opt(
            "SELECT 1 FROM pg_namespace WHERE nspname = $1",
            &[&schema.as_str()],
        )?
        .is_some();
    if !exists {
        // Only when absent: `CREATE SCHEMA IF NOT EXISTS` would still need
        // CREATE on the database, which a role given its schema lacks.
        tx.batch_execute(&format!("CREATE SCHEMA {schema}"))?;
    }
    if !earlier {
        return Ok(Vec::new());
    }
    let mut moved = Vec::new();
    for table in EARLIER_TABLES {
        if in_public(tx, table)? {
            tx.batch_execute(&format!("ALTER TABLE public.{table} SET SCHEMA {schema}"))?;
            moved.push(table);
        }
    }
    Ok(moved)
}

/// `public` holds an earlier release's tables (its `idem_schema`) and
/// `schema` holds none yet.
fn earlier_layout(tx: &mut Transaction<'_>, schema: &DbSchema) -> Result<bool, NotPrepared> {
    let home = format!("{schema}.idem_schema");
    let row = tx.query_one(
        "SELECT to_regclass('public.idem_schema') IS NOT NULL,
                to_regclass($1) IS NOT NULL",
        &[&home],
    )?;
    Ok(row.get::<_, bool>(0) && !row.get::<_, bool>(1))
}

fn in_public(tx: &mut Transaction<'_>, table: &str) -> Result<bool, NotPrepared> {
    let name = format!("public.{table}");
    let row = tx.query_one("SELECT to_regclass($1) IS NOT NULL", &[&name])?;
    Ok(row.get(0))
}

/// Refuse while a node of the earlier release has heart-beaten within
/// `DEAD_AFTER` and not stopped: it reads and writes `public`'s tables.
fn refuse_while_earlier_nodes_run(tx: &mut Transaction<'_>) -> Result<(), NotPrepared> {
    if !in_public(tx, "instances")? {
        return Ok(());
    }
    let live: i64 = tx
        .query_one(
            "SELECT count(*) FROM public.instances
              WHERE stopped_at IS NULL
                AND heartbeat_at > extract(epoch FROM now())::float8 - $1",
            &[&DEAD_AFTER.as_secs_f64()],
        )?
        .get(0);
    if live == 0 {
        return Ok(());
    }
    Err(NotPrepared::InUse(format!(
        "the service's tables are in schema public, where {live} node(s) of an earlier \
         release still run (a heartbeat within {} s); stop them and start again to move \
         the tables into the new schema, or give --db-schema public to keep them where \
         they are",
        DEAD_AFTER.as_secs()
    )))
}

impl From<NotPrepared> for super::super::error::StoreError {
    fn from(why: NotPrepared) -> Self {
        match why {
            NotPrepared::Postgres(e) => super::error::store_error(e),
            NotPrepared::InUse(message) => super::super::error::StoreError::internal(message),
        }
    }
}
