//! The stores: built once per store URL (bucket or host) from the provider's environment
//! variables and the storage options, or registered by the program; and corank's own
//! settings among the options (retries, part size, concurrency).
//!
//! **Retries.** Every request of a store built here goes through object_store's retry loop
//! with corank's [`RetryConfig`]: a request answered with a 5xx status, 429 or 408 (S3's
//! `503 SlowDown` among them), one whose connection could not be made or was lost before an
//! answer, is sent again after an exponential backoff with jitter (the first wait
//! `retry_backoff`, each next one drawn between that and twice the one before, at most
//! `retry_max_backoff`), until `max_retries` retries were made or `retry_timeout` has
//! passed since the first attempt; then the last error is the request's. A body cut off
//! mid-read (a GET) is read on from where it stopped, by a request for the rest with the
//! same options (`If-Match` kept) whose ETag must be the first one's. A timeout is retried
//! for reads and for the requests object_store marks idempotent (an upload's parts, its
//! creation), not for others (an abort: [`super::upload`] tries it again itself). Other 4xx
//! answers (403, 404, 412) are never retried. Each attempt is bounded by object_store's
//! `timeout` (30 s) and `connect_timeout` (5 s), storage options of its own.

use super::location::ObjectUrl;
use crate::error::{Error, Result};
use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey};
use object_store::azure::{AzureConfigKey, MicrosoftAzureBuilder};
use object_store::gcp::{GoogleCloudStorageBuilder, GoogleConfigKey};
use object_store::http::HttpBuilder;
use object_store::{BackoffConfig, ClientConfigKey, ObjectStore, ObjectStoreScheme, RetryConfig};
use std::collections::HashMap;
use std::str::FromStr;
use std::sync::{Arc, LazyLock, Mutex, MutexGuard};
use std::time::Duration;

/// The storage options corank reads itself (the others go to the stores' builders):
/// `max_retries` (transient errors retried per request, default 10), `retry_timeout`
/// (seconds a request is retried for, default 180), `retry_backoff` (the first wait before
/// a retry, default 100 ms), `retry_max_backoff` (the longest wait, default 15 s),
/// `part_size` (bytes of an upload's parts, default 8 MiB; S3 needs 5 MiB or more but for
/// the last), `max_concurrency` (requests of one reader or upload at once, default 8).
pub const STORAGE_OPTION_KEYS: [&str; 6] =
    ["max_retries", "retry_timeout", "retry_backoff", "retry_max_backoff", "part_size", "max_concurrency"];

/// corank's settings among the options.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub max_retries: usize,
    pub retry_timeout: Duration,
    pub retry_backoff: Duration,
    pub retry_max_backoff: Duration,
    pub part_size: usize,
    pub max_concurrency: usize,
}

impl Default for Settings {
    fn default() -> Self {
        // object_store's own defaults, chosen here so that they stay what the docs say:
        // 10 retries over at most 3 minutes (its advice: below 5, as a retried request is
        // not signed again), waits from 100 ms doubling to 15 s.
        Settings {
            max_retries: 10,
            retry_timeout: Duration::from_secs(180),
            retry_backoff: Duration::from_millis(100),
            retry_max_backoff: Duration::from_secs(15),
            part_size: 8 << 20,
            max_concurrency: 8,
        }
    }
}

impl Settings {
    /// The retry policy of every store built (the module doc).
    pub(crate) fn retry(&self) -> RetryConfig {
        RetryConfig {
            backoff: BackoffConfig {
                init_backoff: self.retry_backoff,
                max_backoff: self.retry_max_backoff.max(self.retry_backoff),
                base: 2.0,
            },
            max_retries: self.max_retries,
            retry_timeout: self.retry_timeout,
        }
    }
}

#[derive(Default)]
struct State {
    /// The options as set, in order (a key set twice: the last value).
    options: Vec<(String, String)>,
    settings: Settings,
    /// Stores built or registered, by store URL.
    stores: HashMap<String, Arc<dyn ObjectStore>>,
    /// Store URLs whose store the program registered (kept when the options change).
    registered: Vec<String>,
}

