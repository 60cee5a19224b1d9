//! `ctxd mcp [--session KEY] [--agent NAME] [--model NAME] [--project DIR]`: ctxd's tools
//! (notes, history, recall, get_context_remaining: [`ctxd_mcp::served_names`]) over MCP on
//! stdin/stdout, for agents that prefer MCP to the gateway. The protocol owns stdout: nothing
//! else is printed there.

use std::sync::Arc;

use anyhow::Context;
use clap::Args;
use ctxd_engine::Caller;

use crate::store::StoreChoice;

#[derive(Debug, Args)]
pub struct McpArgs {
    /// The stored session the tools act on: its key or id, as `ctxd sessions --stored` lists
    /// them. Without one, the tools that need a session (history, recall,
    /// get_context_remaining, session notes) answer that none is named; the other notes homes
    /// work.
    #[arg(long, value_name = "SESSION")]
    pub session: Option<String>,
    /// The agent `@self/` notes belong to [default: the session's agent].
    #[arg(long, value_name = "NAME")]
    pub agent: Option<String>,
    /// The model `@model/` notes belong to.
    #[arg(long, value_name = "NAME")]
    pub model: Option<String>,
    /// The project `@project/` notes belong to (a directory or repository name).
    #[arg(long, value_name = "DIR")]
    pub project: Option<String>,
}

/// The help's list of the tools served, from the list `tools/list` answers with, so that the
/// help cannot name a tool the server does not serve.
pub fn served_tools() -> String {
    format!("Tools served: {}.", ctxd_mcp::served_names().join(", "))
}

pub fn run(args: &McpArgs, store: &StoreChoice) -> anyhow::Result<()> {
    // A named session must be in a store that exists; without one the notes tools may create
    // the store.
    let engine = if args.session.is_some() {
        store.open_existing()?
    } else {
        store.open()?
    };
    let mut caller = match &args.session {
        Some(session) => crate::history_cmd::caller(&engine, session)?,
        None => Caller::default(),
    };
    if args.agent.is_some() {
        caller.agent.clone_from(&args.agent);
    }
    caller.model.clone_from(&args.model);
    caller.project.clone_from(&args.project);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the runtime")?;
    let server = ctxd_mcp::ToolServer::new(Arc::new(engine), caller);
    let served = runtime.block_on(ctxd_mcp::serve_stdio(server));
    // Not waiting for the read of stdin, which cannot be cancelled: when the service ends
    // before the client closes stdin (a failed start), dropping the runtime would wait for it.
    runtime.shutdown_background();
    served.map_err(anyhow::Error::msg)
}
