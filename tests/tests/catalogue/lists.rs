//! Lists.

use super::*;

pub(super) async fn lists(app: TestApp) {
    let mut made = Vec::new();
    for i in 0..5 {
        made.push(text(
            &create_product(&app, &format!("P{i}")).await["product_ref"],
        ));
        // Distinct creation times, so that newest first is creation order reversed.
        billing_tests::poll::next_millisecond().await;
    }
    for p in &made[..2] {
        publish(&app, &at(PRODUCTS, p, "/publish"))
            .await
            .expect(200);
    }
    // A cursor walk over every page.
    let all = walk(&app, PRODUCTS, 2).await;
    same_once(&refs(&all, "product_ref"), &made);
    newest_first(&all, "product_ref");
    for p in &all {
        has_fields(p, PRODUCT_FIELDS);
    }
    let first_page = app.get(&format!("{PRODUCTS}?limit=2")).send().await;
    assert_eq!(first_page.data()["has_more"], true);
    assert_eq!(
        refs(&list(&app, PRODUCTS).await, "product_ref"),
        refs(&all, "product_ref"),
        "one page holds them all"
    );
    let newest: Vec<String> = made.iter().rev().cloned().collect();
    assert_eq!(refs(&all, "product_ref"), newest, "newest first");

    // Filters.
    let published = list(&app, &format!("{PRODUCTS}?status=published")).await;
    same_once(&refs(&published, "product_ref"), &made[..2]);
    let drafts = list(&app, &format!("{PRODUCTS}?status=draft")).await;
    same_once(&refs(&drafts, "product_ref"), &made[2..]);
    assert!(list(&app, &format!("{PRODUCTS}?status=archived"))
        .await
        .is_empty());
    let walked = walk(&app, &format!("{PRODUCTS}?status=draft"), 1).await;
    same_once(&refs(&walked, "product_ref"), &made[2..]);
    for (query, field) in [
        ("status=bogus", "status"),
        ("status=superseded", "status"),
        ("colour=red", "colour"),
        ("product_ref=prd_N5xP3cV8bT1m", "product_ref"),
        ("limit=0", "limit"),
        ("limit=101", "limit"),
        ("cursor=garbage", "cursor"),
    ] {
        let r = app.get(&format!("{PRODUCTS}?{query}")).send().await;
        assert_eq!(r.status, 400, "{query}: {}", r.text);
        invalid(&r, field);
    }

    // Keyset paging: a product made after the first page shifts nothing.
    let cursor = text(&first_page.data()["next_cursor"]);
    assert_eq!(
        refs(
            first_page.data()["items"].as_array().unwrap(),
            "product_ref"
        ),
        newest[..2].to_vec()
    );
    billing_tests::poll::next_millisecond().await;
    create_product(&app, "Newer").await;
    let mut rest = Vec::new();
    let mut next = Some(cursor);
    while let Some(c) = next {
        let r = get(&app, &format!("{PRODUCTS}?limit=2&cursor={c}")).await;
        rest.extend(refs(&items(&r), "product_ref"));
        next = r.data()["next_cursor"].as_str().map(str::to_owned);
    }
    assert_eq!(rest, newest[2..].to_vec(), "the later pages are unchanged");

    // Prices: status and product_ref.
    let (a, b) = (made[0].clone(), made[1].clone());
    let a1 = create_price(&app, &a, eur("100"), None).await;
    let a2 = create_price(&app, &a, eur("200"), None).await;
    let a3 = create_price(&app, &a, eur("300"), None).await;
    let b1 = create_price(&app, &b, eur("400"), Some("month")).await;
    for p in [&a1, &a2] {
        publish(&app, &at(PRICES, p, "/publish")).await.expect(200);
    }
    let q = |query: &str| format!("{PRICES}?{query}");
    let cases: Vec<(String, Vec<String>)> = vec![
        (
            q(&format!("product_ref={a}")),
            vec![a3.clone(), a2.clone(), a1.clone()],
        ),
        (q(&format!("product_ref={b}")), vec![b1.clone()]),
        (q("status=draft"), vec![b1.clone(), a3.clone()]),
        (q("status=published"), vec![a2.clone()]),
        (q("status=superseded"), vec![a1.clone()]),
        (
            q(&format!("product_ref={a}&status=draft")),
            vec![a3.clone()],
        ),
        (
            q(&format!("status=draft&product_ref={b}")),
            vec![b1.clone()],
        ),
        (q(&format!("product_ref={}", made[4])), vec![]),
    ];
    for (path, expected) in cases {
        let got = list(&app, &path).await;
        same_once(&refs(&got, "price_ref"), &expected);
        newest_first(&got, "price_ref");
        for p in &got {
            has_fields(p, PRICE_FIELDS);
        }
    }
    let all_prices = walk(&app, PRICES, 3).await;
    same_once(
        &refs(&all_prices, "price_ref"),
        &[a1.clone(), a2.clone(), a3.clone(), b1.clone()],
    );
    newest_first(&all_prices, "price_ref");
    for (query, field) in [
        ("status=active", "status"),
        ("status=bogus", "status"),
        ("product_ref=prd_short", "product_ref"),
        ("product_ref=pri_N5xP3cV8bT1m", "product_ref"),
        ("offer_ref=ofr_N5xP3cV8bT1m", "offer_ref"),
    ] {
        let r = app.get(&q(query)).send().await;
        assert_eq!(r.status, 400, "{query}: {}", r.text);
        invalid(&r, field);
    }
    // A cursor of another list.
    let page = app.get(&q("limit=1")).send().await;
    let cursor = text(&page.data()["next_cursor"]);
    let r = app
        .get(&format!("{PRODUCTS}?limit=1&cursor={cursor}"))
        .send()
        .await;
    invalid(&r, "cursor");
    let r = app
        .get(&format!("{PRICES}?limit=1&status=draft&cursor={cursor}"))
        .send()
        .await;
    invalid(&r, "cursor");

    // Offers: status and product_ref.
    publish(&app, &at(PRICES, &b1, "/publish"))
        .await
        .expect(200);
    let oa = text(&offer_of(&app, &a).await["offer_ref"]);
    let ob = text(&offer_of(&app, &b).await["offer_ref"]);
    let offers = walk(&app, OFFERS, 1).await;
    same_once(&refs(&offers, "offer_ref"), &[oa.clone(), ob.clone()]);
    newest_first(&offers, "offer_ref");
    for o in &offers {
        has_fields(o, OFFER_FIELDS);
    }
    let active = list(&app, &format!("{OFFERS}?status=active")).await;
    same_once(&refs(&active, "offer_ref"), &[oa.clone(), ob.clone()]);
    assert!(list(&app, &format!("{OFFERS}?status=retired"))
        .await
        .is_empty());
    let only_b = list(&app, &format!("{OFFERS}?product_ref={b}&status=active")).await;
    assert_eq!(refs(&only_b, "offer_ref"), vec![ob.clone()]);
    for (query, field) in [
        ("status=published", "status"),
        ("status=bogus", "status"),
        ("product_ref=bogus", "product_ref"),
        ("price_ref=pri_N5xP3cV8bT1m", "price_ref"),
    ] {
        let r = app.get(&format!("{OFFERS}?{query}")).send().await;
        assert_eq!(r.status, 400, "{query}: {}", r.text);
        invalid(&r, field);
    }
}
