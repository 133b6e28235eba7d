//! How an event's one copy of its data (`webhook_event_data.data`,
//! migration 0032) is stored: packed. An event's data is our own JSON (a
//! resource as the API shows it), whose keys and shapes repeat from event
//! to event, so it is deflated against a preset dictionary of those
//! shapes and written as `~1` followed by the deflated bytes in base64.
//! The column stays text on both engines, and a copy written before (plain
//! JSON, which never starts with `~`) reads as it is.
//!
//! This module owns the format, and it must never change what a packed
//! copy means: a copy packed today must unpack the same for as long as it
//! is kept. A new dictionary or codec gets a new mark (`~2`), and the old
//! one stays readable. `unpack` never fails: a copy damaged at rest reads
//! as the stored text, which is not JSON, and its readers already treat
//! data that is not JSON (an attempt reports it unreadable, the body view
//! shows no body).

use base64::engine::general_purpose::STANDARD_NO_PAD;
use base64::Engine;
use flate2::{Compress, Compression, Decompress, FlushCompress, FlushDecompress, Status};
use std::borrow::Cow;
use std::cell::RefCell;

/// What a copy packed with `DICTIONARY_V1` starts with.
const MARK_V1: &str = "~1";

/// The preset dictionary of `~1`: the event catalogue's example objects of
/// 2026-11-29 (`domain::webhook::catalogue::example`), one per type and
/// version, each number made 0 and each string emptied unless it is a
/// lower-case word (a status, a unit, a kind): no reference, time, amount,
/// etag, name or address of an example is in it, only our keys and shapes.
/// The rarest types come first and the most frequent last
/// (`tests::write_a_dictionary_from_the_catalogue` made it). Its bytes
/// never change (`tests::the_dictionary_never_changes`).
const DICTIONARY_V1: &[u8] = include_bytes!("event_copy_v1.dict");

/// Above this many bytes a copy is left as it is: a stored copy is read
/// whole, and its unpacked size bounds what a damaged one can inflate to.
const MAX_PACKED_INPUT: usize = 1 << 20;

thread_local! {
    /// One compressor and one decompressor per thread, reset for each
    /// copy: a new zlib stream allocates and clears about 300 KB.
    static PACKER: RefCell<Compress> = RefCell::new(Compress::new(Compression::new(6), false));
    static UNPACKER: RefCell<Decompress> = RefCell::new(Decompress::new(false));
}

/// `data` as it is stored: packed, or as it is when packing would not make
/// it shorter (or it is too large to pack).
pub fn pack(data: &str) -> Cow<'_, str> {
    if data.len() > MAX_PACKED_INPUT {
        return Cow::Borrowed(data);
    }
    let deflated = PACKER.with(|packer| {
        let mut packer = packer.borrow_mut();
        packer.reset();
        packer.set_dictionary(DICTIONARY_V1).ok()?;
        let mut out = Vec::with_capacity(data.len() + 64);
        match packer.compress_vec(data.as_bytes(), &mut out, FlushCompress::Finish) {
            Ok(Status::StreamEnd) => Some(out),
            _ => None,
        }
    });
    match deflated {
        Some(bytes) if MARK_V1.len() + bytes.len().div_ceil(3) * 4 < data.len() => {
            let mut packed = String::with_capacity(MARK_V1.len() + bytes.len() * 4 / 3 + 4);
            packed.push_str(MARK_V1);
            STANDARD_NO_PAD.encode_string(&bytes, &mut packed);
            Cow::Owned(packed)
        }
        _ => Cow::Borrowed(data),
    }
}

/// The data a stored copy holds (`pack`'s inverse): a packed copy
/// inflated, any other text as it is. A packed copy that does not inflate
/// to UTF-8 within bounds reads as the stored text.
pub fn unpack(stored: &str) -> Cow<'_, str> {
    match stored.strip_prefix(MARK_V1).and_then(inflate) {
        Some(data) => Cow::Owned(data),
        None => Cow::Borrowed(stored),
    }
}

/// `unpack` for an owned copy, without copying one that is not packed.
pub fn unpack_owned(stored: String) -> String {
    match unpack(&stored) {
        Cow::Owned(data) => data,
        Cow::Borrowed(_) => stored,
    }
}

