//! What an attempt needs to know about its endpoint (url, status, signing
//! secrets, active grant), cached per endpoint version. Every claim batch
//! re-reads the versions, and every secret or grant change bumps the
//! version, so an attempt never uses a revoked secret or a revoked grant.

use crate::sending::{Destination, Sender};
use domain::webhook::cipher::SecretCipher;
use domain::webhook::shaping::{GrantView, GrantedField};
use domain::webhook::signing::SigningSecret;
use domain::webhook::EndpointStatus;
use domain::{Clock, Ref, Timestamp};
use std::collections::HashMap;
use std::sync::Arc;
use store::{Store, StoreError};

pub struct EndpointView {
    pub endpoint_ref: Ref,
    pub url: String,
    pub destination: Destination,
    pub status: EndpointStatus,
    pub version: i64,
    /// Decrypted secrets of the versions that sign, each with the time it
    /// stops signing (a retiring version's expiry).
    pub secrets: Vec<(Option<Timestamp>, SigningSecret)>,
    pub grant: Option<GrantView>,
    /// Its failing health was announced (`webhook_endpoint.failing`).
    pub reported_failing: bool,
    /// Its own rate limit (contract 13.2), the base a 429 halves.
    pub rate_limit: Option<domain::webhook::limits::RateLimit>,
}

impl EndpointView {
    /// The secrets that sign an attempt starting at `now`.
    pub fn signing_secrets(&self, now: Timestamp) -> Vec<SigningSecret> {
        self.secrets
            .iter()
            .filter(|(until, _)| until.is_none_or(|u| now < u))
            .map(|(_, s)| s.clone())
            .collect()
    }
}

#[derive(Default)]
pub struct EndpointCache {
    views: HashMap<String, Arc<EndpointView>>,
}

impl EndpointCache {
    /// The current view of `endpoint_ref`, reloaded when its version moved.
    pub async fn get(
        &mut self,
        store: &Store,
        (cipher, sender, clock): (&SecretCipher, &Sender, &Clock),
        environment_ref: &Ref,
        endpoint_ref: &Ref,
        current_version: i64,
    ) -> Result<Arc<EndpointView>, StoreError> {
        if let Some(v) = self.views.get(endpoint_ref.as_str()) {
            if v.version == current_version {
                return Ok(v.clone());
            }
        }
        let e = store
            .webhooks()
            .endpoint(environment_ref, endpoint_ref)
            .await?;
        let grant = match store
            .webhooks()
            .active_data_profile_grant(endpoint_ref)
            .await?
        {
            Some(g) => {
                // The fields the grant names, as shaping finds them in a
                // resource: the config and key behind each `cf_` reference.
                // A reference never changes what it names, so the view
                // stays good until the endpoint's version moves.
                let fields = store
                    .billing()
                    .custom_fields(environment_ref, &g.custom_field_refs)
                    .await?;
                Some(GrantView {
                    data_classes: g.data_classes,
                    custom_field_refs: g.custom_field_refs,
                    custom_fields: fields.into_iter().map(GrantedField::from).collect(),
                })
            }
            None => None,
        };
        let now = clock.now();
        let secrets = e
            .secret_versions
            .iter()
            .filter(|v| v.meta.signs(now))
            .filter_map(|v| {
                let bytes = cipher.decrypt(&v.ciphertext)?;
                let key = <[u8; 32]>::try_from(bytes.as_slice()).ok()?;
                let until = match v.meta.status {
                    domain::webhook::secret_version::SecretVersionStatus::Retiring => {
                        v.meta.expires_at
                    }
                    _ => None,
                };
                Some((until, SigningSecret::from_bytes(key)))
            })
            .collect();
        let view = Arc::new(EndpointView {
            endpoint_ref: e.endpoint_ref.clone(),
            url: e.url.clone(),
            destination: sender.destination(&e.url),
            status: e.status,
            version: e.version,
            secrets,
            grant,
            reported_failing: e.reported_failing,
            rate_limit: e.protection.limits.rate_limit,
        });
        self.views.insert(endpoint_ref.to_string(), view.clone());
        Ok(view)
    }
}
