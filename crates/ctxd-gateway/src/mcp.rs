//! ctxd's tools over MCP at `/mcp` on the gateway (streamable HTTP, `ctxd_mcp`): the caller of
//! each request from its headers, as for the model APIs. The tenant is the keyed hash of the
//! credential (`x-api-key` or `Authorization`), so a client reaches only its own sessions and
//! notes; the session is the one named by `x-ctxd-session` (its key as the gateway stored it),
//! the project by `x-ctxd-project`, the agent by `x-ctxd-agent`.

use std::sync::Arc;

use axum::http::request::Parts;
use ctxd_engine::{Caller, Engine};
use ctxd_store::{SqliteStore, Store};

use crate::identity;

/// The `/mcp` service for `engine`, with tenants keyed by `tenant_key`.
pub fn service(
    engine: Arc<Engine<SqliteStore>>,
    tenant_key: [u8; 32],
) -> ctxd_mcp::HttpService<SqliteStore> {
    let store_engine = engine.clone();
    let resolve = move |parts: &Parts| caller(&store_engine, &tenant_key, parts);
    ctxd_mcp::http_service(engine, Arc::new(resolve))
}

/// The caller of one MCP request.
fn caller(
    engine: &Engine<SqliteStore>,
    tenant_key: &[u8; 32],
    parts: &Parts,
) -> Result<Caller, String> {
    let headers = &parts.headers;
    let text = |name: &str| identity::header(headers, name).map(str::to_owned);
    let tenant = identity::tenant(tenant_key, headers);
    let mut caller = Caller {
        tenant: tenant.clone(),
        agent: text("x-ctxd-agent"),
        project: text("x-ctxd-project"),
        ..Caller::default()
    };
    if let Some(key) = text("x-ctxd-session") {
        let record = engine
            .store()
            .find_session(&tenant, &key)
            .map_err(|e| format!("ctxd: store: {e}"))?
            .ok_or_else(|| {
                format!("ctxd: no session {key:?} for this credential (x-ctxd-session)")
            })?;
        caller.agent = caller
            .agent
            .or_else(|| record.meta.agent.map(|a| a.as_str().to_owned()));
        caller.model = record.meta.model.clone();
        caller.session = Some(record.id);
        caller.session_key = Some(record.key);
    }
    Ok(caller)
}
