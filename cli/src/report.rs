//! Files written beside a program's main output: `<out>.json` reports, `<out>.loss.png` plots.

use std::path::{Path, PathBuf};

use anyhow::Context;
use serde::Serialize;

/// `out` with `suffix` appended to its file name (`books.safetensors` + `.json`).
pub fn beside(out: &Path, suffix: &str) -> PathBuf {
    let mut path = out.to_path_buf().into_os_string();
    path.push(suffix);
    path.into()
}

/// Creates the directory `path` will be written into, if it names one.
pub fn create_parent(path: &Path) -> anyhow::Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    Ok(())
}

/// Writes `report` as pretty JSON to `<out>.json` and returns that path.
pub fn write_json_beside(out: &Path, report: &impl Serialize) -> anyhow::Result<PathBuf> {
    let path = beside(out, ".json");
    std::fs::write(&path, serde_json::to_string_pretty(report)?)
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(path)
}
