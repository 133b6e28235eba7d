//! `billing`: the one binary of the service. See `billing --help`.

use anyhow::Context;
use billing::app::{self, Role};
use billing::Config;
use clap::{Parser, Subcommand};
use std::path::PathBuf;
use tokio_util::sync::CancellationToken;

/// mimalloc instead of glibc's allocator: the dispatcher allocates many
/// short-lived strings and JSON values across threads, and glibc's
/// `malloc`/`free` (with its chunk consolidation) took over a tenth of its
/// profile.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Commerce and billing service with a webhook delivery engine.
///
/// Configuration is read from built-in defaults, then config/default.toml
/// (if present), then --config FILE, then BILLING_<SECTION>__<KEY>
/// environment variables (for example BILLING_STORE__URL=postgres://…).
#[derive(Debug, Parser)]
#[command(name = "billing", version)]
struct Cli {
    /// A TOML configuration file layered over config/default.toml.
    #[arg(long, global = true, value_name = "FILE")]
    config: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the API and the background workers in one process (the embedded
    /// default: SQLite store, in-process queue and scheduler).
    Serve,
    /// Run only the HTTP API (a fleet runs any number of these).
    Api,
    /// Run only the background workers (a fleet runs any number of these).
    Dispatcher,
    /// Apply pending database migrations and exit.
    Migrate,
    /// Administration commands run against the configured store.
    Admin {
        #[command(subcommand)]
        command: AdminCommand,
    },
}

#[derive(Debug, Subcommand)]
enum AdminCommand {
    /// Create the sandbox and live environments with an `admin` service
    /// account holding every permission (if missing), and issue a fresh
    /// credential for each admin. Earlier credentials stay valid.
    Bootstrap {
        /// Print the result as JSON (the only output format).
        #[arg(long)]
        json: bool,
    },
    /// Publish one domain event (the JSON envelope of
    /// config/event-envelope.schema.json) into the configured queue, as
    /// another system would. Reads FILE, or standard input with `-`.
    PublishEvent {
        #[arg(value_name = "FILE")]
        file: PathBuf,
    },
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let config = match Config::load(cli.config.as_deref()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    init_tracing(&config);
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: failed to start the runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli.command, config)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run(command: Command, config: Config) -> anyhow::Result<()> {
    let role = match command {
        Command::Serve => Role::All,
        Command::Api => Role::Api,
        Command::Dispatcher => Role::Dispatcher,
        Command::Migrate => {
            app::open_store(&config).await?;
            println!("migrations applied");
            return Ok(());
        }
        Command::Admin {
            command: AdminCommand::Bootstrap { json: _ },
        } => {
            let store = app::open_store(&config).await?;
            let out = billing::bootstrap::bootstrap(&store)
                .await
                .context("bootstrap failed")?;
            println!("{}", serde_json::to_string_pretty(&out)?);
            return Ok(());
        }
        Command::Admin {
            command: AdminCommand::PublishEvent { file },
        } => {
            let body = if file.as_os_str() == "-" {
                let mut buf = Vec::new();
                std::io::Read::read_to_end(&mut std::io::stdin(), &mut buf)?;
                buf
            } else {
                std::fs::read(&file)
                    .with_context(|| format!("failed to read {}", file.display()))?
            };
            let outcome = billing::events::publish(&config, &body).await?;
            println!("{outcome}");
            return Ok(());
        }
    };
    let shutdown = CancellationToken::new();
    let token = shutdown.clone();
    tokio::spawn(async move {
        app::termination_signal().await;
        tracing::info!("termination requested; shutting down");
        token.cancel();
    });
    app::run(config, role, shutdown).await
}

fn init_tracing(config: &Config) {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_env("RUST_LOG")
        .or_else(|_| EnvFilter::try_new(&config.log.level))
        .unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    if config.log.format == "json" {
        builder.json().init();
    } else {
        builder.init();
    }
}
