//! Every field rule of the outside event data, one table per resource.

use super::*;
use crate::money::Currency;
use proptest::prelude::*;
use serde_json::json;

const DSP: &str = "dsp_AAAAAAAAAAAA";
const PAY: &str = "pay_BBBBBBBBBBBB";
const WD: &str = "wd_CCCCCCCCCCCC";
const BIZ: &str = "biz_DDDDDDDDDDDD";
const PTC: &str = "ptc_EEEEEEEEEEEE";
/// SHA-256 of "test".
const TEST_DIGEST: &str = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";

fn money(value: &str) -> Value {
    json!({"currency": "EUR", "unit": "minor", "value": value})
}

fn eur(v: u64) -> Money {
    Money::new(Currency::parse("EUR").unwrap(), v).unwrap()
}

fn ts(s: &str) -> Timestamp {
    Timestamp::parse(s).unwrap()
}

/// `base` with `field` set to `value` (`Value::Null` included), or removed
/// when `value` is `None`.
fn with(base: &Value, field: &str, value: Option<Value>) -> Value {
    let mut v = base.clone();
    let m = v.as_object_mut().unwrap();
    match value {
        Some(x) => m.insert(field.to_owned(), x),
        None => m.remove(field),
    };
    v
}

fn issue(field: &str, issue: &str) -> FieldIssue {
    FieldIssue::new(field, issue)
}

fn dispute() -> Value {
    json!({
        "dispute_ref": DSP, "payment_intent_ref": PAY, "amount": money("1999"),
        "kind": "chargeback", "status": "needs_response",
        "reason": "<b>fraudulent</b>\n use", "opened_at": "2026-11-22T10:04:05.123Z",
        "resolved_at": null,
        // Fields the service derives or fills itself: ignored.
        "reason_safe": "<i>not trusted</i>", "evidence_due_at": "2000-01-01T00:00:00Z",
        "buyer": {"email": "ada@example.com"}
    })
}

fn payout() -> Value {
    json!({
        "payout_ref": WD, "beneficiary_business_ref": BIZ, "status": "paid",
        "amount": money("100000"), "fee": money("250"), "net": money("99750"),
        "method_key": "sepa", "destination_label": "Main account",
        "destination_last4": "6789", "failure_reason": null,
        "requested_at": "2026-11-22T10:04:05.123Z", "completed_at": "2026-11-23T10:00:00Z",
        "paid_at": "2026-11-23T10:00:00Z", "future_field": [1, 2, 3]
    })
}

fn participation() -> Value {
    json!({
        "participation_ref": PTC, "beneficiary_business_ref": BIZ, "status": "accepted",
        "invited_at": "2026-11-22T10:04:05.123Z", "accepted_at": "2026-11-23T10:00:00Z",
        "terms_version": 3, "terms_digest": TEST_DIGEST,
        "invitee": {"email": "finance@example.org", "name": "Grace Hopper"}
    })
}

#[test]
fn field_issue_display() {
    assert_eq!(
        issue("amount.value", "must be a string").to_string(),
        "amount.value: must be a string"
    );
}

#[test]
fn data_must_be_an_object() {
    for bad in [json!(null), json!([]), json!("x"), json!(1)] {
        let e = issue("data", "must be an object");
        assert_eq!(DisputeData::parse(&bad), Err(e.clone()));
        assert_eq!(PayoutData::parse(&bad), Err(e.clone()));
        assert_eq!(ParticipationData::parse(&bad), Err(e));
    }
}

