//! Reading and writing this crate's rotation files with errors that name the path.

use std::path::Path;

use crate::ZackError;

/// Writes `bytes` to `path`.
pub(crate) fn write_file(path: &Path, bytes: Vec<u8>) -> Result<(), ZackError> {
    std::fs::write(path, bytes).map_err(|source| ZackError::Io { path: path.to_path_buf(), source })
}

/// Reads `path` and parses its bytes with `parse`, whose complaint becomes a
/// [`ZackError::Format`] naming the path.
pub(crate) fn read_file<T>(path: &Path, parse: impl FnOnce(&[u8]) -> Result<T, String>) -> Result<T, ZackError> {
    let bytes = std::fs::read(path).map_err(|source| ZackError::Io { path: path.to_path_buf(), source })?;
    parse(&bytes).map_err(|reason| ZackError::Format { path: path.to_path_buf(), reason })
}
