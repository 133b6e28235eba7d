//! Idempotency keys and request fingerprints.

use sha2::{Digest, Sha256};

/// A key is 1 to 255 printable ASCII characters.
pub fn valid_key(key: &str) -> bool {
    !key.is_empty() && key.len() <= 255 && key.bytes().all(|b| (0x20..0x7f).contains(&b))
}

/// Digest of method, path and the body as parsed JSON: key order and white
/// space do not change it.
pub fn fingerprint(method: &str, path: &str, body: &serde_json::Value) -> String {
    let mut h = Sha256::new();
    h.update(method.as_bytes());
    h.update([0]);
    h.update(path.as_bytes());
    h.update([0]);
    h.update(canonical_json(body).as_bytes());
    hex::encode(h.finalize())
}

/// `v` without white space and with every object's keys sorted, whatever
/// order the map holds them in: the form every digest of a JSON body
/// hashes (fingerprints here, the promotion plan's digest).
pub fn canonical_json(v: &serde_json::Value) -> String {
    let mut out = String::new();
    write_canonical(v, &mut out);
    out
}

fn write_canonical(v: &serde_json::Value, out: &mut String) {
    match v {
        serde_json::Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&serde_json::Value::String(k.clone()).to_string());
                out.push(':');
                write_canonical(&map[k], out);
            }
            out.push('}');
        }
        serde_json::Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        other => out.push_str(&other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_order_and_spacing_do_not_matter() {
        let a: serde_json::Value = serde_json::from_str(r#"{"a":1,"b":[1,2]}"#).unwrap();
        let b: serde_json::Value = serde_json::from_str("{ \"b\" : [1, 2],\n \"a\": 1 }").unwrap();
        assert_eq!(fingerprint("POST", "/x", &a), fingerprint("POST", "/x", &b));
        assert_ne!(fingerprint("POST", "/x", &a), fingerprint("POST", "/y", &a));
    }

    #[test]
    fn keys() {
        assert!(valid_key("a") && valid_key(&"k".repeat(255)) && valid_key("with space"));
        assert!(
            !valid_key("")
                && !valid_key(&"k".repeat(256))
                && !valid_key("tab\t")
                && !valid_key("é")
        );
    }
}
