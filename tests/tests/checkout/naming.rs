//! The contract's naming.

use super::*;

/// Contract 1: a resource's own reference field is named like its path
/// parameter (`payment_ref` for `/payments/{payment_ref}`); contract 7:
/// `payment_ref` and `payment_intent_ref` name the same value.
pub(super) async fn a_payment_names_its_own_reference(app: TestApp) {
    let (config, _) = one_time_config(&app).await;
    let d = paid_session(&app, &config, "ada@example.com").await;
    let p = &d["payment"];
    assert_eq!(p["payment_ref"], p["payment_intent_ref"], "{p}");
    is_ref(&p["payment_ref"], "pay_");
}