#[test]
fn dispute_parses() {
    let d = DisputeData::parse(&dispute()).unwrap();
    assert_eq!(d.dispute_ref.as_str(), DSP);
    assert_eq!(d.payment_intent_ref.as_str(), PAY);
    assert_eq!(d.amount, eur(1999));
    assert_eq!(d.kind, DisputeKind::Chargeback);
    assert_eq!(d.status, DisputeStatus::NeedsResponse);
    assert_eq!(d.reason.as_deref(), Some("<b>fraudulent</b>\n use"));
    assert_eq!(d.reason_safe().as_deref(), Some("fraudulent use"));
    assert_eq!(d.opened_at, Some(ts("2026-11-22T10:04:05.123Z")));
    assert_eq!(d.evidence_due_at(), Some(ts("2026-11-29T10:04:05.123Z")));
    assert_eq!(d.resolved_at, None);

    // The minimum: no reason and no timestamps.
    let mut min = dispute();
    for f in ["reason", "opened_at", "resolved_at"] {
        min = with(&min, f, None);
    }
    let d = DisputeData::parse(&min).unwrap();
    assert_eq!(
        (d.reason.clone(), d.reason_safe(), d.evidence_due_at()),
        (None, None, None)
    );
}

#[test]
fn dispute_refs() {
    let base = dispute();
    let cases = [
        ("dispute_ref", None, issue("dispute_ref", "is required")),
        (
            "dispute_ref",
            Some(json!(null)),
            issue("dispute_ref", "is required"),
        ),
        (
            "dispute_ref",
            Some(json!(PAY)),
            issue("dispute_ref", "must start with `dsp_`"),
        ),
        (
            "dispute_ref",
            Some(json!("dsp_short")),
            issue(
                "dispute_ref",
                "must be `dsp_` followed by 12 letters or digits",
            ),
        ),
        (
            "dispute_ref",
            Some(json!(7)),
            issue("dispute_ref", "must be a string reference `dsp_…`"),
        ),
        (
            "payment_intent_ref",
            None,
            issue("payment_intent_ref", "is required"),
        ),
        (
            "payment_intent_ref",
            Some(json!(DSP)),
            issue("payment_intent_ref", "must start with `pay_`"),
        ),
    ];
    for (field, value, expected) in cases {
        assert_eq!(
            DisputeData::parse(&with(&base, field, value)),
            Err(expected),
            "{field}"
        );
    }
}

#[test]
fn dispute_payment_ref_alias() {
    let alias_only = with(
        &with(&dispute(), "payment_intent_ref", None),
        "payment_ref",
        Some(json!(PAY)),
    );
    assert_eq!(
        DisputeData::parse(&alias_only)
            .unwrap()
            .payment_intent_ref
            .as_str(),
        PAY
    );
    let both = with(&dispute(), "payment_ref", Some(json!(PAY)));
    assert!(DisputeData::parse(&both).is_ok());
    let differ = with(&dispute(), "payment_ref", Some(json!("pay_ZZZZZZZZZZZZ")));
    assert_eq!(
        DisputeData::parse(&differ),
        Err(issue("payment_ref", "must equal payment_intent_ref"))
    );
    let bad_alias = with(
        &with(&dispute(), "payment_intent_ref", None),
        "payment_ref",
        Some(json!("ord_BBBBBBBBBBBB")),
    );
    assert_eq!(
        DisputeData::parse(&bad_alias),
        Err(issue("payment_ref", "must start with `pay_`"))
    );
}

#[test]
fn money_fields() {
    let shape = "must be a Money object {currency, unit, value}";
    let cases = [
        (None, issue("amount", "is required")),
        (Some(json!("1999")), issue("amount", shape)),
        (
            Some(json!({"currency": "EUR", "unit": "minor", "value": "1", "x": 1})),
            issue("amount", shape),
        ),
        (
            Some(json!({"currency": "EUR", "unit": "minor"})),
            issue("amount.value", "must be a string"),
        ),
        (
            Some(json!({"currency": "EUR", "unit": "minor", "value": 1999})),
            issue("amount.value", "must be a string"),
        ),
        (
            Some(json!({"currency": "EUR", "unit": "minor", "value": "01"})),
            issue(
                "amount.value",
                "value must be 1 to 18 decimal digits without sign or leading zeros",
            ),
        ),
        (
            Some(json!({"currency": "eur", "unit": "minor", "value": "1"})),
            issue(
                "amount.currency",
                "currency must be a three-letter upper-case ISO 4217 code",
            ),
        ),
        (
            Some(json!({"currency": "EUR", "unit": "major", "value": "1"})),
            issue("amount.unit", "unit must be `minor`"),
        ),
    ];
    for (value, expected) in cases {
        assert_eq!(
            DisputeData::parse(&with(&dispute(), "amount", value.clone())),
            Err(expected.clone())
        );
        assert_eq!(
            PayoutData::parse(&with(&payout(), "amount", value)),
            Err(expected)
        );
    }
}

