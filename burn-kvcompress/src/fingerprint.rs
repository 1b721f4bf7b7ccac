//! [`ModelFingerprint`]: the SHA-256 of a model's weights, which tags everything derived from one
//! model (calibrated codebooks and rotations, transferred caches) so it is never used with another.

use std::{fmt, io::Read, path::Path};

use sha2::{Digest, Sha256};

/// A SHA-256 digest identifying the model weights.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct ModelFingerprint(pub [u8; 32]);

impl ModelFingerprint {
    /// SHA-256 of the whole model file (a directory checkpoint hashes its `model.safetensors`
    /// and `config.json`). Streams the file: about 0.3 s for a 100 MB GGUF.
    pub fn of_path(path: &Path) -> std::io::Result<Self> {
        let files = match path.is_dir() {
            true => vec![path.join("config.json"), path.join("model.safetensors")],
            false => vec![path.to_path_buf()],
        };
        let mut hasher = Sha256::new();
        let mut buf = vec![0u8; 1 << 20];
        for file in files {
            let mut f = std::fs::File::open(file)?;
            loop {
                let n = f.read(&mut buf)?;
                if n == 0 {
                    break;
                }
                hasher.update(&buf[..n]);
            }
        }
        Ok(Self(hasher.finalize().into()))
    }

    /// SHA-256 of arbitrary bytes (tests and synthetic engines).
    pub fn of_bytes(bytes: &[u8]) -> Self {
        Self(Sha256::digest(bytes).into())
    }
}

impl fmt::Debug for ModelFingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl fmt::Display for ModelFingerprint {
    /// The first 8 bytes in hex, enough to tell models apart in an error message.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0[..8].iter().try_for_each(|b| write!(f, "{b:02x}"))
    }
}

impl ModelFingerprint {
    /// All 32 bytes as 64 lowercase hex digits (how files that carry the fingerprint store it).
    pub fn to_hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// Parses [`to_hex`](Self::to_hex)'s form; `None` unless it is exactly 64 hex digits.
    pub fn from_hex(hex: &str) -> Option<Self> {
        if hex.len() != 64 || !hex.is_ascii() {
            return None;
        }
        let mut bytes = [0u8; 32];
        for (i, byte) in bytes.iter_mut().enumerate() {
            *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).ok()?;
        }
        Some(Self(bytes))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_round_trips_and_rejects_malformed_text() {
        let fp = ModelFingerprint::of_bytes(b"model");
        assert_eq!(ModelFingerprint::from_hex(&fp.to_hex()), Some(fp));
        assert_eq!(fp.to_hex().len(), 64);
        assert!(ModelFingerprint::from_hex(&fp.to_hex()[1..]).is_none());
        assert!(ModelFingerprint::from_hex(&"zz".repeat(32)).is_none());
        assert!(ModelFingerprint::from_hex(&format!("{}é", &fp.to_hex()[..62])).is_none());
    }
}
