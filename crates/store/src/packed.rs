//! How the store keeps our own JSON packed: an event's one copy of its
//! data (`webhook_event_data.data` and `events.copy_data`, migrations 0032
//! and 0037) and, on PostgreSQL, an idempotency record's response
//! (`idempotency_keys.response_body`, `admin::idempotency`). Both are
//! resources as the API shows them, whose keys and shapes repeat from row
//! to row, so they are compressed against a preset dictionary of those
//! shapes and written as a mark followed by the compressed bytes in
//! base64:
//!
//! - `~2` (written now): a zstd frame (level 6, content size, no checksum)
//!   against `DICTIONARY_V1` as raw content, which is digested once per
//!   process.
//! - `~1` (event copies written until 2026-11-30): raw deflate against
//!   `DICTIONARY_V1`. A deflate stream is primed by hashing the whole
//!   dictionary, for every copy: about four times `~2`'s cost.
//!
//! The columns stay text on both engines, and text written before packing
//! (plain JSON, which never starts with `~`) reads as it is.
//!
//! This module owns the format, and it must never change what packed text
//! means: text packed today must unpack the same for as long as it is
//! kept. A new dictionary or codec gets a new mark (`~3`), and the old
//! ones stay readable. `unpack` never fails: text damaged at rest reads as
//! it is stored, which is not JSON, and its readers already treat data
//! that is not JSON (an attempt reports it unreadable, the body view shows
//! no body).

use base64::engine::general_purpose::STANDARD_NO_PAD;
use base64::Engine;
use flate2::{Decompress, FlushDecompress, Status};
use std::borrow::Cow;
use std::cell::RefCell;
use std::sync::LazyLock;
use zstd::zstd_safe::{CCtx, CDict, DCtx, DDict};

/// What text packed with deflate against `DICTIONARY_V1` starts with.
const MARK_V1: &str = "~1";
/// What text packed with zstd against `DICTIONARY_V1` starts with.
const MARK_V2: &str = "~2";

/// The preset dictionary of `~1` and `~2`: the event catalogue's example
/// objects of 2026-11-29 (`domain::webhook::catalogue::example`), one per
/// type and version, each number made 0 and each string emptied unless it
/// is a lower-case word (a status, a unit, a kind): no reference, time,
/// amount, etag, name or address of an example is in it, only our keys
/// and shapes. The rarest types come first and the most frequent last
/// (`tests::write_a_dictionary_from_the_catalogue` made it). Its bytes
/// never change (`tests::the_dictionary_never_changes`).
const DICTIONARY_V1: &[u8] = include_bytes!("packed_v1.dict");

/// zstd's level for `~2`: for an event's data, about 6 % smaller than
/// zstd's default (3) in about the same time; the levels that pack smaller
/// still take several times as long for a few bytes.
const LEVEL_V2: i32 = 6;

/// Above this many bytes text is left as it is: stored text is read
/// whole, and its unpacked size bounds what a damaged one can inflate to.
const MAX_PACKED_INPUT: usize = 1 << 20;

/// `DICTIONARY_V1` digested for `~2`, once per process.
static PACKING: LazyLock<CDict<'static>> = LazyLock::new(|| CDict::create(DICTIONARY_V1, LEVEL_V2));
static UNPACKING: LazyLock<DDict<'static>> = LazyLock::new(|| DDict::create(DICTIONARY_V1));

thread_local! {
    /// One context of each kind per thread, reused for every text.
    static PACKER: RefCell<CCtx<'static>> = RefCell::new(CCtx::create());
    static UNPACKER: RefCell<DCtx<'static>> = RefCell::new(DCtx::create());
    static INFLATER: RefCell<Decompress> = RefCell::new(Decompress::new(false));
}

/// `data` as it is stored: packed, or as it is when packing would not make
/// it shorter (or it is too large to pack).
pub fn pack(data: &str) -> Cow<'_, str> {
    if data.len() > MAX_PACKED_INPUT {
        return Cow::Borrowed(data);
    }
    let compressed = PACKER.with(|packer| {
        let mut out = Vec::with_capacity(zstd::zstd_safe::compress_bound(data.len()));
        packer
            .borrow_mut()
            .compress_using_cdict(&mut out, data.as_bytes(), &PACKING)
            .ok()?;
        Some(out)
    });
    marked(MARK_V2, data, compressed)
}

/// `mark` and `bytes` in base64, when that is shorter than `data`.
fn marked<'a>(mark: &str, data: &'a str, bytes: Option<Vec<u8>>) -> Cow<'a, str> {
    match bytes {
        Some(bytes) if mark.len() + bytes.len().div_ceil(3) * 4 < data.len() => {
            let mut packed = String::with_capacity(mark.len() + bytes.len() * 4 / 3 + 4);
            packed.push_str(mark);
            STANDARD_NO_PAD.encode_string(&bytes, &mut packed);
            Cow::Owned(packed)
        }
        _ => Cow::Borrowed(data),
    }
}