fn state() -> MutexGuard<'static, State> {
    static STATE: LazyLock<Mutex<State>> = LazyLock::new(Default::default);
    STATE.lock().unwrap_or_else(|e| e.into_inner())
}

/// Sets the storage options of every store built from now on (stores built before are
/// dropped, registered ones kept): keys of object_store's builders (`endpoint`, `region`,
/// `allow_http`, `access_key_id`, `google_service_account`, `azure_storage_account_name`,
/// ...: its `AmazonS3ConfigKey`, `GoogleConfigKey`, `AzureConfigKey` and `ClientConfigKey`),
/// each given to the stores that know it, and corank's own ([`STORAGE_OPTION_KEYS`]).
/// Credentials and endpoints otherwise come from the provider's environment variables
/// (`AWS_ACCESS_KEY_ID`, `AWS_ENDPOINT_URL`, `GOOGLE_SERVICE_ACCOUNT`,
/// `AZURE_STORAGE_ACCOUNT_NAME`, ...). A key no store knows is an error.
///
/// ```no_run
/// corank::parquet::store::set_storage_options([("endpoint", "http://127.0.0.1:9000"), ("allow_http", "true")])?;
/// # Ok::<(), corank::Error>(())
/// ```
pub fn set_storage_options<K: AsRef<str>, V: AsRef<str>>(options: impl IntoIterator<Item = (K, V)>) -> Result<()> {
    let options: Vec<(String, String)> = options.into_iter().map(|(k, v)| (k.as_ref().to_string(), v.as_ref().to_string())).collect();
    let mut settings = Settings::default();
    for (key, value) in &options {
        let bad = |why: &str| Error::InvalidArgument(format!("storage option {key}={value}: {why}"));
        match key.as_str() {
            "max_retries" => settings.max_retries = value.parse().map_err(|_| bad("a count"))?,
            "retry_timeout" => settings.retry_timeout = Duration::from_secs_f64(parse_seconds(value).ok_or_else(|| bad("seconds"))?),
            "retry_backoff" => settings.retry_backoff = Duration::from_secs_f64(parse_seconds(value).ok_or_else(|| bad("seconds"))?),
            "retry_max_backoff" => {
                settings.retry_max_backoff = Duration::from_secs_f64(parse_seconds(value).ok_or_else(|| bad("seconds"))?)
            }
            "part_size" => {
                settings.part_size = parse_size(value).filter(|&n| n >= 1024).ok_or_else(|| bad("bytes, at least 1KiB (S3: 5MiB)"))?
            }
            "max_concurrency" => {
                settings.max_concurrency = value.parse().ok().filter(|&n| n >= 1).ok_or_else(|| bad("a count of 1 or more"))?
            }
            _ if known_key(key) => {}
            _ => {
                return Err(bad(&format!(
                    "no store knows the key '{key}' (object_store's S3, GCS, Azure and HTTP client keys, or corank's {})",
                    STORAGE_OPTION_KEYS.join(", ")
                )))
            }
        }
    }
    let mut state = state();
    state.options = options;
    state.settings = settings;
    let registered = state.registered.clone();
    state.stores.retain(|url, _| registered.contains(url));
    Ok(())
}

/// Puts `store` under `url` (a store URL: `s3://bucket`, `http://host:port`): every URL of
/// that bucket or host is read and written through it, whatever the options. For stores
/// the URLs and options cannot describe, and for tests (a store that fails on purpose).
pub fn register_object_store(url: &str, store: Arc<dyn ObjectStore>) -> Result<()> {
    let probe = format!("{}/x", url.trim_end_matches('/'));
    let parsed = ObjectUrl::parse(std::path::Path::new(&probe))?;
    let mut state = state();
    state.stores.insert(parsed.store_url.clone(), store);
    state.registered.push(parsed.store_url);
    Ok(())
}

/// corank's settings among the options now set.
pub(crate) fn settings() -> Settings {
    state().settings.clone()
}

/// The store of `url`: registered, built before, or built now.
pub(crate) fn store_for(url: &ObjectUrl) -> Result<Arc<dyn ObjectStore>> {
    let mut state = state();
    if let Some(store) = state.stores.get(&url.store_url) {
        return Ok(store.clone());
    }
    let store = build(url, &state.options, &state.settings)
        .map_err(|e| Error::File { path: url.text.clone().into(), detail: format!("cannot set up its store: {e}") })?;
    state.stores.insert(url.store_url.clone(), store.clone());
    Ok(store)
}

