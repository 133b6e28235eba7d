//! `listWebhookEventTypes`: the event catalogue.

use crate::error::ApiError;
use crate::handlers::Ctx;
use crate::input::Input;
use crate::reply::Reply;
use domain::webhook::catalogue;
use serde::Serialize;
use std::collections::BTreeMap;
use utoipa::ToSchema;

#[derive(Debug, Serialize, ToSchema)]
pub struct EventTypeDto {
    pub public_event_type: String,
    pub description: String,
    pub dto_versions: Vec<u32>,
    pub scope_types: Vec<String>,
    /// Per dto version, the classified fields (dotted paths) and their class.
    pub data_classes: BTreeMap<String, BTreeMap<String, String>>,
    pub diagnostic: bool,
    /// The `data` of an example event in the newest dto version.
    pub example: serde_json::Value,
}

pub async fn list(_ctx: &mut Ctx, input: Input) -> Result<Reply, ApiError> {
    input.query_params(&[])?;
    let items = catalogue::all()
        .iter()
        .map(|e| {
            let newest = e.dto_versions.iter().copied().max().unwrap_or(1);
            let data_classes = e
                .dto_versions
                .iter()
                .map(|v| {
                    let fields = catalogue::data_classes(e.name, *v)
                        .into_iter()
                        .map(|(path, class)| (path.to_owned(), class.as_str().to_owned()))
                        .collect();
                    (v.to_string(), fields)
                })
                .collect();
            EventTypeDto {
                public_event_type: e.name.to_owned(),
                description: e.description.to_owned(),
                dto_versions: e.dto_versions.to_vec(),
                scope_types: e
                    .scope_types
                    .iter()
                    .map(|s| s.as_str().to_owned())
                    .collect(),
                data_classes,
                diagnostic: e.diagnostic,
                example: catalogue::example(e.name, newest).unwrap_or(serde_json::Value::Null),
            }
        })
        .collect();
    Ok(Reply::all(items))
}