#[test]
fn dispute_kind_and_status() {
    assert_eq!(
        DisputeData::parse(&with(&dispute(), "kind", Some(json!("Chargeback")))),
        Err(issue("kind", "must be one of chargeback, inquiry"))
    );
    assert_eq!(
        DisputeData::parse(&with(&dispute(), "kind", None)),
        Err(issue("kind", "is required"))
    );
    assert_eq!(
        DisputeData::parse(&with(&dispute(), "status", Some(json!("open")))),
        Err(issue(
            "status",
            "must be one of needs_response, under_review, won, lost"
        ))
    );
    for k in DisputeKind::ALL {
        let d = DisputeData::parse(&with(&dispute(), "kind", Some(json!(k.as_str())))).unwrap();
        assert_eq!(d.kind, *k);
    }
    for s in DisputeStatus::ALL {
        let d = DisputeData::parse(&with(&dispute(), "status", Some(json!(s.as_str())))).unwrap();
        assert_eq!(d.status, *s);
    }
}

#[test]
fn dispute_reason_and_times() {
    assert_eq!(
        DisputeData::parse(&with(&dispute(), "reason", Some(json!(["x"])))),
        Err(issue("reason", "must be a string"))
    );
    for bad in [
        json!("yesterday"),
        json!("2026-11-22"),
        json!(1_700_000_000),
    ] {
        assert_eq!(
            DisputeData::parse(&with(&dispute(), "opened_at", Some(bad.clone()))),
            Err(issue("opened_at", "must be an RFC 3339 timestamp"))
        );
        assert_eq!(
            DisputeData::parse(&with(
                &with(&dispute(), "resolved_at", None),
                "closed_at",
                Some(bad)
            )),
            Err(issue("closed_at", "must be an RFC 3339 timestamp"))
        );
    }
    let closed = with(
        &dispute(),
        "closed_at",
        Some(json!("2026-11-25T00:00:00+01:00")),
    );
    assert_eq!(
        DisputeData::parse(&closed).unwrap().resolved_at,
        Some(ts("2026-11-24T23:00:00Z"))
    );
    // The resource's own name wins over the alias.
    let both = with(&closed, "resolved_at", Some(json!("2026-11-26T00:00:00Z")));
    assert_eq!(
        DisputeData::parse(&both).unwrap().resolved_at,
        Some(ts("2026-11-26T00:00:00Z"))
    );
}

#[test]
fn payout_parses() {
    let p = PayoutData::parse(&payout()).unwrap();
    assert_eq!(p.payout_ref.as_str(), WD);
    assert_eq!(
        p.beneficiary_business_ref.as_ref().map(Ref::as_str),
        Some(BIZ)
    );
    assert_eq!(p.status, PayoutStatus::Paid);
    assert_eq!(
        (p.amount, p.fee, p.net()),
        (eur(100_000), eur(250), eur(99_750))
    );
    assert_eq!(p.method_key.as_deref(), Some("sepa"));
    assert_eq!(p.destination_label.as_deref(), Some("Main account"));
    assert_eq!(p.destination_last4.as_deref(), Some("6789"));
    assert_eq!(p.failure_reason, None);
    assert_eq!(p.requested_at, Some(ts("2026-11-22T10:04:05.123Z")));
    assert_eq!(p.completed_at, Some(ts("2026-11-23T10:00:00Z")));
    assert_eq!(p.paid_at, Some(ts("2026-11-23T10:00:00Z")));

    let mut min = payout();
    for f in [
        "beneficiary_business_ref",
        "net",
        "method_key",
        "destination_label",
        "destination_last4",
        "failure_reason",
        "requested_at",
        "completed_at",
        "paid_at",
    ] {
        min = with(&min, f, None);
    }
    let p = PayoutData::parse(&min).unwrap();
    assert_eq!(p.beneficiary_business_ref, None);
    assert_eq!(p.net(), eur(99_750));
}

