//! The migrations are written once (`migrations/README.md`): those both
//! engines accept as they are in `migrations/shared`, and only the versions
//! whose SQL must differ in `migrations/sqlite` and `migrations/postgres`.
//! These tests keep that true and safe:
//!
//! - `both_engines_end_with_the_same_schema` migrates a fresh SQLite file
//!   and a fresh PostgreSQL database with `Store::migrate` and compares what
//!   the catalogues say: tables, columns (name, integer or text, nullability,
//!   default), indexes (table, key columns and their order, unique or not,
//!   partial or not and the predicate) and foreign keys. The PostgreSQL part
//!   runs when the server answers; with `BILLING_TEST_FLEET=1` (CI) an
//!   unreachable server is a failure, otherwise a skip.
//! - `each_version_is_written_once`: a version is in `shared` or in both
//!   engine folders (then listed in `ENGINE_SPECIFIC`, and different), never
//!   both; and what the store embeds is exactly these files.
//! - `deployed_migrations_never_change`: sqlx records each applied
//!   migration's SHA-384 in `_sqlx_migrations`, and refuses to start on a
//!   database whose recorded checksum no longer matches the file; the
//!   checksums of migrations are pinned here so that such an edit fails in CI
//!   instead of at deployment.

use sha2::{Digest, Sha384};
use sqlx::{Connection, Executor, PgConnection};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Known differences between the schemas the two engines end with, as the
/// lines `both_engines_end_with_the_same_schema` prints (`only in sqlite: …`
/// or `only in postgres: …`), each with the reason it is accepted. An entry
/// that no longer matches a difference fails the test: remove it.
///
/// Empty: the two folders give the same schema today.
const ACCEPTED_SCHEMA_DIFFERENCES: &[(&str, &str)] = &[];

/// Versions whose SQL differs between the engines, with the reason. Every
/// other version present in both folders must be byte-identical.
const ENGINE_SPECIFIC: &[(&str, &str)] = &[
    (
        "0010",
        "SQLite cannot drop a NOT NULL constraint in place, so it rebuilds `events` \
         (the rule becomes an unnamed CHECK); PostgreSQL alters the column and adds \
         the named CHECK events_data_until_fanned_out",
    ),
    (
        "0021",
        "autovacuum settings of the tables retention churns are PostgreSQL's \
         storage parameters; SQLite has no vacuum to pace and runs a no-op",
    ),
    (
        "0033",
        "the fillfactor of webhook_deliveries is a PostgreSQL storage parameter; \
         SQLite rewrites a row in place and runs a no-op",
    ),
];

