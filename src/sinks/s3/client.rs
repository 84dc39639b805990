//! The S3 client (`object_store`'s `AmazonS3`) built from the settings: region, endpoint,
//! path style, timeouts, and the access keys read from their environment variable or
//! file here, when the sink opens, never logged.
//!
//! Without key settings, only the AWS environment's credential variables are taken
//! (keys, session token, web identity, container credentials), not its endpoint or
//! `AWS_ALLOW_HTTP`: where objects go and whether they travel in clear is the config's
//! decision alone.

use std::sync::Arc;
use std::time::Duration;

use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey};
use object_store::{BackoffConfig, ClientOptions, ObjectStore, RetryConfig};

use super::config::S3Config;
use crate::sinks::contract::SinkError;

/// Environment variables taken when the config names no keys.
const AWS_CREDENTIAL_VARS: [&str; 10] = [
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_WEB_IDENTITY_TOKEN_FILE",
    "AWS_ROLE_ARN",
    "AWS_ROLE_SESSION_NAME",
    "AWS_ENDPOINT_URL_STS",
    "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
    "AWS_CONTAINER_CREDENTIALS_FULL_URI",
    "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE",
];

/// Retries inside one write: a blip on one part should not restart a multipart upload.
/// Beyond these, the runner's own backoff (`delivery.retry`) holds the batch.
const INNER_RETRIES: usize = 2;

/// Reads one secret from an environment variable or a file (one trailing newline cut).
fn secret(what: &str, env: Option<&str>, file: Option<&str>) -> Result<String, SinkError> {
    let value = match (env, file) {
        (Some(var), _) => std::env::var(var).map_err(|_| SinkError::Misconfigured {
            message: format!("{what}: environment variable {var} is not set (or not UTF-8)"),
        })?,
        (None, Some(path)) => {
            let mut text =
                crate::files::read_text(std::path::Path::new(path), crate::files::Kind::Secret)
                    .map_err(|e| SinkError::Misconfigured {
                        message: format!("{what}: {e}"),
                    })?;
            if text.ends_with('\n') {
                text.pop();
                if text.ends_with('\r') {
                    text.pop();
                }
            }
            text
        }
        (None, None) => {
            return Err(SinkError::Misconfigured {
                message: format!("{what}: not configured"),
            })
        }
    };
    if value.is_empty() {
        return Err(SinkError::Misconfigured {
            message: format!("{what} is empty"),
        });
    }
    Ok(value)
}

/// Builds the store for `c`. Every error is `Misconfigured`: nothing is contacted yet.
pub fn build(c: &S3Config) -> Result<Arc<dyn ObjectStore>, SinkError> {
    let mut b = AmazonS3Builder::new();
    if c.explicit_keys() {
        let id = secret(
            "access key id",
            c.access_key_id_env.as_deref(),
            c.access_key_id_file.as_deref(),
        )?;
        let key = secret(
            "secret access key",
            c.secret_access_key_env.as_deref(),
            c.secret_access_key_file.as_deref(),
        )?;
        b = b.with_access_key_id(id).with_secret_access_key(key);
    } else {
        for var in AWS_CREDENTIAL_VARS {
            if let Ok(value) = std::env::var(var) {
                if let Ok(key) = var.to_ascii_lowercase().parse::<AmazonS3ConfigKey>() {
                    b = b.with_config(key, value);
                }
            }
        }
    }
    let region = c
        .region
        .clone()
        .or_else(|| std::env::var("AWS_REGION").ok())
        .or_else(|| std::env::var("AWS_DEFAULT_REGION").ok())
        .unwrap_or_else(|| "us-east-1".into());
    b = b
        .with_region(region)
        .with_bucket_name(&c.bucket)
        .with_virtual_hosted_style_request(!c.path_style)
        .with_client_options(
            ClientOptions::new()
                .with_connect_timeout(Duration::from_millis(c.connect_timeout_ms))
                .with_timeout(Duration::from_millis(c.request_timeout_ms)),
        )
        .with_allow_http(c.allow_http)
        .with_retry(RetryConfig {
            backoff: BackoffConfig {
                init_backoff: Duration::from_millis(100),
                max_backoff: Duration::from_secs(1),
                base: 2.0,
            },
            max_retries: INNER_RETRIES,
            retry_timeout: Duration::from_millis(c.request_timeout_ms),
        });
    if let Some(endpoint) = &c.endpoint {
        b = b.with_endpoint(endpoint);
    }
    let store = b.build().map_err(|e| SinkError::Misconfigured {
        message: format!("cannot set up the S3 client: {e}"),
    })?;
    Ok(Arc::new(store))
}
