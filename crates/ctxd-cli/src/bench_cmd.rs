//! `ctxd bench`: placeholder, being written.

use clap::Args;

#[derive(Debug, Args)]
pub struct BenchArgs {}

#[derive(Debug, Args)]
pub struct BenchOneArgs {}

pub fn run(_args: &BenchArgs) -> anyhow::Result<()> {
    anyhow::bail!("not implemented yet")
}

pub fn run_one(_args: &BenchOneArgs) -> anyhow::Result<()> {
    anyhow::bail!("not implemented yet")
}
