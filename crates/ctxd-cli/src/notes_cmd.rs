//! `ctxd notes ...`. Placeholder: being written.

use clap::Subcommand;

use crate::store::StoreChoice;

#[derive(Debug, Subcommand)]
pub enum NotesCommand {
    /// Not implemented yet.
    Todo,
}

pub fn run(_cmd: &NotesCommand, _store: &StoreChoice) -> anyhow::Result<()> {
    anyhow::bail!("not implemented yet")
}
