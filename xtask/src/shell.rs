//! Running child commands, failing loudly.

use anyhow::{bail, Context};
use std::process::Command;

/// Runs `program args...` with inherited stdio; an error if it cannot start or exits non-zero.
pub fn run(program: &str, args: &[&str]) -> anyhow::Result<()> {
    eprintln!("+ {program} {}", args.join(" "));
    let status = Command::new(program).args(args).status().with_context(|| format!("cannot start {program}"))?;
    if !status.success() {
        bail!("{program} {} failed with {status}", args.join(" "));
    }
    Ok(())
}
