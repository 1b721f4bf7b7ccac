//! The scheme descriptor both sides compare at connect time: the KV scheme's full configuration
//! string (`KvScheme::name()`, e.g. `dense` or `hack:bits=2,pi=64,round=nearest`) and a
//! fingerprint of the model file. Caches move only between processes whose descriptors are equal.

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

/// What a cache is: the scheme configuration that produced it and the model it belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchemeDescriptor {
    /// The scheme's `KvScheme::name()`, which spells out its whole configuration.
    pub scheme: String,
    /// The model's fingerprint.
    pub model: ModelFingerprint,
}

impl fmt::Display for SchemeDescriptor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "scheme `{}` on model {}", self.scheme, self.model)
    }
}
