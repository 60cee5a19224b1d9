//! ctxd-mcp: ctxd's model-facing tools over the Model Context Protocol (`ctxd mcp`).
//!
//! The same registry and dispatcher the gateway uses ([`ctxd_engine::tools`]): `list_tools` is
//! the registry, `tools/call` is [`Engine::call_tool`] for one [`Caller`] (the session the
//! server was bound to). A thin adapter: no tool logic lives here. Calls run on a blocking
//! thread (the store is SQLite); a tool's own failure (bad arguments, an unknown note, no
//! session named) is a result with `isError`, for the model to read; an unknown tool or a store
//! failure is a protocol error.

mod stdio;

use std::sync::Arc;

use ctxd_engine::tools::{specs, ToolSpec};
use ctxd_engine::{Caller, Engine, EngineError};
use ctxd_store::Store;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};

/// Who the tools act for.
pub enum Binding {
    /// One caller for the whole connection (stdio: the session named on the command line).
    Fixed(Caller),
    /// Per HTTP request, from its headers (the gateway: tenant from the credential, session
    /// from `x-ctxd-session`); an `Err` is the reason the call is refused.
    PerRequest(Resolve),
}

/// The MCP server: ctxd's tools, for the bound caller.
pub struct ToolServer<S: ?Sized> {
    engine: Arc<Engine<S>>,
    binding: Arc<Binding>,
}

impl<S: ?Sized> ToolServer<S> {
    pub fn new(engine: Arc<Engine<S>>, caller: Caller) -> Self {
        Self {
            engine,
            binding: Arc::new(Binding::Fixed(caller)),
        }
    }

    /// The caller of one request.
    fn caller(&self, context: &RequestContext<RoleServer>) -> Result<Caller, ErrorData> {
        match &*self.binding {
            Binding::Fixed(caller) => Ok(caller.clone()),
            Binding::PerRequest(resolve) => {
                let parts = context
                    .extensions
                    .get::<http::request::Parts>()
                    .ok_or_else(|| ErrorData::internal_error("ctxd: no HTTP request", None))?;
                resolve(parts).map_err(|e| ErrorData::invalid_request(e, None))
            }
        }
    }

    /// The answer to a call of a tool that needs a session when none is named: how to name
    /// one, which depends on how the server is reached.
    fn no_session(&self, what: &str) -> String {
        match &*self.binding {
            Binding::Fixed(_) => format!(
                "ctxd: {what} needs a session, and this server was started without one: start \
                 it as `ctxd mcp --session KEY` (`ctxd sessions --stored` lists the keys)"
            ),
            Binding::PerRequest(_) => format!(
                "ctxd: {what} needs a session: name it with the x-ctxd-session header (its key \
                 as the gateway stored it)"
            ),
        }
    }
}

/// The streamable HTTP service of [`http_service`], a tower service.
pub type HttpService<S> = rmcp::transport::StreamableHttpService<
    ToolServer<S>,
    rmcp::transport::streamable_http_server::session::local::LocalSessionManager,
>;

/// Resolves the caller of an HTTP request from its parts.
pub type Resolve = Arc<dyn Fn(&http::request::Parts) -> Result<Caller, String> + Send + Sync>;

/// The streamable HTTP service (mount it at `/mcp`): every request's caller from `resolve`.
pub fn http_service<S>(engine: Arc<Engine<S>>, resolve: Resolve) -> HttpService<S>
where
    S: Store + Send + Sync + ?Sized + 'static,
{
    let binding = Arc::new(Binding::PerRequest(resolve));
    rmcp::transport::StreamableHttpService::new(
        move || {
            Ok(ToolServer {
                engine: engine.clone(),
                binding: binding.clone(),
            })
        },
        Default::default(),
        rmcp::transport::StreamableHttpServerConfig::default(),
    )
}

/// The names of the tools served, in the registry's order (what `tools/list` lists; the help of
/// `ctxd mcp` names them from here).
pub fn served_names() -> Vec<&'static str> {
    served().iter().map(|s| s.name).collect()
}