#[test]
fn payout_catalogue_spellings() {
    let v = json!({
        "payout_ref": WD, "beneficiary_business_ref": BIZ, "status": "failed",
        "amount": money("100000"), "fee": money("250"), "net": money("99750"),
        "destination_last4": "6789", "failure_code": "account_closed",
        "created_at": "2026-11-22T10:04:05.123Z", "arrived_at": null
    });
    let p = PayoutData::parse(&v).unwrap();
    assert_eq!(p.status, PayoutStatus::Failed);
    assert_eq!(p.failure_reason.as_deref(), Some("account_closed"));
    assert_eq!(p.requested_at, Some(ts("2026-11-22T10:04:05.123Z")));
    assert_eq!(p.completed_at, None);
}

#[test]
fn payout_fee_and_net() {
    let usd = json!({"currency": "USD", "unit": "minor", "value": "250"});
    let cases = [
        ("fee", None, issue("fee", "is required")),
        (
            "fee",
            Some(usd),
            issue("fee", "must be in the currency of amount"),
        ),
        (
            "fee",
            Some(money("100001")),
            issue("fee", "must not exceed amount"),
        ),
        (
            "net",
            Some(money("100000")),
            issue("net", "must equal amount minus fee"),
        ),
        (
            "net",
            Some(json!("99750")),
            issue("net", "must be a Money object {currency, unit, value}"),
        ),
    ];
    for (field, value, expected) in cases {
        assert_eq!(
            PayoutData::parse(&with(&payout(), field, value)),
            Err(expected),
            "{field}"
        );
    }
    // A fee of the whole amount leaves nothing, and that is allowed.
    let all_fee = with(
        &with(&payout(), "fee", Some(money("100000"))),
        "net",
        Some(money("0")),
    );
    assert_eq!(PayoutData::parse(&all_fee).unwrap().net(), eur(0));
}

#[test]
fn payout_other_fields() {
    for bad in [
        json!("123"),
        json!("12345"),
        json!("12a4"),
        json!("١٢٣٤"),
        json!(" 123"),
        json!(""),
    ] {
        assert_eq!(
            PayoutData::parse(&with(&payout(), "destination_last4", Some(bad))),
            Err(issue("destination_last4", "must be exactly 4 digits"))
        );
    }
    assert_eq!(
        PayoutData::parse(&with(&payout(), "destination_last4", Some(json!(1234)))),
        Err(issue("destination_last4", "must be a string"))
    );
    assert_eq!(
        PayoutData::parse(&with(&payout(), "destination_last4", Some(json!("0000"))))
            .unwrap()
            .destination_last4
            .as_deref(),
        Some("0000")
    );
    let cases = [
        (
            "payout_ref",
            Some(json!(PTC)),
            issue("payout_ref", "must start with `wd_`"),
        ),
        ("payout_ref", None, issue("payout_ref", "is required")),
        (
            "beneficiary_business_ref",
            Some(json!(WD)),
            issue("beneficiary_business_ref", "must start with `biz_`"),
        ),
        (
            "status",
            Some(json!("done")),
            issue(
                "status",
                "must be one of pending, in_transit, paid, failed, canceled",
            ),
        ),
        (
            "method_key",
            Some(json!(1)),
            issue("method_key", "must be a string"),
        ),
        (
            "destination_label",
            Some(json!({})),
            issue("destination_label", "must be a string"),
        ),
        (
            "failure_reason",
            Some(json!(false)),
            issue("failure_reason", "must be a string"),
        ),
        (
            "requested_at",
            Some(json!("soon")),
            issue("requested_at", "must be an RFC 3339 timestamp"),
        ),
        (
            "completed_at",
            Some(json!("soon")),
            issue("completed_at", "must be an RFC 3339 timestamp"),
        ),
        (
            "paid_at",
            Some(json!("soon")),
            issue("paid_at", "must be an RFC 3339 timestamp"),
        ),
    ];
    for (field, value, expected) in cases {
        assert_eq!(
            PayoutData::parse(&with(&payout(), field, value)),
            Err(expected),
            "{field}"
        );
    }
    for s in PayoutStatus::ALL {
        let p = PayoutData::parse(&with(&payout(), "status", Some(json!(s.as_str())))).unwrap();
        assert_eq!(p.status, *s);
    }
}

