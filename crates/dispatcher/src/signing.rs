//! The Standard Webhooks headers of one attempt.

use domain::webhook::signing::{signature_header, SigningSecret};

/// `webhook-id`, `webhook-timestamp` and `webhook-signature` for `body`.
pub fn headers(
    msg_id: &str,
    timestamp: i64,
    body: &[u8],
    secrets: &[SigningSecret],
) -> [(&'static str, String); 3] {
    [
        ("webhook-id", msg_id.to_owned()),
        ("webhook-timestamp", timestamp.to_string()),
        (
            "webhook-signature",
            signature_header(secrets, msg_id, timestamp, body),
        ),
    ]
}