fn known_key(key: &str) -> bool {
    let k = key.to_ascii_lowercase();
    AmazonS3ConfigKey::from_str(&k).is_ok()
        || GoogleConfigKey::from_str(&k).is_ok()
        || AzureConfigKey::from_str(&k).is_ok()
        || ClientConfigKey::from_str(&k).is_ok()
}

/// The options `T` (a builder's key type) knows.
fn keys_of<'a, T: FromStr + 'a>(options: &'a [(String, String)]) -> impl Iterator<Item = (T, &'a str)> + 'a {
    options.iter().filter_map(|(k, v)| T::from_str(&k.to_ascii_lowercase()).ok().map(|key| (key, v.as_str())))
}

/// **Payload signing** (S3): unless the user chose (`unsigned_payload`, or
/// `AWS_UNSIGNED_PAYLOAD`), an upload's parts are sent with `UNSIGNED-PAYLOAD` over HTTPS
/// and signed (their SHA-256 in the signature) over plain HTTP, as the AWS SDKs do: TLS
/// already guards the body's integrity, so hashing every byte again costs CPU for nothing;
/// over plain HTTP the signature is the only check that the body the server got is the one
/// sent. The headers and the request are signed either way.
fn payload_signing(builder: AmazonS3Builder, options: &[(String, String)], plain_url: bool) -> AmazonS3Builder {
    let chosen = std::env::var_os("AWS_UNSIGNED_PAYLOAD").is_some()
        || keys_of::<AmazonS3ConfigKey>(options).any(|(k, _)| k == AmazonS3ConfigKey::UnsignedPayload);
    if chosen {
        return builder;
    }
    // No endpoint: AWS's own, over HTTPS (or the object's `http://` URL's host).
    let endpoint = builder.get_config_value(&AmazonS3ConfigKey::Endpoint);
    let plain_http = plain_url || endpoint.is_some_and(|e| e.to_ascii_lowercase().starts_with("http://"));
    builder.with_unsigned_payload(!plain_http)
}

fn build(url: &ObjectUrl, options: &[(String, String)], settings: &Settings) -> object_store::Result<Arc<dyn ObjectStore>> {
    let retry = settings.retry();
    // A store's own URL, or (https forms) the object's: the builders read bucket, account
    // and container from it.
    let builder_url = match url.scheme {
        ObjectStoreScheme::Http => url.store_url.clone(),
        _ if url.text.starts_with("https://") || url.text.starts_with("http://") => url.text.clone(),
        _ => url.store_url.clone(),
    };
    Ok(match url.scheme {
        ObjectStoreScheme::AmazonS3 => {
            let builder = AmazonS3Builder::from_env().with_url(builder_url).with_retry(retry);
            let builder = keys_of::<AmazonS3ConfigKey>(options).fold(builder, |b, (k, v)| b.with_config(k, v));
            let plain_url = url.text.to_ascii_lowercase().starts_with("http://");
            Arc::new(payload_signing(builder, options, plain_url).build()?)
        }
        ObjectStoreScheme::GoogleCloudStorage => {
            let builder = GoogleCloudStorageBuilder::from_env().with_url(builder_url).with_retry(retry);
            Arc::new(keys_of::<GoogleConfigKey>(options).fold(builder, |b, (k, v)| b.with_config(k, v)).build()?)
        }
        ObjectStoreScheme::MicrosoftAzure => {
            let builder = MicrosoftAzureBuilder::from_env().with_url(builder_url).with_retry(retry);
            Arc::new(keys_of::<AzureConfigKey>(options).fold(builder, |b, (k, v)| b.with_config(k, v)).build()?)
        }
        ObjectStoreScheme::Http => {
            let builder = HttpBuilder::new().with_url(builder_url).with_retry(retry);
            Arc::new(keys_of::<ClientConfigKey>(options).fold(builder, |b, (k, v)| b.with_config(k, v)).build()?)
        }
        _ => return Err(object_store::Error::NotSupported { source: format!("{} is not a store corank reads", url.store_url).into() }),
    })
}