#[test]
fn participation_parses() {
    let p = ParticipationData::parse(&participation()).unwrap();
    assert_eq!(p.participation_ref.as_str(), PTC);
    assert_eq!(p.beneficiary_business_ref.as_str(), BIZ);
    assert_eq!(p.status, ParticipationStatus::Accepted);
    assert_eq!(p.invited_at, Some(ts("2026-11-22T10:04:05.123Z")));
    assert_eq!(p.accepted_at, Some(ts("2026-11-23T10:00:00Z")));
    assert_eq!(p.terms_version, Some(3));
    assert_eq!(p.terms_digest.as_deref(), Some(TEST_DIGEST));
    assert_eq!(p.invitee_email.as_deref(), Some("finance@example.org"));
    assert_eq!(p.invitee_name.as_deref(), Some("Grace Hopper"));

    let invited = json!({
        "participation_ref": PTC, "beneficiary_business_ref": BIZ, "status": "invited",
        "accepted_at": null, "terms_digest": null
    });
    let p = ParticipationData::parse(&invited).unwrap();
    assert_eq!(p.status, ParticipationStatus::Invited);
    assert_eq!(
        (
            p.accepted_at,
            p.terms_version,
            p.terms_digest,
            p.invitee_email
        ),
        (None, None, None, None)
    );
}

#[test]
fn participation_terms() {
    assert_eq!(terms_digest("test"), TEST_DIGEST);
    let text_only = with(
        &with(&participation(), "terms_digest", None),
        "terms_text",
        Some(json!("test")),
    );
    assert_eq!(
        ParticipationData::parse(&text_only)
            .unwrap()
            .terms_digest
            .as_deref(),
        Some(TEST_DIGEST)
    );
    let both = with(&participation(), "terms_text", Some(json!("test")));
    assert!(ParticipationData::parse(&both).is_ok());
    let differ = with(&participation(), "terms_text", Some(json!("other terms")));
    assert_eq!(
        ParticipationData::parse(&differ),
        Err(issue("terms_digest", "must be the SHA-256 of terms_text"))
    );
    let hex_issue = issue(
        "terms_digest",
        "must be 64 lower-case hexadecimal digits (SHA-256)",
    );
    for bad in [
        TEST_DIGEST.to_uppercase(),
        TEST_DIGEST[..63].to_owned(),
        format!("{TEST_DIGEST}0"),
        "g".repeat(64),
    ] {
        assert_eq!(
            ParticipationData::parse(&with(&participation(), "terms_digest", Some(json!(bad)))),
            Err(hex_issue.clone())
        );
    }
    assert_eq!(
        ParticipationData::parse(&with(&participation(), "terms_text", Some(json!(1)))),
        Err(issue("terms_text", "must be a string"))
    );
    let version_issue = issue("terms_version", "must be an integer from 1 to 4294967295");
    for bad in [
        json!(0),
        json!(-1),
        json!(1.5),
        json!("1"),
        json!(4_294_967_296u64),
    ] {
        assert_eq!(
            ParticipationData::parse(&with(&participation(), "terms_version", Some(bad))),
            Err(version_issue.clone())
        );
    }
    let max = with(
        &participation(),
        "terms_version",
        Some(json!(4_294_967_295u64)),
    );
    assert_eq!(
        ParticipationData::parse(&max).unwrap().terms_version,
        Some(u32::MAX)
    );
}

