//! ctxd's tools over MCP at `/mcp` on the gateway (streamable HTTP, `ctxd_mcp`): the caller of
//! each request from its headers, as for the model APIs. The tenant is found as theirs is
//! (`tenancy.rs`), so a client reaches only its own sessions and notes; the session is the one named by `x-ctxd-session` (its key as the gateway stored it),
//! else the session in which the gateway last saw that tenant's model call one of ctxd's tools
//! through an MCP client (`mcp__ctxd__recall`, ...: the call the client is now making); the
//! project by `x-ctxd-project`, the agent by `x-ctxd-agent`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::http::request::Parts;
use ctxd_engine::{Caller, Engine};
use ctxd_store::Backend;

use crate::identity;

/// Per tenant, the session whose response last called one of ctxd's tools under an MCP client's
/// name for it.
#[derive(Clone, Debug, Default)]
pub struct Seen(Arc<Mutex<HashMap<String, ctxd_store::SessionId>>>);

impl Seen {
    /// A response of `session` (tenant `tenant`) called the tools `names`.
    pub fn note<'a>(
        &self,
        tenant: &str,
        session: ctxd_store::SessionId,
        mut names: impl Iterator<Item = &'a str>,
    ) {
        if names.any(is_mcp_ctxd_tool) {
            self.0
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(tenant.to_owned(), session);
        }
    }

    fn get(&self, tenant: &str) -> Option<ctxd_store::SessionId> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(tenant)
            .copied()
    }
}

/// An MCP client's name for one of ctxd's tools: `<prefix>__<tool>` (Claude Code's
/// `mcp__<server>__<tool>`, Codex's `<server>__<tool>`).
fn is_mcp_ctxd_tool(name: &str) -> bool {
    name.rsplit_once("__").is_some_and(|(prefix, tool)| {
        !prefix.is_empty() && ctxd_engine::tools::names().contains(&tool)
    })
}

/// The `/mcp` service for `engine`, with tenants found as the model routes find them.
pub fn service(
    engine: Arc<Engine<dyn Backend>>,
    tenancy: crate::tenancy::Tenancy,
    seen: Seen,
) -> ctxd_mcp::HttpService<dyn Backend> {
    let store_engine = engine.clone();
    let resolve = move |parts: &Parts| caller(&store_engine, &tenancy, &seen, parts);
    ctxd_mcp::http_service(engine, Arc::new(resolve))
}

/// The caller of one MCP request.
fn caller(
    engine: &Engine<dyn Backend>,
    tenancy: &crate::tenancy::Tenancy,
    seen: &Seen,
    parts: &Parts,
) -> Result<Caller, String> {
    let headers = &parts.headers;
    let text = |name: &str| identity::header(headers, name).map(str::to_owned);
    let tenant = tenancy
        .tenant(headers)
        .map_err(|e| e.message().to_owned())?;
    let mut caller = Caller {
        tenant: tenant.clone(),
        agent: text("x-ctxd-agent"),
        project: text("x-ctxd-project"),
        ..Caller::default()
    };
    let record = match text("x-ctxd-session") {
        Some(key) => Some(
            engine
                .store()
                .find_session(&tenant, &key)
                .map_err(|e| format!("ctxd: store: {e}"))?
                .ok_or_else(|| {
                    format!("ctxd: no session {key:?} for this credential (x-ctxd-session)")
                })?,
        ),
        None => match seen.get(&tenant) {
            Some(id) => engine
                .store()
                .session(&tenant, id)
                .map_err(|e| format!("ctxd: store: {e}"))?,
            None => None,
        },
    };
    if let Some(record) = record {
        caller.agent = caller
            .agent
            .or_else(|| record.meta.agent.map(|a| a.as_str().to_owned()));
        caller.model = record.meta.model.clone();
        caller.session = Some(record.id);
        caller.session_key = Some(record.key);
    }
    Ok(caller)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mcp_names_of_ctxds_tools_are_recognised() {
        assert!(is_mcp_ctxd_tool("mcp__ctxd__recall"));
        assert!(is_mcp_ctxd_tool("ctxd__notes_write"));
        assert!(!is_mcp_ctxd_tool("recall"), "ctxd's own offer is not MCP");
        assert!(!is_mcp_ctxd_tool("mcp__fs__read_file"));
        let seen = Seen::default();
        seen.note("t", 7, ["Bash"].into_iter());
        assert_eq!(seen.get("t"), None);
        seen.note("t", 8, ["Bash", "mcp__ctxd__notes_read"].into_iter());
        assert_eq!(seen.get("t"), Some(8));
        assert_eq!(seen.get("other"), None);
    }
}
