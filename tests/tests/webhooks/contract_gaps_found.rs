//! Contract gaps found.

use super::*;

/// Contract section 5: every response that carries one resource carries a
/// strong ETag; subscriptions and data profile grants are resources.
pub(super) async fn subscriptions_and_grants_carry_etags(app: TestApp) {
    let e = endpoint(&app).await;
    let sub = app
        .post(
            &ep(&e, "/subscriptions"),
            sub_body(&app, "payment.failed", 1),
        )
        .send()
        .await;
    sub.expect(201);
    let grant = app
        .post(
            &ep(&e, "/data_profile_grants"),
            grant_body(&["contact"], &[]),
        )
        .send()
        .await;
    grant.expect(201);
    let revoked = act(&app, &ep(&e, "/data_profile_grants/revoke")).await;
    revoked.expect(200);
    for (what, r) in [
        ("subscription", &sub),
        ("grant", &grant),
        ("revoked grant", &revoked),
    ] {
        let tag = r.header("etag");
        assert!(
            tag.is_some_and(|t| t.starts_with('"') && t.ends_with('"')),
            "a {what} response carries a strong ETag; headers: {:?}",
            r.headers
        );
    }
}

/// Contract section 9: the grant body is `{purpose, reason, data_classes,
/// custom_field_refs}`; unlike the optional fields of the section
/// (`description?`, `custom_field_refs?` of a subscription) none is marked
/// optional, and section 1 makes a missing required field
/// `validation_failed` naming it.
pub(super) async fn grant_body_fields_are_required(app: TestApp) {
    let e = endpoint(&app).await;
    for field in ["data_classes", "custom_field_refs"] {
        let mut body = grant_body(&["contact"], &[]);
        body.as_object_mut().unwrap().remove(field);
        let r = app.post(&ep(&e, "/data_profile_grants"), body).send().await;
        invalid(&r, field);
    }
    assert!(items(&get(&app, &ep(&e, "/data_profile_grants")).await).is_empty());
}
