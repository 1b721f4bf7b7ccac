//! Running child commands, failing loudly.

use anyhow::{bail, Context};
use std::process::Command;

/// Runs `program args...` with inherited stdio; an error if it cannot start or exits non-zero.
pub fn run(program: &str, args: &[&str]) -> anyhow::Result<()> {
    run_with_env(program, args, &[])
}

/// Runs `program args...` as [`run`] does, with the variables `env` (name, value) added to its
/// environment.
pub fn run_with_env(program: &str, args: &[&str], env: &[(&str, &str)]) -> anyhow::Result<()> {
    let shown: String = env.iter().map(|(name, value)| format!("{name}={value} ")).collect();
    eprintln!("+ {shown}{program} {}", args.join(" "));
    let status = Command::new(program)
        .args(args)
        .envs(env.iter().copied())
        .status()
        .with_context(|| format!("cannot start {program}"))?;
    if !status.success() {
        bail!("{program} {} failed with {status}", args.join(" "));
    }
    Ok(())
}