/// The SHA-384 (sqlx's checksum) of every migration: file name, the SQLite
/// file's, the PostgreSQL file's. A deployed migration must never change;
/// add a line for each new migration (the failure message prints it).
const PINNED: &[(&str, &str, &str)] = &[
    (
        "0001_administration.sql",
        "0a5b39c1542542e438b3abbbb22cf3126b6b3ce6c79c16c3855963e9088580a6060d4540f06004bae7e07b52792e5f12",
        "0a5b39c1542542e438b3abbbb22cf3126b6b3ce6c79c16c3855963e9088580a6060d4540f06004bae7e07b52792e5f12",
    ),
    (
        "0002_webhooks.sql",
        "760cf18d5285746c4ce9becf02f3f881ef798941303685b6466c2591ebae2b5ba402f718565eab66a080f4a67f8077bd",
        "760cf18d5285746c4ce9becf02f3f881ef798941303685b6466c2591ebae2b5ba402f718565eab66a080f4a67f8077bd",
    ),
    (
        "0003_dispatch.sql",
        "616d3f77f573e5465d21dd55a19dbe3e65fa173b76117dcc1908ab3dbe339b0d4e772ff44c29cdfdd2baa996562f20f7",
        "616d3f77f573e5465d21dd55a19dbe3e65fa173b76117dcc1908ab3dbe339b0d4e772ff44c29cdfdd2baa996562f20f7",
    ),
    (
        "0004_admin_replaceable.sql",
        "a794b7fa70e70fb79d951cc71d2767f0868bd456528452fe3e943f4ee40a7a28c5afec0099ae36d633b30dce2c2b908f",
        "a794b7fa70e70fb79d951cc71d2767f0868bd456528452fe3e943f4ee40a7a28c5afec0099ae36d633b30dce2c2b908f",
    ),
    (
        "0005_dispatch_indexes.sql",
        "300fd3de2d24a289a45343116613ba5fa50573d28e63a70df826afc75fb37e1049e4dc49a4f587eb623d36b7d4c700bb",
        "300fd3de2d24a289a45343116613ba5fa50573d28e63a70df826afc75fb37e1049e4dc49a4f587eb623d36b7d4c700bb",
    ),
    (
        "0006_drop_status_due_index.sql",
        "26046e13d9672e0efea92d791087e424d2f54ac66b7a91579fbba04d6c01e6e5cc473a5c4f1ab2b180221ccbfd795787",
        "26046e13d9672e0efea92d791087e424d2f54ac66b7a91579fbba04d6c01e6e5cc473a5c4f1ab2b180221ccbfd795787",
    ),
    (
        "0007_outbox.sql",
        "8a60e103d22416e1cd1271efa17961909be2562c7c1639ab6d85982f1b6b0ddd849ef81e7d1f38db6e6926368570c403",
        "8a60e103d22416e1cd1271efa17961909be2562c7c1639ab6d85982f1b6b0ddd849ef81e7d1f38db6e6926368570c403",
    ),
    (
        "0008_lean_write_indexes.sql",
        "e07d174b171184b0fd237aa1e9504c23c6e0291926871b101adeea2f81040617e9941163c92745f1dd24c832c5ed3b8d",
        "e07d174b171184b0fd237aa1e9504c23c6e0291926871b101adeea2f81040617e9941163c92745f1dd24c832c5ed3b8d",
    ),
    (
        "0009_drop_attempts_by_endpoint.sql",
        "44f33cbe16d24dede6540e2e580b04ffd2d21c2c9f955cd7a52e83b3109c27b2a1fb6ef1da4ccc55108da15936aa4715",
        "44f33cbe16d24dede6540e2e580b04ffd2d21c2c9f955cd7a52e83b3109c27b2a1fb6ef1da4ccc55108da15936aa4715",
    ),
    (
        "0010_events_data_until_fanned_out.sql",
        "6ddc2d92ee151d1c8cfbefabca1f5787bc6e8313c6fa1f7c70fdd5e678061fc06fd8e2ab89d7de6e888ad80326af57c5",
        "d58a38674a73d501026197177b1857fc0570f923c4f5889b684d529ab199802418e18b50bb2eeecc0f2f442262ec67b7",
    ),
    (
        "0011_catalogue.sql",
        "6763f47bf25868cff491720cd4e7a8dc460b61e5b9d2a02a3560a472b676f567ce05d804d417d80a8a99c0877db4e4bb",
        "6763f47bf25868cff491720cd4e7a8dc460b61e5b9d2a02a3560a472b676f567ce05d804d417d80a8a99c0877db4e4bb",
    ),
    (
        "0012_checkout.sql",
        "5f275839de6deec29296da141712b6a25189b71e6f48042bb8e30e2634e7b8ca38b9742bb65ed7c4613892909c80fe50",
        "5f275839de6deec29296da141712b6a25189b71e6f48042bb8e30e2634e7b8ca38b9742bb65ed7c4613892909c80fe50",
    ),
    (
        "0013_refunds_and_timed_work.sql",
        "57a18114fb2eef704ffbf13e04a6401ee202e923c6c0152fc86e85e8df7d6ae912f1893ace8ca3fb2dd893baf2a02659",
        "57a18114fb2eef704ffbf13e04a6401ee202e923c6c0152fc86e85e8df7d6ae912f1893ace8ca3fb2dd893baf2a02659",
    ),
    (
        "0014_projected_events.sql",
        "0d78ee96563581962f277aeaca4a28243185348d109b4456639b3ff72116929a0563de92ed2b4b18249f398a732ceb59",
        "0d78ee96563581962f277aeaca4a28243185348d109b4456639b3ff72116929a0563de92ed2b4b18249f398a732ceb59",
    ),
    (
        "0015_store_identity.sql",
        "25f4bbee3c4701422552afe5b8c50c5523c3ca74feab55435c600237936900dc53f7717a4c7cf7367d1dcd571f6897ef",
        "25f4bbee3c4701422552afe5b8c50c5523c3ca74feab55435c600237936900dc53f7717a4c7cf7367d1dcd571f6897ef",
    ),
    (
        "0016_custom_field_refs.sql",
        "9351338e3646ef7f5792f0437f48e375f3568a6b0674aaa7c7e0aac958a8fe517397e590a3a0aae8f1fc564362062e8c",
        "9351338e3646ef7f5792f0437f48e375f3568a6b0674aaa7c7e0aac958a8fe517397e590a3a0aae8f1fc564362062e8c",
    ),
    (
        "0017_retention.sql",
        "e1636a9827e880a5a2d32af025390a0dd01cfa4b83af5beaf21eba8d8c0d8e5a63dfb56bbfff09fb3baffdd75c87e3f9",
        "e1636a9827e880a5a2d32af025390a0dd01cfa4b83af5beaf21eba8d8c0d8e5a63dfb56bbfff09fb3baffdd75c87e3f9",
    ),
    (
        "0018_operator_api.sql",
        "c79daec95acee62af7ef2d3c83f74527123dd42d85f85f9d82df840d29d05c69314ce98b092782e2cc14335a8607335a",
        "c79daec95acee62af7ef2d3c83f74527123dd42d85f85f9d82df840d29d05c69314ce98b092782e2cc14335a8607335a",
    ),
    (
        "0019_redrive_jobs.sql",
        "77c5cf079dab7b57ec2344121e99b02ea7569424aa39f346d6c235d528553370a44ee66d69ecd3399fae25e73bc93ca8",
        "77c5cf079dab7b57ec2344121e99b02ea7569424aa39f346d6c235d528553370a44ee66d69ecd3399fae25e73bc93ca8",
    ),
    (
        "0020_subscriptions_over_time.sql",
        "e3f6062d751ba8a7a3802b9c57b3b86e5c822ba525372a33d48c4b04171a701c7b29b03a2dfdfdbb92cbae5445210089",
        "e3f6062d751ba8a7a3802b9c57b3b86e5c822ba525372a33d48c4b04171a701c7b29b03a2dfdfdbb92cbae5445210089",
    ),
    (
        "0021_vacuum_churned_tables.sql",
        "6fb3df6345faac4fbb4daeea0e1733c40fb4aa1c97a89d96c51e9fe6c7fb4d64d6cfd87460ad9ca6cd14a8e8510c3569",
        "01f64a2cbccee4754ee5036916a52bad42169c943c0a6303d0d44d6bcaa7a4cbf709e12ae4c03462d649b21ac639833f",
    ),
    (
        "0022_order_per_key.sql",
        "d9b4386461bc2acf9e04eb7fc66901148c5b8d1ffeee59920fa63df15c4429ec9ee63dcd57aef83f9547358c8aa99ee4",
        "d9b4386461bc2acf9e04eb7fc66901148c5b8d1ffeee59920fa63df15c4429ec9ee63dcd57aef83f9547358c8aa99ee4",
    ),
    (
        "0023_filters_and_operational_events.sql",
        "accdba4d68c4de90544e4f6febd5776c5134dd31b8e5bc0347ddecbaaf055c14840859454ccb87ea86665c8fbd9cf4c4",
        "accdba4d68c4de90544e4f6febd5776c5134dd31b8e5bc0347ddecbaaf055c14840859454ccb87ea86665c8fbd9cf4c4",
    ),
    (
        "0024_deliveries_by_environment.sql",
        "46d887841c8c9b9bed135de70f55ba5bb63a970e76834da89310701269f499935d99d0ad514d0b96234d4ee75ab21993",
        "46d887841c8c9b9bed135de70f55ba5bb63a970e76834da89310701269f499935d99d0ad514d0b96234d4ee75ab21993",
    ),
    (
        "0025_endpoint_limits.sql",
        "a744208a84385fbada579eefca805d44acf1e3663851c07b218c62958715380e1a4578c614d2192ed51e27693ad7456d",
        "a744208a84385fbada579eefca805d44acf1e3663851c07b218c62958715380e1a4578c614d2192ed51e27693ad7456d",
    ),
    (
        "0026_test_clock_failed_jobs.sql",
        "97aaf62af97b9f69d8f6537e43919b7dc0f6700da47b357d6fdb982a22c0047bed2381e902c488a3fed28fe0c7ae1d29",
        "97aaf62af97b9f69d8f6537e43919b7dc0f6700da47b357d6fdb982a22c0047bed2381e902c488a3fed28fe0c7ae1d29",
    ),
    (
        "0027_redrive_jobs_retention.sql",
        "0024122ecd517e17b46883652e812afdc94cd2c0c4450a1cc358d6fc386bdea74287a095562fad7c5aed2321c4a61719",
        "0024122ecd517e17b46883652e812afdc94cd2c0c4450a1cc358d6fc386bdea74287a095562fad7c5aed2321c4a61719",
    ),
    (
        "0028_invoice_lines.sql",
        "0357cc0229d2cf64fabc73e256577c376db11f9f1365769fb662a9fc1f9f9523b8cd181bfa99a4d77fe051f0fbb5d2ce",
        "0357cc0229d2cf64fabc73e256577c376db11f9f1365769fb662a9fc1f9f9523b8cd181bfa99a4d77fe051f0fbb5d2ce",
    ),
    (
        "0029_price_changes.sql",
        "ba4793c1e2507227050805bfa745efc34b0ae196064e79f03f56c54319f80307373a145a9901da35318fcba322056f48",
        "ba4793c1e2507227050805bfa745efc34b0ae196064e79f03f56c54319f80307373a145a9901da35318fcba322056f48",
    ),
    (
        "0030_trials.sql",
        "931b10830df00b87dff121c717a43725020207260dd7aa6929dbfe881429bffd7ec9b74ed97732407c20eeecd32f8d96",
        "931b10830df00b87dff121c717a43725020207260dd7aa6929dbfe881429bffd7ec9b74ed97732407c20eeecd32f8d96",
    ),
    (
        "0031_period_anchor.sql",
        "755f9986953ee638827f1098b1db9e58d00532c68570081416deb24eebe5fa906c3b30812e5194c85d86b6f1c403910b",
        "755f9986953ee638827f1098b1db9e58d00532c68570081416deb24eebe5fa906c3b30812e5194c85d86b6f1c403910b",
    ),
    (
        "0032_event_data_once.sql",
        "be09908ebea1082d777d9ccd75d5db82effc043c8fbfad728b32830f3af8c8aee21c1747f4019ea43ed345c844df7be9",
        "be09908ebea1082d777d9ccd75d5db82effc043c8fbfad728b32830f3af8c8aee21c1747f4019ea43ed345c844df7be9",
    ),
    (
        "0033_deliveries_room_to_update.sql",
        "90be1a152a4245e9c24b2f9188d9867acc9fb4fa3949d7f710266f84e4bf17179796f3db18c73edfcccdfc90af05f544",
        "995c388f00c31123ae7fe413c748fe35c1030f52f49283fa0725be1f75010275a03e13cb9c2f41e2400dfe099135d567",
    ),
    (
        "0034_failed_deliveries_lists.sql",
        "1476b27d6ea9e30216fdb5c250d5d6890b7db3eefede442e31a0bdadfaf640de05657ce4a0f3ce34a97e8a48b493348a",
        "1476b27d6ea9e30216fdb5c250d5d6890b7db3eefede442e31a0bdadfaf640de05657ce4a0f3ce34a97e8a48b493348a",
    ),
    (
        "0035_list_indexes_without_tie_breaker.sql",
        "01e06da5d80a6043b3ddd42f0308718d410f8d779821680a46f4ac1fdd69c20bc4f2c31638af81b4337b22b2f15f5359",
        "01e06da5d80a6043b3ddd42f0308718d410f8d779821680a46f4ac1fdd69c20bc4f2c31638af81b4337b22b2f15f5359",
    ),
    (
        "0036_success_kept_on_delivery.sql",
        "6e04cebb3e6b537cf448723545aedb96a9758fa0dc39b01e56f23219ce925179ebcd3ff3450dad850ee812584059cf65",
        "6e04cebb3e6b537cf448723545aedb96a9758fa0dc39b01e56f23219ce925179ebcd3ff3450dad850ee812584059cf65",
    ),
    (
        "0037_event_copy_on_event.sql",
        "6540a128d18f6e3aaca5bb0629aac727e78c351dca401251d53777fba935cce672837d4cf91f5d129db0a43c0923a55d",
        "6540a128d18f6e3aaca5bb0629aac727e78c351dca401251d53777fba935cce672837d4cf91f5d129db0a43c0923a55d",
    ),
];

