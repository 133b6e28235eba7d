//! `billing admin publish-event`: puts one event on the configured queue:
//! the exchange `billing.events` of RabbitMQ in a fleet (routing key = the
//! event type, publisher confirms), or the store's queue in the embedded
//! mode. The envelope is validated first either way; an invalid one is
//! refused here rather than dead-lettered, since the operator is there to
//! read why.

use crate::config::Config;
use anyhow::Context;

pub async fn publish(config: &Config, body: &[u8]) -> anyhow::Result<String> {
    let (event, producer) = dispatcher::intake::parse_with_producer(body)
        .map_err(|reason| anyhow::anyhow!("event refused: {reason}"))?;
    if let Some(url) = config.amqp_url() {
        dispatcher::amqp::publish(url, body, &event.public_event_type)
            .await
            .map_err(|e| anyhow::anyhow!("publishing to RabbitMQ failed: {e}"))?;
        return Ok(format!("published {} to billing.events", event.event_ref));
    }
    let store = crate::app::open_store(config).await?;
    let queue = crate::app::event_queue(&store);
    let environment = event.environment_ref.clone();
    let event = match dispatcher::intake::screen(&queue, event, producer.as_deref())
        .await
        .context("failed to screen the event")?
    {
        dispatcher::intake::Screened::Accept(event) => event,
        dispatcher::intake::Screened::Foreign => {
            anyhow::bail!("event refused: this store has no environment {environment}")
        }
        dispatcher::intake::Screened::Refuse(reason) => {
            anyhow::bail!("event refused: {reason}")
        }
    };
    let new = queue
        .enqueue(&event)
        .await
        .context("failed to enqueue the event")?;
    Ok(if new {
        format!("accepted {}", event.event_ref)
    } else {
        format!(
            "{} was accepted before; it is processed once",
            event.event_ref
        )
    })
}
