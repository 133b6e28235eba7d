//! The independent Standard Webhooks verifier: the `standardwebhooks`
//! package from PyPI, run with python3. Installed on first use when
//! missing, so the suite works on a fresh machine.

use std::process::Command;
use std::sync::Once;

const SCRIPT: &str = r#"
import sys, json
from standardwebhooks.webhooks import Webhook
req = json.load(sys.stdin)
try:
    Webhook(req["secret"]).verify(req["body"], {
        "webhook-id": req["id"], "webhook-timestamp": req["timestamp"], "webhook-signature": req["signature"]})
    print("valid")
except Exception as e:
    print("invalid: %s" % e)
"#;

fn ensure_installed() {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        let present = Command::new("python3")
            .args(["-c", "import standardwebhooks"])
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        if !present {
            let ok = Command::new("python3")
                .args(["-m", "pip", "install", "--quiet", "standardwebhooks"])
                .status()
                .map(|s| s.success())
                .unwrap_or(false);
            assert!(
                ok,
                "could not install the standardwebhooks verifier from PyPI"
            );
        }
    });
}

/// Asserts that each request in `got` is a delivery of its own (a
/// `whd_` `webhook-id` no other request has), signed with `secret` so
/// that the official verifier accepts it; `who` starts the messages.
#[track_caller]
pub fn each_signed_once(got: &[crate::receiver::Received], secret: &str, who: &str) {
    let ids: std::collections::HashSet<&str> = got.iter().map(|r| r.header("webhook-id")).collect();
    assert_eq!(ids.len(), got.len(), "{who}a webhook-id arrived twice");
    for r in got {
        let id = r.header("webhook-id");
        crate::kit::is_ref(&serde_json::json!(id), "whd_");
        assert!(
            verifies_request(secret, r),
            "{who}the official verifier refuses {id}: {}",
            String::from_utf8_lossy(&r.body)
        );
    }
}

/// True when the official verifier accepts the received request `r`
/// (its `webhook-*` headers and body) for `secret`.
pub fn verifies_request(secret: &str, r: &crate::receiver::Received) -> bool {
    verifies(
        secret,
        r.header("webhook-id"),
        r.header("webhook-timestamp"),
        r.header("webhook-signature"),
        &r.body,
    )
}

/// True when the official verifier accepts the request for `secret`.
pub fn verifies(secret: &str, id: &str, timestamp: &str, signature: &str, body: &[u8]) -> bool {
    ensure_installed();
    let input = serde_json::json!({
        "secret": secret, "id": id, "timestamp": timestamp, "signature": signature,
        "body": String::from_utf8_lossy(body),
    });
    let mut child = Command::new("python3")
        .args(["-c", SCRIPT])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("python3 runs");
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().expect("stdin");
        stdin
            .write_all(input.to_string().as_bytes())
            .expect("write");
    }
    let out = child.wait_with_output().expect("python3 finishes");
    String::from_utf8_lossy(&out.stdout).trim() == "valid"
}
