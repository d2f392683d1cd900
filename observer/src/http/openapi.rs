//! `GET /openapi.yaml`: the OpenAPI 3 document of the JSON endpoints.

use axum::{
    http::header,
    response::{IntoResponse, Response},
};

use super::params::NoParams;

/// The document, checked in as docs/openapi.yaml.
pub const OPENAPI: &str = include_str!("../../../docs/openapi.yaml");

/// The handler: the document as `application/yaml`.
pub async fn get_openapi(_: NoParams) -> Response {
    ([(header::CONTENT_TYPE, "application/yaml")], OPENAPI).into_response()
}
