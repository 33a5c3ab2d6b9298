//! Inputs named by URL expanded: a prefix to its Parquet objects, a glob pattern to the
//! objects it matches, listed from the store.

use super::config::store_for;
use super::location::ObjectUrl;
use super::object::store_error;
use super::runtime::block_on;
use crate::error::{Error, Result};
use futures::TryStreamExt;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt};
use std::path::{Path, PathBuf};

/// Whether the key part of the URL `arg` holds a glob pattern (`*`, `?`, `[`).
pub(crate) fn has_glob(arg: &str) -> bool {
    key_part(arg).contains(['*', '?', '['])
}

/// The text after `scheme://authority/`.
fn key_part(arg: &str) -> &str {
    let rest = arg.split_once("://").map_or(arg, |(_, rest)| rest);
    rest.split_once('/').map_or("", |(_, key)| key)
}

/// An input URL expanded: `…/` to the `.parquet` objects directly under it and under its
/// `key=value` prefixes (Hive partitions), a pattern to
/// the objects it matches (`*` and `?` within one level, `**` across levels), both sorted
/// by key (the merge's tie order); an object as it is (read when it is opened).
pub(crate) fn expand(arg: &str) -> Result<Vec<PathBuf>> {
    let not_found = |what: &str| Error::File { path: PathBuf::from(arg), detail: what.to_string() };
    if has_glob(arg) {
        let key = key_part(arg);
        let literal = &key[..key.find(['*', '?', '[']).unwrap_or(key.len())];
        let dir_len = literal.rfind('/').map_or(0, |i| i + 1);
        let prefix_text = &arg[..arg.len() - key.len() + dir_len];
        let pattern_text = &key[dir_len..];
        let pattern = glob::Pattern::new(pattern_text).map_err(|e| Error::InvalidArgument(format!("bad glob pattern '{arg}': {e}")))?;
        let options = glob::MatchOptions { case_sensitive: true, require_literal_separator: true, require_literal_leading_dot: false };
        let prefix = ObjectUrl::parse_prefix(prefix_text)?;
        let keys = list_keys(&prefix, true)?;
        let base = prefix.location.as_ref();
        let mut found: Vec<String> = keys
            .into_iter()
            .filter(|k| {
                let rel = k.as_ref().strip_prefix(base).map(|r| r.trim_start_matches('/')).unwrap_or(k.as_ref());
                pattern.matches_with(rel, options)
            })
            .map(|k| prefix.sibling(&k))
            .collect();
        found.sort();
        if found.is_empty() {
            return Err(not_found("no object matches this pattern"));
        }
        return Ok(found.into_iter().map(PathBuf::from).collect());
    }
    if arg.ends_with('/') {
        let prefix = ObjectUrl::parse_prefix(arg)?;
        let mut found: Vec<String> = list_keys(&prefix, false)?
            .into_iter()
            .filter(|k| k.extension().is_some_and(|x| x.eq_ignore_ascii_case("parquet")))
            .map(|k| prefix.sibling(&k))
            .collect();
        found.sort();
        if found.is_empty() {
            return Err(not_found("no .parquet objects under this prefix"));
        }
        return Ok(found.into_iter().map(PathBuf::from).collect());
    }
    ObjectUrl::parse(Path::new(arg))?;
    Ok(vec![PathBuf::from(arg)])
}

/// The names of the objects directly under the prefix `dir` (a URL, `/` at its end or
/// not): their last path segment, in no order.
pub(crate) fn names_under(dir: &str) -> Result<Vec<String>> {
    let text = format!("{}/", dir.trim_end_matches('/'));
    let prefix = ObjectUrl::parse_prefix(&text)?;
    // Not those in its Hive partitions, which the listing includes.
    let depth = prefix.location.parts().count() + 1;
    let keys = list_keys(&prefix, false)?.into_iter().filter(|k| k.parts().count() == depth);
    Ok(keys.filter_map(|k| k.filename().map(str::to_string)).collect())
}

/// Deletes the object `url` (one that is not there is no error).
pub(crate) fn delete(url: &Path) -> Result<()> {
    let url = ObjectUrl::parse(url)?;
    let store = store_for(&url)?;
    let location = url.location.clone();
    match block_on(async move { store.delete(&location).await }) {
        Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
        Err(e) => Err(store_error(&url.text, "deleting", e)),
    }
}

/// The keys under `prefix`: all of them where `deep`, else those directly under it and
/// under its `key=value` "subdirectories" at any depth (Hive partitions).
fn list_keys(prefix: &ObjectUrl, deep: bool) -> Result<Vec<ObjectPath>> {
    let store = store_for(prefix)?;
    let location = prefix.location.clone();
    let listed = block_on(async move {
        if deep {
            let at = (!location.as_ref().is_empty()).then_some(&location);
            return store.list(at).map_ok(|m| m.location).try_collect::<Vec<_>>().await;
        }
        let (mut keys, mut pending) = (Vec::new(), vec![location]);
        while let Some(location) = pending.pop() {
            let at = (!location.as_ref().is_empty()).then_some(&location);
            let listed = store.list_with_delimiter(at).await?;
            keys.extend(listed.objects.into_iter().map(|m| m.location));
            let partitions = listed.common_prefixes.into_iter();
            pending.extend(partitions.filter(|p| p.filename().is_some_and(crate::parquet::inputs::paths::is_partition_name)));
        }
        Ok(keys)
    });
    listed.map_err(|e| store_error(&prefix.text, "listing", e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_are_found_in_the_key() {
        assert!(has_glob("s3://b/x/*.parquet") && has_glob("s3://b/p?.parquet") && has_glob("s3://b/[ab].parquet"));
        assert!(!has_glob("s3://b/x/y.parquet") && !has_glob("s3://b/"));
        assert_eq!(key_part("s3://bucket/a/b"), "a/b");
        assert_eq!(key_part("s3://bucket"), "");
    }
}