/// The data stored text holds (`pack`'s inverse, and that of every
/// earlier mark): packed text unpacked, any other text as it is. A
/// packed text that does not unpack to UTF-8 within bounds reads as the
/// stored text.
pub fn unpack(stored: &str) -> Cow<'_, str> {
    let unpacked = if let Some(encoded) = stored.strip_prefix(MARK_V2) {
        decompress(encoded)
    } else if let Some(encoded) = stored.strip_prefix(MARK_V1) {
        inflate(encoded)
    } else {
        None
    };
    match unpacked.and_then(|bytes| String::from_utf8(bytes).ok()) {
        Some(data) => Cow::Owned(data),
        None => Cow::Borrowed(stored),
    }
}

/// `unpack` for owned text, without copying text that is not packed.
pub fn unpack_owned(stored: String) -> String {
    match unpack(&stored) {
        Cow::Owned(data) => data,
        Cow::Borrowed(_) => stored,
    }
}

fn decompress(encoded: &str) -> Option<Vec<u8>> {
    let compressed = STANDARD_NO_PAD.decode(encoded).ok()?;
    // `pack` writes the size in the frame; a frame without it, or with one
    // over the bound, is not one of ours.
    let size = zstd::zstd_safe::get_frame_content_size(&compressed).ok()??;
    let size = usize::try_from(size)
        .ok()
        .filter(|&n| n <= MAX_PACKED_INPUT)?;
    UNPACKER.with(|unpacker| {
        let mut out = Vec::with_capacity(size);
        let written = unpacker
            .borrow_mut()
            .decompress_using_ddict(&mut out, &compressed, &UNPACKING)
            .ok()?;
        (written == size).then_some(out)
    })
}

fn inflate(encoded: &str) -> Option<Vec<u8>> {
    let deflated = STANDARD_NO_PAD.decode(encoded).ok()?;
    INFLATER.with(|unpacker| {
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
    })
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

    /// `ORDER` as a copy written with `~1` was stored (raw deflate, level 6,
    /// against `DICTIONARY_V1`; made by Python's zlib, another encoder than
    /// ours).
    const ORDER_V1: &str = "~1jZTLjoJAEEX/xb2mqrobut05yjx8i5KoIekAwoxvRVz677YrHQzo7qZWt+qcVOntHc8tbsEJII/AZH2Ubkbd7RSCeVyMJDpp72zPMuGmzIkxT4iArCpildQEZB15XagaAM7v5PyKTFgAEYW44LFILLBRkmIB99+l+tZ6j3D3SaobAX6E1IxYa8FzsE3WTiw+E+vr1/7+k0/wD+YH/ixVewWdNXY39E8GKpOhtCrhrWreCZN1b8v6Oz7Yi+HBKnLEDPXoaLupHJ/UJINXzhSiuVwB";

    #[test]
    fn an_event_packs_to_little_more_than_half_and_back() {
        let packed = pack(ORDER);
        assert!(packed.starts_with(MARK_V2), "{packed}");
        assert!(
            packed.len() * 100 < ORDER.len() * 55,
            "{} of {}",
            packed.len(),
            ORDER.len()
        );
        assert_eq!(unpack(&packed), ORDER);
    }

    #[test]
    fn a_copy_written_with_the_first_mark_still_reads() {
        assert_eq!(unpack(ORDER_V1), ORDER);
        assert_eq!(unpack(&pack_v1(ORDER)), ORDER);
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
        let cut_v1 = &ORDER_V1[..ORDER_V1.len() / 2];
        assert_eq!(unpack(cut_v1), cut_v1);
        for damaged in ["~1", "~1!!!", "~1AAAA", "~2", "~2!!!", "~2AAAA", "~3abc"] {
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
        fn any_text_packed_with_the_first_mark_unpacks_to_itself(data in ".{0,2000}") {
            let packed = pack_v1(&data);
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
    /// as it is now, to the file named by `PACKED_DICTIONARY`: the
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
        let path = std::env::var("PACKED_DICTIONARY").expect("PACKED_DICTIONARY");
        std::fs::write(path, shapes.concat()).unwrap();
    }

    /// How `~1` copies were packed, kept to show that they still unpack.
    fn pack_v1(data: &str) -> Cow<'_, str> {
        use flate2::{Compress, Compression, FlushCompress};
        let mut packer = Compress::new(Compression::new(6), false);
        packer.set_dictionary(DICTIONARY_V1).unwrap();
        let mut out = Vec::with_capacity(data.len() + 64);
        let deflated = match packer.compress_vec(data.as_bytes(), &mut out, FlushCompress::Finish) {
            Ok(Status::StreamEnd) => Some(out),
            _ => None,
        };
        marked(MARK_V1, data, deflated)
    }

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }
}