#[test]
fn participation_other_fields() {
    let cases = [
        (
            "participation_ref",
            None,
            issue("participation_ref", "is required"),
        ),
        (
            "participation_ref",
            Some(json!(BIZ)),
            issue("participation_ref", "must start with `ptc_`"),
        ),
        (
            "beneficiary_business_ref",
            None,
            issue("beneficiary_business_ref", "is required"),
        ),
        (
            "beneficiary_business_ref",
            Some(json!(PTC)),
            issue("beneficiary_business_ref", "must start with `biz_`"),
        ),
        (
            "status",
            Some(json!("pending")),
            issue(
                "status",
                "must be one of invited, accepted, declined, revoked",
            ),
        ),
        ("status", None, issue("status", "is required")),
        (
            "invited_at",
            Some(json!("x")),
            issue("invited_at", "must be an RFC 3339 timestamp"),
        ),
        (
            "accepted_at",
            Some(json!(0)),
            issue("accepted_at", "must be an RFC 3339 timestamp"),
        ),
        (
            "invitee",
            Some(json!("finance@example.org")),
            issue("invitee", "must be an object"),
        ),
        (
            "invitee",
            Some(json!({"email": 1})),
            issue("invitee.email", "must be a string"),
        ),
        (
            "invitee",
            Some(json!({"name": []})),
            issue("invitee.name", "must be a string"),
        ),
    ];
    for (field, value, expected) in cases {
        assert_eq!(
            ParticipationData::parse(&with(&participation(), field, value)),
            Err(expected),
            "{field}"
        );
    }
    for s in ParticipationStatus::ALL {
        let p =
            ParticipationData::parse(&with(&participation(), "status", Some(json!(s.as_str()))))
                .unwrap();
        assert_eq!(p.status, *s);
    }
}

proptest! {
    /// A payout parses exactly when its fee fits its amount and a stated
    /// net agrees; then `net() + fee == amount`.
    #[test]
    fn payout_arithmetic(amount in 0u64..1_000_000, fee in 0u64..1_000_000, net in proptest::option::of(0u64..1_000_000)) {
        let mut v = with(&payout(), "amount", Some(money(&amount.to_string())));
        v = with(&v, "fee", Some(money(&fee.to_string())));
        v = with(&v, "net", net.map(|n| money(&n.to_string())));
        let ok = fee <= amount && net.is_none_or(|n| n + fee == amount);
        let r = PayoutData::parse(&v);
        prop_assert_eq!(r.is_ok(), ok, "{:?}", r);
        if let Ok(p) = r {
            prop_assert_eq!(p.net().checked_add(p.fee), Ok(p.amount));
        }
    }

    /// Whatever the terms text, the digest it yields is one a sender could
    /// also have stated.
    #[test]
    fn computed_digests_are_well_formed(text in any::<String>()) {
        let d = terms_digest(&text);
        prop_assert!(is_sha256_hex(&d));
        let stated = with(&participation(), "terms_digest", Some(json!(d.clone())));
        let from_text = with(&stated, "terms_text", Some(json!(text)));
        prop_assert_eq!(ParticipationData::parse(&from_text).unwrap().terms_digest, Some(d));
    }

    /// Any upstream reason becomes a safe one.
    #[test]
    fn dispute_reasons_are_sanitised(reason in any::<String>()) {
        let d = DisputeData::parse(&with(&dispute(), "reason", Some(json!(reason.clone())))).unwrap();
        prop_assert_eq!(d.reason.as_deref(), Some(reason.as_str()));
        prop_assert_eq!(d.reason_safe(), Some(reason_safe(&reason)));
    }
}