/// `30`, `1.5`, `30s`, `2m`: seconds.
fn parse_seconds(text: &str) -> Option<f64> {
    let t = text.trim();
    let (number, unit) = match t.find(|c: char| c.is_ascii_alphabetic()) {
        Some(i) => t.split_at(i),
        None => (t, "s"),
    };
    let scale = match unit {
        "ms" => 0.001,
        "s" => 1.0,
        "m" | "min" => 60.0,
        _ => return None,
    };
    number.trim().parse::<f64>().ok().filter(|v| v.is_finite() && *v >= 0.0).map(|v| v * scale)
}

/// `16777216`, `16MiB`, `16M`, `512KiB`: bytes (binary units).
fn parse_size(text: &str) -> Option<usize> {
    let t = text.trim();
    let (number, unit) = match t.find(|c: char| c.is_ascii_alphabetic()) {
        Some(i) => t.split_at(i),
        None => (t, ""),
    };
    let shift = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kib" | "kb" => 10,
        "m" | "mib" | "mb" => 20,
        "g" | "gib" | "gb" => 30,
        _ => return None,
    };
    number.trim().parse::<usize>().ok()?.checked_mul(1 << shift)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn option_values_parse() {
        assert_eq!(parse_size("16MiB"), Some(16 << 20));
        assert_eq!(parse_size("512k"), Some(512 << 10));
        assert_eq!(parse_size("100"), Some(100));
        assert_eq!(parse_size("1.5M"), None);
        assert_eq!(parse_seconds("2m"), Some(120.0));
        assert_eq!(parse_seconds("0.5"), Some(0.5));
        assert_eq!(parse_seconds("-1"), None);
        assert!(known_key("endpoint") && known_key("allow_http") && known_key("AWS_REGION") && known_key("google_service_account"));
        assert!(!known_key("no_such_key"));
    }

    #[test]
    fn the_retry_policy_is_the_documented_one() {
        let r = Settings::default().retry();
        assert_eq!((r.max_retries, r.retry_timeout), (10, Duration::from_secs(180)));
        assert_eq!(
            (r.backoff.init_backoff, r.backoff.max_backoff, r.backoff.base),
            (Duration::from_millis(100), Duration::from_secs(15), 2.0)
        );
        // A longest wait below the first is the first.
        let s = Settings { retry_backoff: Duration::from_secs(2), retry_max_backoff: Duration::from_secs(1), ..Settings::default() };
        assert_eq!(s.retry().backoff.max_backoff, Duration::from_secs(2));
    }

    #[test]
    fn payloads_are_signed_over_plain_http_only_unless_chosen() {
        // The environment's choice wins over the default: not testable where it is set.
        if std::env::var_os("AWS_UNSIGNED_PAYLOAD").is_some() {
            return;
        }
        let unsigned = |endpoint: Option<&str>, options: &[(&str, &str)], plain_url: bool| {
            let options: Vec<(String, String)> = options.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
            let builder = AmazonS3Builder::new().with_bucket_name("b");
            let builder = match endpoint {
                Some(e) => builder.with_endpoint(e),
                None => builder,
            };
            let builder = keys_of::<AmazonS3ConfigKey>(&options).fold(builder, |b, (k, v)| b.with_config(k, v));
            payload_signing(builder, &options, plain_url).get_config_value(&AmazonS3ConfigKey::UnsignedPayload)
        };
        let yes = Some("true".to_string());
        let no = Some("false".to_string());
        assert_eq!(unsigned(None, &[], false), yes, "AWS's endpoint: HTTPS");
        assert_eq!(unsigned(Some("https://minio.example:9000"), &[], false), yes);
        assert_eq!(unsigned(Some("http://127.0.0.1:9000"), &[], false), no);
        assert_eq!(unsigned(Some("HTTP://127.0.0.1:9000"), &[], false), no);
        assert_eq!(unsigned(None, &[], true), no, "an http:// object URL");
        assert_eq!(unsigned(Some("http://127.0.0.1:9000"), &[("unsigned_payload", "true")], false), yes, "chosen");
        assert_eq!(unsigned(None, &[("aws_unsigned_payload", "false")], false), no, "chosen");
    }
}
