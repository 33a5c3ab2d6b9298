//! A URL taken apart: which store (scheme and bucket, or host) and which key in it.

use crate::error::{Error, Result};
use object_store::path::Path as ObjectPath;
use object_store::ObjectStoreScheme;
use std::path::Path;
use url::Url;

/// An object's URL, parsed.
#[derive(Debug, Clone)]
pub(crate) struct ObjectUrl {
    /// The URL as the user wrote it (what errors and summaries show).
    pub text: String,
    /// The kind of store.
    pub scheme: ObjectStoreScheme,
    /// The store's own URL: `s3://bucket`, `http://host:port`; the store is built once per
    /// store URL (`super::config`).
    pub store_url: String,
    /// The object's key in the store.
    pub location: ObjectPath,
}

impl ObjectUrl {
    pub fn parse(path: &Path) -> Result<ObjectUrl> {
        let text = path.to_str().ok_or_else(|| bad(path, "not UTF-8".into()))?;
        Self::parse_text(text, false).map_err(|detail| bad(path, detail))
    }

    /// A URL of a prefix (`s3://bucket/dir/`, `s3://bucket/`): the key may be empty.
    pub fn parse_prefix(text: &str) -> Result<ObjectUrl> {
        Self::parse_text(text, true).map_err(|detail| bad(Path::new(text), detail))
    }

    fn parse_text(text: &str, prefix: bool) -> std::result::Result<ObjectUrl, String> {
        let url = Url::parse(text).map_err(|e| format!("not a valid URL: {e}"))?;
        if url.query().is_some() || url.fragment().is_some() {
            return Err("a URL of an object has no query (?) or fragment (#); for a pattern use * or [..]".into());
        }
        let (scheme, location) = ObjectStoreScheme::parse(&url).map_err(|e| e.to_string())?;
        let base = &url[..url::Position::BeforePath];
        let store_url = match (&scheme, url.scheme()) {
            (ObjectStoreScheme::Local | ObjectStoreScheme::Memory, _) => {
                return Err("file:// URLs are local paths, and memory:// is not a store corank reads".into())
            }
            // The bucket (container) is the host: one store per bucket.
            (_, "s3" | "s3a") => format!("s3://{}", url.host_str().unwrap_or_default()),
            (_, "gs") => format!("gs://{}", url.host_str().unwrap_or_default()),
            (ObjectStoreScheme::Http, _) => base.to_string(),
            // Azure's URLs (`az://container`, `abfss://container@account.dfs...`) and S3's or
            // Azure's https forms: the store is the URL less the key's segments.
            _ => {
                let segments: Vec<&str> = url.path().trim_start_matches('/').split('/').collect();
                let keep = segments.len().saturating_sub(location.parts().count());
                let prefix = segments[..keep].join("/");
                if prefix.is_empty() {
                    base.to_string()
                } else {
                    format!("{base}/{prefix}")
                }
            }
        };
        if location.as_ref().is_empty() && !prefix {
            return Err("names no object (a bucket or host alone); to read the objects under a prefix, end it with /".into());
        }
        Ok(ObjectUrl { text: text.to_string(), scheme, store_url, location })
    }

    /// What makes two URLs name the same object: the store URL and the key.
    pub fn identity(&self) -> String {
        format!("{}/{}", self.store_url, self.location)
    }

    /// The URL of `key` (another object of the same store): the store URL and the key.
    pub fn sibling(&self, key: &ObjectPath) -> String {
        format!("{}/{}", self.store_url, key)
    }
}

fn bad(path: &Path, detail: String) -> Error {
    Error::File { path: path.to_path_buf(), detail }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(text: &str) -> (String, String) {
        let u = ObjectUrl::parse(Path::new(text)).unwrap();
        (u.store_url, u.location.to_string())
    }

    #[test]
    fn urls_name_a_store_and_a_key() {
        assert_eq!(parsed("s3://bucket/a/b.parquet"), ("s3://bucket".into(), "a/b.parquet".into()));
        assert_eq!(parsed("s3a://bucket/b.parquet"), ("s3://bucket".into(), "b.parquet".into()));
        assert_eq!(parsed("gs://bucket/day=1/x.parquet"), ("gs://bucket".into(), "day=1/x.parquet".into()));
        assert_eq!(parsed("az://container/x.parquet"), ("az://container".into(), "x.parquet".into()));
        assert_eq!(
            parsed("abfss://c@acct.dfs.core.windows.net/dir/x.parquet"),
            ("abfss://c@acct.dfs.core.windows.net".into(), "dir/x.parquet".into())
        );
        assert_eq!(parsed("http://127.0.0.1:8080/data/x.parquet"), ("http://127.0.0.1:8080".into(), "data/x.parquet".into()));
        assert_eq!(
            parsed("https://acct.blob.core.windows.net/container/x.parquet"),
            ("https://acct.blob.core.windows.net/container".into(), "x.parquet".into())
        );
        assert_eq!(parsed("s3://bucket/a%20b.parquet").1, "a b.parquet");
        // The same object by two spellings of the scheme is one identity.
        let a = ObjectUrl::parse(Path::new("s3a://b/k.parquet")).unwrap().identity();
        assert_eq!(a, ObjectUrl::parse(Path::new("s3://b/k.parquet")).unwrap().identity());
        for bad in ["s3://bucket", "s3://bucket/", "s3://b/k?x=1", "memory:///k", "nope://b/k"] {
            assert!(ObjectUrl::parse(Path::new(bad)).is_err(), "{bad}");
        }
    }
}
