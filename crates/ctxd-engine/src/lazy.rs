//! `find_capability`, the tool of lazy tools ([`ctxd_core::mechanisms::lazy`]): the model asks for a
//! capability, the tool searches the client's whole tool list as the log holds it (the
//! `ToolDefs` in force on the branch) and answers with the matches; their activation is a
//! record the gateway appends after the result ([`ToolOutput::record`]), read back by every
//! later request of the task.
//!
//! Served only through the gateway (it rebuilds the request's `tools` from the records): the
//! MCP server leaves it out, as it leaves out the reset tools.

use ctxd_core::mechanisms::lazy::{self, FIND_CAPABILITY};
use ctxd_core::tree::active_branch;
use ctxd_store::Store;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

use crate::tools::{parameters, parse, ToolOutput, ToolSpec};
use crate::{Caller, Engine, EngineError};

/// `find_capability`'s arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct FindCapabilityArgs {
    /// What you need to do, in a few words, or a tool's name (e.g. "fetch a web page").
    pub query: String,
}

/// The tools of this module.
pub fn specs() -> Vec<ToolSpec> {
    vec![ToolSpec {
        name: FIND_CAPABILITY,
        description: "Find and enable a tool you do not have yet. The session has more tools \
                      than the ones you were given; describe what you need (or name the tool) \
                      and the best matches become available until the user's next message.",
        parameters: parameters::<FindCapabilityArgs>(),
    }]
}

/// Run `name` if it is this module's tool.
pub(crate) fn call<S: Store + ?Sized>(
    engine: &Engine<S>,
    caller: &Caller,
    name: &str,
    args: &Value,
) -> Option<Result<ToolOutput, EngineError>> {
    if name != FIND_CAPABILITY {
        return None;
    }
    Some(
        parse::<FindCapabilityArgs>(FIND_CAPABILITY, args)
            .and_then(|a| engine.find_capability(caller, &a.query)),
    )
}

impl<S: Store + ?Sized> Engine<S> {
    /// Search the caller's session's tool list for `query`; the activation, if any, as the
    /// output's record.
    pub fn find_capability(&self, caller: &Caller, query: &str) -> Result<ToolOutput, EngineError> {
        if query.trim().is_empty() {
            return Err(EngineError::invalid(format!(
                "{FIND_CAPABILITY}: query is empty"
            )));
        }
        let (_, session) = self.caller_session(caller, FIND_CAPABILITY)?;
        let branch = active_branch(&session);
        let tools = lazy::tools_in_force(&session, &branch);
        let active = lazy::activated(&session, &branch);
        let found = lazy::find(tools, query, |n| active.contains(n));
        Ok(ToolOutput {
            record: found.record.map(|r| r.to_entry()),
            ..ToolOutput::ok(found.text)
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use ctxd_core::model::{Entry, EntryId, EntryKind, Message, Role, SessionMeta, ToolDef};
    use ctxd_store::{NewEntry, SqliteStore};
    use serde_json::json;

    use super::*;

    #[test]
    fn find_capability_searches_the_logged_tools_and_returns_the_activation() {
        let engine = Engine::new(SqliteStore::open_in_memory().unwrap());
        let s = engine
            .store()
            .open_session("t", "s1", &SessionMeta::default())
            .unwrap();
        let tools = ["Bash", "WebFetch", "CronCreate"]
            .map(|n| ToolDef {
                name: n.into(),
                description: format!("{n} does things"),
                schema: json!({"type": "object"}),
            })
            .to_vec();
        let entry = |id: &str, parent: Option<&str>, kind| {
            NewEntry::new(Entry {
                id: EntryId::new(id),
                parent: parent.map(EntryId::new),
                timestamp: None,
                sidechain: false,
                kind,
            })
        };
        let batch = vec![
            entry("d", None, EntryKind::ToolDefs { tools }),
            entry(
                "u",
                Some("d"),
                EntryKind::Message(Message::text(Role::User, "read the docs online")),
            ),
        ];
        engine
            .store()
            .append(s.id, &batch, Some(&EntryId::new("u")))
            .unwrap();
        let caller = Caller {
            tenant: "t".into(),
            session: Some(s.id),
            ..Default::default()
        };
        let out = engine
            .call_tool(&caller, FIND_CAPABILITY, &json!({"query": "web fetch"}))
            .unwrap();
        assert!(
            !out.is_error && out.text.contains("WebFetch"),
            "{}",
            out.text
        );
        let record = lazy::Record::from_entry(&out.record.unwrap()).unwrap();
        assert_eq!(record.activated, ["WebFetch"]);
        let bad = engine
            .call_tool(&caller, FIND_CAPABILITY, &json!({"q": "web"}))
            .unwrap();
        assert!(bad.is_error && bad.record.is_none());
        let schema = &specs()[0].parameters;
        assert_eq!(schema["required"], json!(["query"]));
        assert!(schema.get("$schema").is_none());
    }
}