/// The tools served: the registry without `new_context` / `wipe_memory`. A reset happens at a
/// turn end the gateway sees, and the gateway sees an MCP call only under the client's name for
/// it (`mcp__ctxd__new_context`, ...), not as its own tool: served here, it would answer
/// "requested" and never take effect. Nor `find_capability`: only the gateway, which rebuilds a
/// request's tools, can make what it finds available.
fn served() -> Vec<ToolSpec> {
    specs()
        .into_iter()
        .filter(|s| {
            !ctxd_core::windows::RESET_TOOLS.contains(&s.name)
                && s.name != ctxd_core::mechanisms::lazy::FIND_CAPABILITY
        })
        .collect()
}

/// A registry entry as an MCP tool.
fn tool_of(spec: &ToolSpec) -> Tool {
    let schema = match &spec.parameters {
        serde_json::Value::Object(map) => map.clone(),
        _ => serde_json::Map::new(),
    };
    Tool::new(spec.name, spec.description, Arc::new(schema))
}

impl<S> ServerHandler for ToolServer<S>
where
    S: Store + Send + Sync + ?Sized + 'static,
{
    fn get_info(&self) -> ServerConfig {
        let mut info = ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_instructions(
                "ctxd keeps this session's notes and its whole history across context \
                 windows: write a checkpoint note as you work, search the history, recall \
                 what was shortened.",
            );
        info.server_info = Implementation::new("ctxd", env!("CARGO_PKG_VERSION"));
        info
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(
            served().iter().map(tool_of).collect(),
        ))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let name = request.name.to_string();
        let caller = self.caller(&context)?;
        if !served().iter().any(|s| s.name == name) {
            return Err(ErrorData::invalid_params(
                format!("ctxd serves no tool {name:?} over MCP (tools/list names them)"),
                None,
            ));
        }
        let args = request
            .arguments
            .map_or(serde_json::Value::Object(Default::default()), |a| {
                serde_json::Value::Object(a)
            });
        let engine = self.engine.clone();
        let tool = name.clone();
        let outcome = tokio::task::spawn_blocking(move || engine.call_tool(&caller, &tool, &args))
            .await
            .map_err(|e| ErrorData::internal_error(format!("ctxd: tool task: {e}"), None))?;
        match outcome {
            Ok(out) => {
                let content = vec![ContentBlock::text(out.text)];
                Ok(if out.is_error {
                    CallToolResult::error(content)
                } else {
                    CallToolResult::success(content)
                }
                .into())
            }
            // The model (or its user) can fix this one: a result it reads, not a failure.
            Err(EngineError::NoSession(what)) => {
                Ok(CallToolResult::error(vec![ContentBlock::text(self.no_session(what))]).into())
            }
            Err(e) => {
                tracing::error!(tool = %name, error = %e, "tool call failed");
                Err(ErrorData::internal_error(format!("ctxd: {e}"), None))
            }
        }
    }
}

/// Serve `server` on this process's stdin and stdout until the client closes them; a line
/// that is not JSON is answered with a parse error (see the `stdio` module).
pub async fn serve_stdio<S>(server: ToolServer<S>) -> Result<(), String>
where
    S: Store + Send + Sync + ?Sized + 'static,
{
    stdio::serve(server, tokio::io::stdin(), tokio::io::stdout()).await
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn registry_tools_are_listed_with_their_schema_but_resets() {
        let tools: Vec<Tool> = served().iter().map(tool_of).collect();
        assert_eq!(tools.len(), specs().len() - 3);
        assert!(!tools
            .iter()
            .any(|t| t.name == "new_context" || t.name == "wipe_memory"));
        for (tool, spec) in tools.iter().zip(served()) {
            assert_eq!(tool.name, spec.name);
            assert_eq!(
                serde_json::Value::Object((*tool.input_schema).clone()),
                spec.parameters
            );
        }
    }
}
