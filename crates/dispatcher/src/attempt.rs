//! One attempt: shape the body for the endpoint's dto version and its grant
//! at this moment, sign it with every signing secret version, send it, and
//! decide what follows.

use crate::endpoints::EndpointView;
use crate::failing::{FailingSince, HealthChange};
use crate::metrics as m;
use crate::schedule::{after_attempt, Answer};
use crate::sending::Sender;
use crate::settings::DispatchSettings;
use crate::signing;
use domain::webhook::limits::{pushes_back, Pushback, RateLimit};
use domain::webhook::{AttemptStatus, DeliveryStatus};
use domain::Timestamp;
use std::time::Instant;
use store::{AttemptResult, DeliveryRecord, Payload, Store};

pub async fn run(
    store: &Store,
    settings: &DispatchSettings,
    sender: &Sender,
    delivery: &DeliveryRecord,
    endpoint: &EndpointView,
    failing: &FailingSince,
) -> AttemptResult {
    let result = attempt(store, settings, sender, delivery, endpoint, failing).await;
    let success = result.status == AttemptStatus::Succeeded;
    match failing.observe(&delivery.endpoint_ref, success, endpoint.reported_failing) {
        HealthChange::None => {}
        HealthChange::MaybeFailing => announce_failing(store, settings, failing, delivery).await,
        HealthChange::Recovered => {
            let now = Timestamp::now();
            let reported = store
                .dispatch()
                .report_failing(&delivery.endpoint_ref, false, now, &*settings.announce, now)
                .await;
            if let Err(e) = reported {
                tracing::warn!(error = %e, "the endpoint's recovery was not announced");
            }
        }
    }
    result
}

/// After this process's `FAILING_STREAK`th failure in a row to the
/// endpoint (health's `failing`: the last attempts all failed), unless the
/// newest attempt the store holds, another process's perhaps, succeeded:
/// the change is announced once, with when the endpoint will be disabled.
/// This process's own failures may not be recorded yet (they are written
/// in batches), so its streak is the evidence and the store the veto.
async fn announce_failing(
    store: &Store,
    settings: &DispatchSettings,
    failing: &FailingSince,
    delivery: &DeliveryRecord,
) {
    let endpoint = &delivery.endpoint_ref;
    let newest = match store.webhooks().recent_attempt_outcomes(endpoint, 1).await {
        Ok(newest) => newest,
        Err(e) => {
            tracing::warn!(error = %e, "could not read the endpoint's attempts");
            return;
        }
    };
    if newest.first() == Some(&AttemptStatus::Succeeded) {
        return;
    }
    let now = Timestamp::now();
    let since = match store.dispatch().endpoint_failing_since(endpoint).await {
        Ok(since) => since.unwrap_or(now),
        Err(e) => {
            tracing::warn!(error = %e, "could not read the endpoint's failure history");
            return;
        }
    };
    let disable_at = since.plus_millis(settings.disable_after.as_millis() as i64);
    match store
        .dispatch()
        .report_failing(endpoint, true, disable_at, &*settings.announce, now)
        .await
    {
        Ok(_) => failing.announced_failing(endpoint),
        Err(e) => tracing::warn!(error = %e, "the endpoint's failing health was not announced"),
    }
}

async fn attempt(
    store: &Store,
    settings: &DispatchSettings,
    sender: &Sender,
    delivery: &DeliveryRecord,
    endpoint: &EndpointView,
    failing: &FailingSince,
) -> AttemptResult {
    let started = Timestamp::now();
    let clock = Instant::now();
    let data = match serde_json::from_str(&delivery.event_data) {
        Ok(data) => data,
        // Written by the store as JSON; anything else was damaged at rest.
        Err(e) => {
            let about = (delivery, endpoint.rate_limit);
            return unreadable((store, failing), settings, about, started, e).await;
        }
    };
    let body = webhook_shapes::body::delivered(delivery, data, endpoint.grant.as_ref());
    let headers = signing::headers(
        delivery.delivery_ref.as_str(),
        started.millis() / 1000,
        body.as_bytes(),
        &endpoint.signing_secrets(settings.clock.now()),
    );
    // A body shaped for no grant is its event's data and the delivery's
    // own fields: the store keeps it as `Rebuilt`, and the body view
    // builds it again with the same function.
    let (sent, payload) = match endpoint.grant {
        None => (body, Payload::Rebuilt),
        Some(_) => (body.clone(), Payload::Verbatim(body)),
    };
    let response = sender
        .post(&endpoint.destination, &headers, sent, settings.timeout)
        .await;
    conclude(
        (store, failing),
        settings,
        (delivery, endpoint.rate_limit),
        (started, clock),
        response,
        payload,
    )
    .await
}

