use billing_tests::{backend_tests, TestApp};

async fn environments_are_listed(app: TestApp) {
    let r = app.get("/api/v1/environments").send().await;
    r.expect(200);
    assert_eq!(r.data()["items"][0]["mode"], "sandbox");
}

backend_tests!(environments_are_listed);