fn inflate(encoded: &str) -> Option<String> {
    let deflated = STANDARD_NO_PAD.decode(encoded).ok()?;
    let bytes = UNPACKER.with(|unpacker| {
        let mut unpacker = unpacker.borrow_mut();
        unpacker.reset(false);
        let mut out = Vec::with_capacity(deflated.len() * 4 + 256);
        // A raw stream takes its dictionary before any input.
        unpacker.set_dictionary(DICTIONARY_V1).ok()?;
        loop {
            let read = unpacker.total_in() as usize;
            let status = unpacker
                .decompress_vec(&deflated[read..], &mut out, FlushDecompress::Finish)
                .ok()?;
            match status {
                Status::StreamEnd => return Some(out),
                _ if out.len() >= MAX_PACKED_INPUT => return None,
                _ if out.len() == out.capacity() => out.reserve(out.capacity()),
                // No room was missing and the stream did not end: the
                // input was cut short.
                _ => return None,
            }
        }
    })?;
    String::from_utf8(bytes).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use sha2::{Digest, Sha256};

    /// An order as the catalogue's example has it, with values of its own.
    const ORDER: &str = r#"{"amount_total":{"currency":"EUR","unit":"minor","value":"4200"},"buyer_ref":"buy_q8Rt2LmX0aZe","checkout_session_ref":"cs_Uu7Yt5Rr3Ee1","created_at":"2026-11-29T08:14:59.001Z","etag":"\"8f3a0c2b1d4e5f60718293a4\"","line_items":[{"amount":{"currency":"EUR","unit":"minor","value":"4200"},"offer_ref":"ofr_Aa1Bb2Cc3Dd4","price_ref":"pri_Ee5Ff6Gg7Hh8","product_ref":"prd_Ii9Jj0Kk1Ll2","quantity":2,"unit_amount":{"currency":"EUR","unit":"minor","value":"2100"}}],"order_ref":"ord_Mm3Nn4Oo5Pp6","payment_intent_ref":"pay_Qq7Rr8Ss9Tt0","status":"paid","updated_at":"2026-11-29T08:14:59.001Z"}"#;

    #[test]
    fn the_dictionary_never_changes() {
        let digest = hex(&Sha256::digest(DICTIONARY_V1));
        assert_eq!(
            digest, "b12006b70332e8165fb4b199b9fd9b6106df1a20abc5ff74fd1b45e52333de73",
            "the bytes of a published dictionary changed: copies packed with it no longer unpack"
        );
    }

    #[test]
    fn an_event_packs_to_less_than_half_and_back() {
        let packed = pack(ORDER);
        assert!(packed.starts_with(MARK_V1), "{packed}");
        assert!(
            packed.len() * 2 < ORDER.len(),
            "{} of {}",
            packed.len(),
            ORDER.len()
        );
        assert_eq!(unpack(&packed), ORDER);
    }

    #[test]
    fn a_copy_that_packing_would_not_shorten_is_kept_as_it_is() {
        for data in ["{}", "null", r#"{"a":1}"#] {
            assert!(matches!(pack(data), Cow::Borrowed(d) if d == data));
        }
    }

    #[test]
    fn plain_and_damaged_copies_read_as_stored() {
        assert_eq!(unpack(ORDER), ORDER);
        let packed = pack(ORDER).into_owned();
        let cut = &packed[..packed.len() / 2];
        assert_eq!(unpack(cut), cut);
        for damaged in ["~1", "~1!!!", "~1AAAA", "~2abc"] {
            assert_eq!(unpack(damaged), damaged);
        }
    }

    proptest! {
        #[test]
        fn any_text_packs_and_unpacks_to_itself(data in ".{0,2000}") {
            let packed = pack(&data);
            prop_assert_eq!(unpack(&packed), data.as_str());
        }

        #[test]
        fn json_like_text_packs_and_unpacks_to_itself(
            keys in proptest::collection::vec("[a-z_]{1,20}", 1..30),
            values in proptest::collection::vec("[A-Za-z0-9 ._-]{0,40}", 30),
        ) {
            let fields: Vec<String> = keys
                .iter()
                .zip(&values)
                .map(|(k, v)| format!("\"{k}\":\"{v}\""))
                .collect();
            let data = format!("{{{}}}", fields.join(","));
            let packed = pack(&data);
            prop_assert_eq!(unpack(&packed), data.as_str());
        }
    }

    /// Writes a dictionary made as `DICTIONARY_V1` was, from the catalogue
    /// as it is now, to the file named by `EVENT_COPY_DICTIONARY`: the
    /// start of a new mark, never a change to `~1`'s.
    #[test]
    #[ignore = "a tool: makes the dictionary of a new mark"]
    fn write_a_dictionary_from_the_catalogue() {
        use domain::webhook::catalogue;
        use serde_json::Value;
        fn strip(v: &mut Value) {
            match v {
                Value::String(s) if !s.bytes().all(|b| b.is_ascii_lowercase() || b == b'_') => {
                    s.clear()
                }
                Value::Number(n) => *n = 0.into(),
                Value::Array(items) => items.iter_mut().for_each(strip),
                Value::Object(fields) => fields.values_mut().for_each(strip),
                _ => {}
            }
        }
        // The rarest first: a match costs fewer bits the nearer it is.
        let frequent = ["payment.succeeded", "order.created"];
        let mut types: Vec<&str> = catalogue::all().iter().map(|t| t.name).collect();
        types.sort_by_key(|name| frequent.iter().position(|f| f == name));
        let mut shapes: Vec<String> = Vec::new();
        for name in types {
            let t = catalogue::find(name).unwrap();
            for &version in t.dto_versions {
                let Some(mut example) = catalogue::example(name, version) else {
                    continue;
                };
                strip(&mut example);
                let shape = example.to_string();
                if !shapes.contains(&shape) {
                    shapes.push(shape);
                }
            }
        }
        let path = std::env::var("EVENT_COPY_DICTIONARY").expect("EVENT_COPY_DICTIONARY");
        std::fs::write(path, shapes.concat()).unwrap();
    }

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }
}