// ---------------------------------------------------------------------------
// The migration files.

fn migrations_dir(folder: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("migrations")
        .join(folder)
}

/// The `.sql` files of one folder: file name to contents.
fn folder_files(folder: &str) -> BTreeMap<String, Vec<u8>> {
    let dir = migrations_dir(folder);
    std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
        .map(|entry| entry.expect("directory entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "sql"))
        .map(|path| {
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            let bytes = std::fs::read(&path).expect("read migration");
            (name, bytes)
        })
        .collect()
}

/// What one engine applies: the shared files and its own.
fn migration_files(engine: &str) -> BTreeMap<String, Vec<u8>> {
    let mut all = folder_files("shared");
    all.extend(folder_files(engine));
    all
}

/// `0010_events_data_until_fanned_out.sql` → `0010`.
fn version_of(file: &str) -> &str {
    file.split('_').next().unwrap_or(file)
}

fn sha384_hex(bytes: &[u8]) -> String {
    Sha384::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[test]
fn each_version_is_written_once() {
    let shared = folder_files("shared");
    let sqlite = folder_files("sqlite");
    let postgres = folder_files("postgres");
    assert!(!shared.is_empty());
    let mut problems = Vec::new();
    let versions = |files: &BTreeMap<String, Vec<u8>>| -> BTreeMap<String, String> {
        files
            .keys()
            .map(|name| (version_of(name).to_owned(), name.clone()))
            .collect()
    };
    let (common, lite, pg) = (versions(&shared), versions(&sqlite), versions(&postgres));
    for (engine, own, other) in [("sqlite", &lite, &pg), ("postgres", &pg, &lite)] {
        for (version, name) in own {
            if common.contains_key(version) {
                problems.push(format!(
                    "version {version} is in migrations/shared and migrations/{engine}: \
                     write it once"
                ));
            }
            match other.get(version) {
                None => problems.push(format!(
                    "{name} is only in migrations/{engine}: write it once in migrations/shared, \
                     or for both engines"
                )),
                // sqlx takes the description from the name.
                Some(o) if o != name => problems.push(format!(
                    "version {version} is {name} here and {o} for the other engine: use one name"
                )),
                Some(_) => {}
            }
            if !ENGINE_SPECIFIC.iter().any(|(v, _)| v == version) {
                problems.push(format!(
                    "{name} is engine-specific: add (\"{version}\", \"<why>\") to ENGINE_SPECIFIC"
                ));
            }
        }
    }
    for (name, bytes) in &sqlite {
        if postgres.get(name) == Some(bytes) {
            problems.push(format!(
                "{name} is the same for both engines: move it to migrations/shared"
            ));
        }
    }
    for (version, reason) in ENGINE_SPECIFIC {
        assert!(
            !reason.trim().is_empty(),
            "ENGINE_SPECIFIC {version}: give the reason"
        );
        if !lite.contains_key(*version) {
            problems.push(format!(
                "ENGINE_SPECIFIC lists {version}, which has no engine-specific files"
            ));
        }
    }
    // The store embeds exactly these files, in version order.
    for (engine, backend) in [
        ("sqlite", store::Backend::Sqlite),
        ("postgres", store::Backend::Postgres),
    ] {
        let files = migration_files(engine);
        let embedded: Vec<(String, Vec<u8>)> = store::db::migrations::files(backend)
            .iter()
            .map(|(name, sql)| ((*name).to_owned(), sql.as_bytes().to_vec()))
            .collect();
        let on_disk: Vec<(String, Vec<u8>)> = files.into_iter().collect();
        if embedded != on_disk {
            problems.push(format!(
                "the {engine} migrations embedded in the store are not the files (rebuild)"
            ));
        }
    }
    assert!(
        problems.is_empty(),
        "migration folders:\n  {}",
        problems.join("\n  ")
    );
}

#[test]
fn deployed_migrations_never_change() {
    let sqlite = migration_files("sqlite");
    let postgres = migration_files("postgres");
    let names: BTreeSet<&String> = sqlite.keys().chain(postgres.keys()).collect();
    let mut problems = Vec::new();
    for name in names {
        let lite = sqlite.get(name).map(|b| sha384_hex(b));
        let pg = postgres.get(name).map(|b| sha384_hex(b));
        let (Some(lite), Some(pg)) = (lite, pg) else {
            continue; // `each_version_is_written_once` reports it.
        };
        match PINNED.iter().find(|(file, _, _)| file == name) {
            None => problems.push(format!(
                "{name} is not pinned yet; once it is final, add to PINNED:\n    \
                 (\"{name}\", \"{lite}\", \"{pg}\"),"
            )),
            Some((_, want_lite, want_pg)) => {
                if lite != *want_lite {
                    problems.push(format!("{name} for SQLite changed (SHA-384 {lite})"));
                }
                if pg != *want_pg {
                    problems.push(format!("{name} for PostgreSQL changed (SHA-384 {pg})"));
                }
            }
        }
    }
    for (file, _, _) in PINNED {
        if !sqlite.contains_key(*file) || !postgres.contains_key(*file) {
            problems.push(format!("pinned migration {file} is missing for an engine"));
        }
    }
    assert!(
        problems.is_empty(),
        "a migration that may have been applied somewhere must never change (sqlx compares \
         its checksum with the one recorded in _sqlx_migrations and refuses to start); write \
         a new migration instead:\n  {}",
        problems.join("\n  ")
    );
}

// ---------------------------------------------------------------------------
// The schema each engine ends with, as comparable lines:
//
//   table events
//   column events.data text null
//   column webhook_endpoints.version integer not null default 1
//   index events.events_pending (status, received_at) partial where status = 'pending'
//   index webhook_deliveries.<unique constraint> (event_ref, endpoint_ref, dto_version) unique
//   foreign key credentials (principal_ref) -> service_accounts (principal_ref)
//
// Indexes that back a PRIMARY KEY or UNIQUE constraint are named by the
// engine (`sqlite_autoindex_…`, `…_pkey`, `…_key`), so they are compared
// without their name.

/// sqlx's bookkeeping table, not part of the schema.
const SQLX_TABLE: &str = "_sqlx_migrations";

/// SQLite's affinity rules (a declared type containing INT is an integer,
/// CHAR, CLOB or TEXT a text).
fn sqlite_type_class(declared: &str) -> String {
    let upper = declared.to_ascii_uppercase();
    if upper.contains("INT") {
        "integer".into()
    } else if ["CHAR", "CLOB", "TEXT"].iter().any(|t| upper.contains(t)) {
        "text".into()
    } else {
        format!("other:{declared}")
    }
}

fn postgres_type_class(data_type: &str) -> String {
    match data_type {
        "smallint" | "integer" | "bigint" => "integer".into(),
        "text" | "character varying" | "character" => "text".into(),
        other => format!("other:{other}"),
    }
}

/// A default or an index predicate written comparably: PostgreSQL's casts
/// (`'x'::text`) and parentheses dropped, its `= ANY (ARRAY[…])` read back
/// as the `IN (…)` it was written as, spaces collapsed, lower case.
fn normalise_expr(expr: &str) -> String {
    let mut s = expr.to_owned();
    for cast in ["::text", "::bigint", "::integer", "::character varying"] {
        s = s.replace(cast, "");
    }
    s.replace(['(', ')'], " ")
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .to_lowercase()
        .replace("= any array[", "in ")
        .replace(']', "")
}

fn column_line(
    table: &str,
    name: &str,
    class: &str,
    not_null: bool,
    default: Option<&str>,
) -> String {
    let mut line = format!(
        "column {table}.{name} {class} {}",
        if not_null { "not null" } else { "null" }
    );
    if let Some(default) = default {
        line.push_str(&format!(" default {}", normalise_expr(default)));
    }
    line
}

/// `origin`: `pk`, `u` (constraint) or `c` (CREATE INDEX), as SQLite's
/// `pragma_index_list` says.
fn index_line(
    table: &str,
    name: &str,
    origin: &str,
    columns: &[String],
    unique: bool,
    predicate: Option<&str>,
) -> String {
    let name = match origin {
        "pk" => "<primary key>",
        "u" => "<unique constraint>",
        _ => name,
    };
    let mut line = format!("index {table}.{name} ({})", columns.join(", "));
    if unique {
        line.push_str(" unique");
    }
    if let Some(predicate) = predicate {
        line.push_str(&format!(" partial where {}", normalise_expr(predicate)));
    }
    line
}

fn sqlite_schema(file: &Path) -> BTreeSet<String> {
    let db = rusqlite::Connection::open(file).expect("open the migrated SQLite file");
    let mut lines = BTreeSet::new();
    let tables: Vec<String> = db
        .prepare(
            "SELECT name FROM sqlite_master WHERE type = 'table' \
             AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\' AND name <> ?1 ORDER BY name",
        )
        .unwrap()
        .query_map([SQLX_TABLE], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    for table in &tables {
        lines.insert(format!("table {table}"));

        let mut primary_key = Vec::<(i64, String)>::new();
        let mut stmt = db
            .prepare("SELECT name, type, \"notnull\", dflt_value, pk FROM pragma_table_info(?1)")
            .unwrap();
        let mut rows = stmt.query([table]).unwrap();
        while let Some(r) = rows.next().unwrap() {
            let name: String = r.get(0).unwrap();
            let declared: String = r.get(1).unwrap();
            let not_null: bool = r.get(2).unwrap();
            let default: Option<String> = r.get(3).unwrap();
            let pk: i64 = r.get(4).unwrap();
            if pk > 0 {
                primary_key.push((pk, name.clone()));
            }
            // A PRIMARY KEY column counts as NOT NULL, as in PostgreSQL.
            // (SQLite, for compatibility with old versions, actually lets a
            // non-INTEGER primary key of a rowid table hold NULL; the store
            // never writes one, and both migrations declare the same key.)
            let not_null = not_null || pk > 0;
            lines.insert(column_line(
                table,
                &name,
                &sqlite_type_class(&declared),
                not_null,
                default.as_deref(),
            ));
        }
        primary_key.sort();

        let indexes: Vec<(String, bool, String, bool)> = db
            .prepare("SELECT name, \"unique\", origin, partial FROM pragma_index_list(?1)")
            .unwrap()
            .query_map([table], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
            })
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        for (index, unique, origin, partial) in indexes {
            let columns: Vec<String> = db
                .prepare(
                    "SELECT name, \"desc\" FROM pragma_index_xinfo(?1) WHERE key = 1 ORDER BY seqno",
                )
                .unwrap()
                .query_map([&index], |r| {
                    let name: Option<String> = r.get(0)?;
                    let desc: bool = r.get(1)?;
                    let name = name.unwrap_or_else(|| "<expression>".into());
                    Ok(if desc { format!("{name} desc") } else { name })
                })
                .unwrap()
                .collect::<Result<_, _>>()
                .unwrap();
            let predicate = if partial {
                let sql: String = db
                    .query_row(
                        "SELECT sql FROM sqlite_master WHERE type = 'index' AND name = ?1",
                        [&index],
                        |r| r.get(0),
                    )
                    .unwrap();
                let at = sql
                    .to_ascii_uppercase()
                    .rfind(" WHERE ")
                    .expect("a partial index has a WHERE");
                Some(
                    sql[at + " WHERE ".len()..]
                        .trim()
                        .trim_end_matches(';')
                        .to_owned(),
                )
            } else {
                None
            };
            lines.insert(index_line(
                table,
                &index,
                &origin,
                &columns,
                unique,
                predicate.as_deref(),
            ));
        }

        // foreign keys: one row per column, grouped by id; a reference
        // without columns means the parent's primary key.
        let mut fks = BTreeMap::<i64, (String, Vec<String>, Vec<Option<String>>)>::new();
        let mut stmt = db
            .prepare(
                "SELECT id, \"table\", \"from\", \"to\" FROM pragma_foreign_key_list(?1) \
                 ORDER BY id, seq",
            )
            .unwrap();
        let mut rows = stmt.query([table]).unwrap();
        while let Some(r) = rows.next().unwrap() {
            let fk = fks
                .entry(r.get(0).unwrap())
                .or_insert_with(|| (r.get(1).unwrap(), Vec::new(), Vec::new()));
            fk.1.push(r.get(2).unwrap());
            fk.2.push(r.get(3).unwrap());
        }
        for (parent, from, to) in fks.into_values() {
            let to: Vec<String> = if to.iter().all(Option::is_none) {
                db.prepare("SELECT name FROM pragma_table_info(?1) WHERE pk > 0 ORDER BY pk")
                    .unwrap()
                    .query_map([&parent], |r| r.get(0))
                    .unwrap()
                    .collect::<Result<_, _>>()
                    .unwrap()
            } else {
                to.into_iter().map(Option::unwrap_or_default).collect()
            };
            lines.insert(format!(
                "foreign key {table} ({}) -> {parent} ({})",
                from.join(", "),
                to.join(", ")
            ));
        }
    }
    lines
}

async fn postgres_schema(conn: &mut PgConnection) -> BTreeSet<String> {
    let mut lines = BTreeSet::new();
    let tables: Vec<String> = sqlx::query_scalar(
        "SELECT table_name::text FROM information_schema.tables \
         WHERE table_schema = current_schema() AND table_type = 'BASE TABLE' \
         AND table_name <> $1",
    )
    .bind(SQLX_TABLE)
    .fetch_all(&mut *conn)
    .await
    .expect("list tables");
    for table in &tables {
        lines.insert(format!("table {table}"));
    }

    let columns: Vec<(String, String, String, String, Option<String>)> = sqlx::query_as(
        "SELECT table_name::text, column_name::text, data_type::text, is_nullable::text, \
                column_default::text \
         FROM information_schema.columns \
         WHERE table_schema = current_schema() AND table_name <> $1",
    )
    .bind(SQLX_TABLE)
    .fetch_all(&mut *conn)
    .await
    .expect("list columns");
    for (table, name, data_type, nullable, default) in columns {
        if tables.contains(&table) {
            lines.insert(column_line(
                &table,
                &name,
                &postgres_type_class(&data_type),
                nullable == "NO",
                default.as_deref(),
            ));
        }
    }

    // One row per key column of each index.
    type IndexColumn = (
        String,
        String,
        bool,
        bool,
        Option<String>,
        String,
        i64,
        String,
        bool,
    );
    let index_columns: Vec<IndexColumn> = sqlx::query_as(
        "SELECT t.relname::text, c.relname::text, i.indisunique, i.indisprimary, \
                pg_get_expr(i.indpred, i.indrelid), \
                COALESCE((SELECT k.contype::text FROM pg_constraint k \
                          WHERE k.conindid = i.indexrelid AND k.conrelid = i.indrelid \
                            AND k.contype IN ('p', 'u')), 'c'), \
                col.ord, COALESCE(a.attname::text, '<expression>'), \
                (i.indoption[(col.ord - 1)::int] & 1) = 1 \
         FROM pg_index i \
         JOIN pg_class c ON c.oid = i.indexrelid \
         JOIN pg_class t ON t.oid = i.indrelid \
         JOIN pg_indexes x ON x.schemaname = current_schema() \
                          AND x.tablename = t.relname AND x.indexname = c.relname \
         CROSS JOIN LATERAL unnest(i.indkey::int2[]) WITH ORDINALITY AS col(attnum, ord) \
         LEFT JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = col.attnum \
                                 AND col.attnum <> 0 \
         WHERE t.relname <> $1 AND col.ord <= i.indnkeyatts \
         ORDER BY t.relname, c.relname, col.ord",
    )
    .bind(SQLX_TABLE)
    .fetch_all(&mut *conn)
    .await
    .expect("list indexes");
    let mut indexes =
        BTreeMap::<(String, String), (bool, String, Option<String>, Vec<String>)>::new();
    for (table, index, unique, primary, predicate, contype, _ord, column, desc) in index_columns {
        let origin = match (primary, contype.as_str()) {
            (true, _) | (_, "p") => "pk",
            (_, "u") => "u",
            _ => "c",
        };
        let entry = indexes
            .entry((table, index))
            .or_insert_with(|| (unique, origin.to_owned(), predicate, Vec::new()));
        entry.3.push(if desc {
            format!("{column} desc")
        } else {
            column
        });
    }
    for ((table, index), (unique, origin, predicate, columns)) in indexes {
        lines.insert(index_line(
            &table,
            &index,
            &origin,
            &columns,
            unique,
            predicate.as_deref(),
        ));
    }

    // One row per column pair of each foreign key.
    let fk_columns: Vec<(String, String, String, String, String)> = sqlx::query_as(
        "SELECT t.relname::text, k.conname::text, p.relname::text, a.attname::text, \
                pa.attname::text \
         FROM pg_constraint k \
         JOIN pg_class t ON t.oid = k.conrelid \
         JOIN pg_namespace n ON n.oid = t.relnamespace \
         JOIN pg_class p ON p.oid = k.confrelid \
         CROSS JOIN LATERAL unnest(k.conkey, k.confkey) WITH ORDINALITY AS col(attnum, pattnum, ord) \
         JOIN pg_attribute a ON a.attrelid = k.conrelid AND a.attnum = col.attnum \
         JOIN pg_attribute pa ON pa.attrelid = k.confrelid AND pa.attnum = col.pattnum \
         WHERE k.contype = 'f' AND n.nspname = current_schema() \
         ORDER BY t.relname, k.conname, col.ord",
    )
    .fetch_all(&mut *conn)
    .await
    .expect("list foreign keys");
    let mut fks = BTreeMap::<(String, String), (String, Vec<String>, Vec<String>)>::new();
    for (table, name, parent, column, parent_column) in fk_columns {
        let fk = fks
            .entry((table, name))
            .or_insert_with(|| (parent, Vec::new(), Vec::new()));
        fk.1.push(column);
        fk.2.push(parent_column);
    }
    for ((table, _), (parent, from, to)) in fks {
        lines.insert(format!(
            "foreign key {table} ({}) -> {parent} ({})",
            from.join(", "),
            to.join(", ")
        ));
    }
    lines
}

// ---------------------------------------------------------------------------
// Fresh databases.

fn unique_suffix() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("{:012x}", nanos & 0xffff_ffff_ffff)
}

/// A folder of our own under the system's temporary folder, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> TempDir {
        let dir = std::env::temp_dir().join(format!(
            "billing-schema-{}-{}",
            std::process::id(),
            unique_suffix()
        ));
        std::fs::create_dir_all(&dir).expect("create a temporary folder");
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The server the PostgreSQL tests use (as in `tests/src/pg.rs`).
fn pg_admin_url() -> String {
    std::env::var("BILLING_TEST_PG_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_owned())
}

fn pg_url_for(db: &str) -> String {
    let base = pg_admin_url();
    let cut = base.rfind('/').expect("a database in BILLING_TEST_PG_URL");
    format!("{}/{db}", &base[..cut])
}

/// A database of our own, dropped on drop (even when the test panics).
/// Named `billing_t…_<pid>_<suffix>` like `tests/src/pg.rs`'s, so that a
/// leftover of a killed run is swept by the next run of the fleet tests.
struct PgDatabase {
    name: String,
}

impl Drop for PgDatabase {
    fn drop(&mut self) {
        let sql = format!("DROP DATABASE IF EXISTS \"{}\" WITH (FORCE)", self.name);
        // Drop may run inside the test's runtime: use a thread of its own.
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .ok()?;
            rt.block_on(async {
                let mut conn = PgConnection::connect(&pg_admin_url()).await.ok()?;
                conn.execute(sql.as_str()).await.ok()
            })
        })
        .join();
    }
}

async fn migrated_sqlite_schema() -> BTreeSet<String> {
    let dir = TempDir::new();
    let file = dir.0.join("store.db");
    let store = store::Store::connect(&format!("sqlite://{}", file.display()))
        .await
        .expect("open a fresh SQLite store");
    store.migrate().await.expect("SQLite migrations apply");
    store.close().await;
    drop(store);
    sqlite_schema(&file)
}

/// `None` when PostgreSQL is unreachable and `BILLING_TEST_FLEET` is not
/// `1` (the skip is printed).
async fn migrated_postgres_schema() -> Option<BTreeSet<String>> {
    let fleet = std::env::var("BILLING_TEST_FLEET").is_ok_and(|v| v == "1");
    let mut admin = match PgConnection::connect(&pg_admin_url()).await {
        Ok(conn) => conn,
        Err(e) if fleet => panic!(
            "BILLING_TEST_FLEET=1 but PostgreSQL is not reachable at {}: {e}",
            pg_admin_url()
        ),
        Err(e) => {
            eprintln!(
                "schema comparison with PostgreSQL not run: PostgreSQL is not reachable at {} \
                 ({e}); set BILLING_TEST_FLEET=1 to make that a failure",
                pg_admin_url()
            );
            return None;
        }
    };
    let db = PgDatabase {
        name: format!("billing_tschema_{}_{}", std::process::id(), unique_suffix()),
    };
    admin
        .execute(format!("CREATE DATABASE \"{}\"", db.name).as_str())
        .await
        .expect("create a database");
    let _ = admin.close().await;

    let url = pg_url_for(&db.name);
    let store = store::Store::connect(&url)
        .await
        .expect("open a fresh PostgreSQL store");
    store.migrate().await.expect("PostgreSQL migrations apply");
    store.close().await;
    drop(store);

    let mut conn = PgConnection::connect(&url)
        .await
        .expect("connect to the database");
    let schema = postgres_schema(&mut conn).await;
    let _ = conn.close().await;
    drop(db);
    Some(schema)
}

/// The readers see what the migrations made: guards against a catalogue
/// query that silently returns nothing, which would compare two empty sets.
fn assert_reads_schema(engine: &str, schema: &BTreeSet<String>) {
    for expected in [
        "table events",
        "column events.data text null",
        "column webhook_endpoints.version integer not null default 1",
        "index events.events_pending (status, received_at) partial where status = 'pending'",
        "index service_accounts.service_accounts_by_env \
         (environment_ref, created_at desc, principal_ref desc)",
        "index webhook_deliveries.<primary key> (delivery_ref) unique",
        "index environments.<unique constraint> (mode) unique",
        "foreign key credentials (principal_ref) -> service_accounts (principal_ref)",
    ] {
        assert!(
            schema.contains(expected),
            "the {engine} schema lacks `{expected}`; read:\n  {}",
            schema
                .iter()
                .map(String::as_str)
                .collect::<Vec<_>>()
                .join("\n  ")
        );
    }
}

#[tokio::test]
async fn both_engines_end_with_the_same_schema() {
    let sqlite = migrated_sqlite_schema().await;
    assert_reads_schema("SQLite", &sqlite);
    let Some(postgres) = migrated_postgres_schema().await else {
        return;
    };
    assert_reads_schema("PostgreSQL", &postgres);

    let mut differences: BTreeSet<String> = sqlite
        .difference(&postgres)
        .map(|line| format!("only in sqlite: {line}"))
        .collect();
    differences.extend(
        postgres
            .difference(&sqlite)
            .map(|line| format!("only in postgres: {line}")),
    );
    let accepted: BTreeSet<String> = ACCEPTED_SCHEMA_DIFFERENCES
        .iter()
        .map(|(line, _)| (*line).to_owned())
        .collect();
    let unexpected: Vec<&String> = differences.difference(&accepted).collect();
    let stale: Vec<&String> = accepted.difference(&differences).collect();
    let list = |lines: &[&String]| match lines {
        [] => "(none)".to_owned(),
        lines => lines
            .iter()
            .map(|s| s.as_str())
            .collect::<Vec<_>>()
            .join("\n  "),
    };
    assert!(
        unexpected.is_empty() && stale.is_empty(),
        "the SQLite and PostgreSQL migrations leave different schemas.\n\
         unexpected differences (fix the migrations, or accept one in \
         ACCEPTED_SCHEMA_DIFFERENCES with its reason):\n  {}\n\
         accepted differences that no longer occur (remove them):\n  {}",
        list(&unexpected),
        list(&stale),
    );
}
