//! A file as it was planned ([`FileIdentity`]), checked again at every open, so that a
//! file replaced or rewritten between two reads is an error.

use super::InputFile;
use crate::error::{Error, Result};
use crate::parquet::store::{ObjectVersion, Source};

/// Bytes at a file's end whose hash is its footer's fingerprint ([`FileIdentity`]): all
/// of a small footer, the end of a large one (its last row groups and key-value metadata).
const FINGERPRINT_BYTES: u64 = 64 << 10;

/// A file as it was when its footer was read: device and inode (Unix), size, modification
/// time, and a fingerprint of its footer. A reader that opens the file again (the sort by
/// columns reads its inputs once per column) compares them, so that a file replaced or
/// rewritten in between is an error rather than rows of two versions read through the
/// first version's footer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileIdentity {
    /// Device and inode: a file renamed over the input is another file.
    #[cfg(unix)]
    inode: (u64, u64),
    size: u64,
    modified: Option<std::time::SystemTime>,
    /// Hash of the file's last [`FINGERPRINT_BYTES`] (`None`: not read, see
    /// [`InputFile::reopen`]).
    footer: Option<u64>,
    /// An object's ETag (`crate::parquet::store`; its inode is 0, 0).
    e_tag: Option<String>,
}

fn fingerprint(tail: &[u8]) -> u64 {
    use std::hash::Hasher;
    let mut h = std::hash::DefaultHasher::new();
    h.write(tail);
    h.finish()
}

impl FileIdentity {
    /// The identity of the open `file`, its footer's fingerprint where `footer`.
    pub(super) fn of(file: &std::fs::File, footer: bool) -> std::io::Result<FileIdentity> {
        use std::io::{Read, Seek, SeekFrom};
        let meta = file.metadata()?;
        let fingerprint = match footer {
            false => None,
            true => {
                let n = meta.len().min(FINGERPRINT_BYTES);
                let mut tail = vec![0u8; n as usize];
                let mut reader = file;
                reader.seek(SeekFrom::End(-(n as i64)))?;
                reader.read_exact(&mut tail)?;
                Some(fingerprint(&tail))
            }
        };
        Ok(FileIdentity {
            #[cfg(unix)]
            inode: {
                use std::os::unix::fs::MetadataExt;
                (meta.dev(), meta.ino())
            },
            size: meta.len(),
            modified: meta.modified().ok(),
            footer: fingerprint,
            e_tag: None,
        })
    }

    /// The identity of an object, as its store described it: its size, ETag, modification
    /// time, and its last bytes, whose hash is its fingerprint.
    pub(super) fn of_object(version: &ObjectVersion) -> FileIdentity {
        let tail = &version.tail[version.tail.len().saturating_sub(FINGERPRINT_BYTES as usize)..];
        FileIdentity {
            #[cfg(unix)]
            inode: (0, 0),
            size: version.size,
            modified: version.modified,
            footer: Some(fingerprint(tail)),
            e_tag: version.e_tag.clone(),
        }
    }

    /// How `now` differs from `self` (the identity planned), in words; `None`: the same.
    fn changed(&self, now: &FileIdentity) -> Option<String> {
        #[cfg(unix)]
        if now.inode != self.inode {
            return Some("replaced by another file".into());
        }
        if now.size != self.size {
            return Some(format!("its size changed from {} to {} bytes", self.size, now.size));
        }
        if now.modified != self.modified {
            return Some("modified".into());
        }
        if now.e_tag != self.e_tag {
            return Some("its ETag changed".into());
        }
        match (self.footer, now.footer) {
            (Some(a), Some(b)) if a != b => Some("its footer changed".into()),
            _ => None,
        }
    }
}

impl InputFile {
    /// Opens the file again to read its rows, checking that it is still the file whose
    /// footer was read (`FileIdentity`; the footer's fingerprint where `footer`, the rest
    /// every time): a changed file is an error naming it.
    pub fn reopen(&self, footer: bool) -> Result<Source> {
        self.reopen_with(footer, None)
    }

    /// [`InputFile::reopen`], reading only the column chunks of `leaves` (all where `None`;
    /// an object in a store fetches those of a row group together).
    pub(crate) fn reopen_with(&self, footer: bool, leaves: Option<&parquet::arrow::ProjectionMask>) -> Result<Source> {
        let file = crate::parquet::store::open(&self.path, self.metadata.metadata(), leaves).map_err(|e| Error::io(&self.path, "", e))?;
        self.check_unchanged(&file, footer)?;
        Ok(file)
    }

    /// Checks that the open `file` (this input, opened again) is still the file whose footer
    /// was read, as [`InputFile::reopen`] does. An object is asked for its last bytes again
    /// where `footer`; otherwise every request it answers carries the ETag its footer was
    /// read with (`If-Match`), which checks it.
    pub fn check_unchanged(&self, file: &Source, footer: bool) -> Result<()> {
        // Without the `object-store` feature a Source is a local file.
        #[cfg_attr(not(feature = "object-store"), allow(unreachable_patterns))]
        let now = match file {
            Source::Local(file) => FileIdentity::of(file, footer).map_err(|e| Error::io(&self.path, "", e))?,
            _ if !footer => return Ok(()),
            _ => FileIdentity::of_object(&crate::parquet::store::object_version(&self.path)?),
        };
        match self.identity.changed(&now) {
            None => Ok(()),
            Some(how) => {
                Err(Error::File { path: self.path.clone(), detail: format!("changed since its footer was read ({how}); nothing written") })
            }
        }
    }
}
