//! The key that encrypts webhook signing secrets at rest: from
//! `secrets.key`, else from `secrets.key_file`, which the embedded default
//! creates (mode 0600) with a fresh random key on first start.

use anyhow::Context;
use base64::{engine::general_purpose::STANDARD, Engine};
use rand::RngCore;
use std::path::Path;

pub fn decode(text: &str) -> Option<[u8; 32]> {
    STANDARD.decode(text.trim()).ok()?.try_into().ok()
}

pub fn load(config: &crate::config::SecretsConfig) -> anyhow::Result<[u8; 32]> {
    if !config.key.is_empty() {
        return decode(&config.key).context("secrets.key must be base64 of 32 bytes");
    }
    let path = Path::new(&config.key_file);
    if path.exists() {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("failed to read {}", path.display()))?;
        return decode(&text)
            .with_context(|| format!("{} must hold base64 of 32 bytes", path.display()));
    }
    let mut key = [0u8; 32];
    rand::rngs::OsRng.fill_bytes(&mut key);
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("failed to create {}", dir.display()))?;
    }
    write_private(path, &STANDARD.encode(key))
        .with_context(|| format!("failed to write {}", path.display()))?;
    tracing::info!(path = %path.display(), "generated a new secret encryption key");
    Ok(key)
}

#[cfg(unix)]
fn write_private(path: &Path, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    f.write_all(text.as_bytes())
}

#[cfg(not(unix))]
fn write_private(path: &Path, text: &str) -> std::io::Result<()> {
    std::fs::write(path, text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_generated_key_is_reused() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = crate::config::SecretsConfig {
            key: String::new(),
            key_file: dir.path().join("k").display().to_string(),
        };
        let first = load(&cfg).unwrap();
        assert_eq!(load(&cfg).unwrap(), first);
    }
}
