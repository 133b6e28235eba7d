//! PostgreSQL databases for tests: one migrated template per test process,
//! one clone of it per test, dropped when the test ends.

use sqlx::{Connection, Executor, PgConnection};
use tokio::sync::OnceCell;

/// The server tests use; `BILLING_TEST_PG_URL` overrides it.
pub fn admin_url() -> String {
    std::env::var("BILLING_TEST_PG_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_owned())
}

fn url_for(db: &str) -> String {
    let base = admin_url();
    let cut = base.rfind('/').expect("a database in BILLING_TEST_PG_URL");
    format!("{}/{db}", &base[..cut])
}

async fn admin() -> PgConnection {
    PgConnection::connect(&admin_url())
        .await
        .unwrap_or_else(|e| {
            panic!(
                "BILLING_TEST_FLEET=1 but PostgreSQL is not reachable at {}: {e}",
                admin_url()
            )
        })
}

static TEMPLATE: OnceCell<String> = OnceCell::const_new();

async fn template() -> &'static str {
    TEMPLATE
        .get_or_init(|| async {
            let pid = std::process::id();
            let mut conn = admin().await;
            // Leftovers of runs whose process has exited are dropped; a
            // database of a live process (another test binary running now)
            // is left alone.
            let ours: Vec<String> = sqlx::query_scalar(
                "SELECT datname FROM pg_database WHERE datname LIKE 'billing\\_t%'",
            )
            .fetch_all(&mut conn)
            .await
            .expect("list databases");
            for db in ours.into_iter().filter(|db| owner_exited(db)) {
                let _ = conn
                    .execute(format!("DROP DATABASE IF EXISTS \"{db}\" WITH (FORCE)").as_str())
                    .await;
            }
            let name = format!("billing_tpl_{pid}_{}", suffix());
            conn.execute(format!("CREATE DATABASE \"{name}\"").as_str())
                .await
                .expect("create template database");
            let store = store::Store::connect(&url_for(&name))
                .await
                .expect("template opens");
            store.migrate().await.expect("template migrates");
            store.close().await;
            name
        })
        .await
}

/// Test databases are named `billing_t…_<pid>_<suffix>`; true when that
/// process no longer runs.
fn owner_exited(db: &str) -> bool {
    let pid = db.rsplit('_').nth(1).and_then(|p| p.parse::<u32>().ok());
    match pid {
        Some(pid) => {
            pid != std::process::id() && !std::path::Path::new(&format!("/proc/{pid}")).exists()
        }
        None => false,
    }
}

fn suffix() -> String {
    use rand::Rng;
    format!(
        "{:012x}",
        rand::thread_rng().gen::<u64>() & 0xffff_ffff_ffff
    )
}

/// A database of its own for one test.
pub struct TestDatabase {
    pub name: String,
    pub url: String,
}

impl TestDatabase {
    /// An empty database, for a test that migrates it itself (from an
    /// earlier release's schema, say).
    pub async fn create_empty() -> TestDatabase {
        let name = format!("billing_t_{}_{}", std::process::id(), suffix());
        admin()
            .await
            .execute(format!("CREATE DATABASE \"{name}\"").as_str())
            .await
            .expect("create test database");
        TestDatabase {
            url: url_for(&name),
            name,
        }
    }

    pub async fn create() -> TestDatabase {
        let template = template().await;
        let name = format!("billing_t_{}_{}", std::process::id(), suffix());
        let mut conn = admin().await;
        // Two clones at once can briefly see each other on the template:
        // PostgreSQL is asked again until the other has finished.
        let poll = crate::poll::Poll::within(std::time::Duration::from_secs(10))
            .every(std::time::Duration::from_millis(100));
        loop {
            let sql = format!("CREATE DATABASE \"{name}\" TEMPLATE \"{template}\"");
            match conn.execute(sql.as_str()).await {
                Ok(_) => break,
                Err(_) if poll.next().await => {}
                Err(e) => panic!("could not create test database: {e}"),
            }
        }
        TestDatabase {
            url: url_for(&name),
            name,
        }
    }
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        let name = self.name.clone();
        // Drop runs outside any runtime we may block; use a thread of its own.
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build();
            if let Ok(rt) = rt {
                rt.block_on(async {
                    if let Ok(mut conn) = PgConnection::connect(&admin_url()).await {
                        let _ = conn
                            .execute(
                                format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)").as_str(),
                            )
                            .await;
                    }
                });
            }
        })
        .join();
    }
}