/// An attempt that sent nothing: the delivery's stored event data cannot
/// be read. It fails like a refused request, so the retry schedule and
/// exhaustion apply and an operator sees why in the attempt.
async fn unreadable(
    store: (&Store, &FailingSince),
    settings: &DispatchSettings,
    (delivery, rate_limit): (&DeliveryRecord, Option<RateLimit>),
    started: Timestamp,
    e: serde_json::Error,
) -> AttemptResult {
    let response = crate::sending::Response {
        status: None,
        excerpt: None,
        error: Some(format!("the stored event data is not JSON: {e}")),
        retry_after: None,
    };
    tracing::error!(
        delivery.r#ref = delivery.delivery_ref.as_str(),
        "stored event data is not JSON"
    );
    let clock = Instant::now();
    conclude(
        store,
        settings,
        (delivery, rate_limit),
        (started, clock),
        response,
        Payload::Absent,
    )
    .await
}

/// The attempt's result from the answer to its request: what follows
/// (`schedule`), whether the endpoint has failed for too long, what a 429
/// or 503 tells of the endpoint (`pushback`: its base is the endpoint's
/// `rate_limit`, or 0 when it has none, for the dispatcher to fill in
/// with the rate it saw), metrics.
async fn conclude(
    (store, failing): (&Store, &FailingSince),
    settings: &DispatchSettings,
    (delivery, rate_limit): (&DeliveryRecord, Option<RateLimit>),
    (started, clock): (Timestamp, Instant),
    response: crate::sending::Response,
    payload: Payload,
) -> AttemptResult {
    let elapsed = clock.elapsed();
    let success = matches!(response.status, Some(200..=299));
    let attempt_number = delivery.attempt_count + 1;
    let answer = Answer {
        status: response.status,
        retry_after: response.retry_after,
    };
    let mut next = after_attempt(
        &settings.retry_schedule,
        attempt_number,
        &answer,
        Timestamp::now(),
        rand::random(),
    );
    if success {
        failing.succeeded(&delivery.endpoint_ref);
    } else if !next.disable_endpoint {
        next.disable_endpoint = failing
            .too_long(
                store,
                &delivery.endpoint_ref,
                started,
                settings.disable_after,
            )
            .await;
        if next.disable_endpoint {
            // A disabled endpoint holds its deliveries until resumed.
            next.status = DeliveryStatus::Held;
            next.next_attempt_at = None;
        }
    }

    let status = if success {
        AttemptStatus::Succeeded
    } else {
        AttemptStatus::Failed
    };
    metrics::counter!(m::ATTEMPTS, "outcome" => status.as_str(), "status_class" => m::status_class(response.status))
        .increment(1);
    metrics::histogram!(m::ATTEMPT_SECONDS).record(elapsed.as_secs_f64());
    if attempt_number == 1 && delivery.generation == 1 {
        let lag = (started.millis() - delivery.created_at.millis()).max(0) as f64 / 1000.0;
        metrics::histogram!(m::FIRST_ATTEMPT_LAG_SECONDS).record(lag);
    }
    if matches!(
        next.status,
        DeliveryStatus::Succeeded | DeliveryStatus::Failed
    ) {
        metrics::counter!(m::DELIVERIES, "outcome" => next.status.as_str(), "event_type" => delivery.public_event_type.clone())
            .increment(1);
    }
    tracing::debug!(
        delivery.r#ref = delivery.delivery_ref.as_str(),
        endpoint.r#ref = delivery.endpoint_ref.as_str(),
        attempt = attempt_number,
        status = response.status,
        duration_ms = elapsed.as_millis() as u64,
        "attempt"
    );
    AttemptResult {
        delivery_ref: delivery.delivery_ref.clone(),
        environment_ref: delivery.environment_ref.clone(),
        endpoint_ref: delivery.endpoint_ref.clone(),
        generation: delivery.generation,
        attempt_number,
        status,
        response_status: response.status,
        error: response.error,
        response_body_excerpt: response.excerpt,
        duration_ms: elapsed.as_millis() as i64,
        started_at: started,
        next_attempt_at: next.next_attempt_at,
        delivery_status: next.status,
        payload,
        disable_endpoint: next.disable_endpoint,
        ordered_key: delivery
            .order
            .as_ref()
            .filter(|_| delivery.ordered)
            .map(|o| o.key.to_string()),
        pushback: pushes_back(response.status).then(|| Pushback {
            base_milli: rate_limit.map_or(0, RateLimit::milli),
            started_at: started,
            retry_after: response.retry_after,
        }),
    }
}
