//! `ctxd history ...`. Placeholder: being written.

use clap::Subcommand;

use crate::store::StoreChoice;

#[derive(Debug, Subcommand)]
pub enum HistoryCommand {
    /// Not implemented yet.
    Todo,
}

pub fn run(_cmd: &HistoryCommand, _store: &StoreChoice) -> anyhow::Result<()> {
    anyhow::bail!("not implemented yet")
}
