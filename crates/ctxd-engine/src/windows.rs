//! Context windows and the budget, over the store: the `new_context` (alias `wipe_memory`) and
//! `get_context_remaining` tools, the decision of a turn boundary ([`decide_turn_end`], which
//! [`crate::turn::end_turn`] lays on the session view) and the narrow repair of a window
//! without its boot ([`Engine::repair_window`]).
//!
//! Every decision is a pure read of the log in `ctxd_core::{windows, budget}`; this module
//! gathers the notes snapshot for a boot and lays the drafts.

use ctxd_core::budget::{self, Thresholds};
use ctxd_core::model::{ContentBlock, Entry, EntryId, EntryKind, Session};
use ctxd_core::notes::NotesSnapshot;
use ctxd_core::offered::ModelTools;
use ctxd_core::tokens::{CharEstimate, TokenCounter};
use ctxd_core::tree::active_branch;
use ctxd_core::windows::{self, BootData, Repair, ResetCause};
use ctxd_store::{NewEntry, SessionRecord, Store};
use schemars::JsonSchema;
use serde::Serialize;
use serde_json::{json, Value};

use crate::tools::{parameters, ToolOutput, ToolSpec};
use crate::{Caller, Engine, EngineError};

/// The arguments of the reset tools and `get_context_remaining`: none. The model is offered an
/// empty object (with the empty `properties` these definitions have always had), but what it
/// sends anyway is not refused (see [`call`]).
#[derive(JsonSchema)]
#[schemars(deny_unknown_fields, extend("properties" = {}))]
pub(crate) struct NoArguments {}

/// The tools of this module.
pub fn specs() -> Vec<ToolSpec> {
    let empty = parameters::<NoArguments>();
    let reset = "Start a new context window once your checkpoint note is written. The reset \
                 takes effect after every tool call of the current batch has finished; the new \
                 window starts with your notes index, a checkpoint of recent requests and the \
                 recovery protocol. Takes no arguments.";
    vec![
        ToolSpec {
            name: "new_context",
            description: reset,
            parameters: empty.clone(),
        },
        ToolSpec {
            name: "wipe_memory",
            description: reset,
            parameters: empty.clone(),
        },
        ToolSpec {
            name: "get_context_remaining",
            description: "Tokens left in this context window before the final warning; null \
                          when it cannot be estimated.",
            parameters: empty,
        },
    ]
}

/// Run `name` if it is one of this module's tools. These tools take no arguments, and whatever a
/// model sends anyway (`{}`, a stray `reason`, the empty string OpenAI models write for a call
/// without arguments) is ignored, never refused: the core counts a reset request by the call's
/// name alone ([`windows::reset_requests`]), so a refusal would answer an error while the reset
/// still happened.
pub(crate) fn call<S: Store + ?Sized>(
    engine: &Engine<S>,
    caller: &Caller,
    name: &str,
    _args: &Value,
) -> Option<Result<ToolOutput, EngineError>> {
    match name {
        "new_context" | "wipe_memory" => Some(request_reset(engine, caller)),
        "get_context_remaining" => Some(context_remaining_tool(engine, caller)),
        _ => None,
    }
}

fn request_reset<S: Store + ?Sized>(
    engine: &Engine<S>,
    caller: &Caller,
) -> Result<ToolOutput, EngineError> {
    let (_, session) = engine.caller_session(caller, "new_context")?;
    let branch = active_branch(&session);
    // The gateway appends the assistant message before running its calls: this call is
    // counted, so a second one in the same window is the duplicate.
    let status = if windows::reset_requests(&session, &branch) >= 2 {
        "already_pending"
    } else {
        "requested"
    };
    Ok(ToolOutput::ok(
        json!({
            "accepted": true,
            "status": status,
            "takes_effect": "after the current tool batch",
        })
        .to_string(),
    ))
}

fn context_remaining_tool<S: Store + ?Sized>(
    engine: &Engine<S>,
    caller: &Caller,
) -> Result<ToolOutput, EngineError> {
    let remaining = engine.context_remaining(caller, caller.policy, &CharEstimate)?;
    Ok(ToolOutput::ok(
        json!({ "remaining_tokens": remaining }).to_string(),
    ))
}

/// The budget policy of a session: its window, the lines in it, and which mechanisms act.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WindowPolicy {
    /// Already fitted to the window ([`Thresholds::fitted`]).
    pub thresholds: Thresholds,
    /// The model's context window; `None`: unknown (no threshold reset, no reminders).
    pub context_window: Option<u64>,
    /// Budget reminders (the early reminder and the final warning).
    pub reminders: bool,
    /// Threshold and overflow resets.
    pub automatic: bool,
    /// Resets the model asks for with `new_context` / `wipe_memory`: only where ctxd offers
    /// those tools (a client's own tool of that name is not a request to ctxd).
    pub requested: bool,
    /// The ctxd tools the model has: reminders and boots name no other.
    pub tools: ModelTools,
}

impl WindowPolicy {
    /// Default thresholds, the context window of `model` when ctxd knows it.
    pub fn for_model(model: Option<&str>) -> Self {
        Self::new(
            Thresholds::default(),
            model.and_then(ctxd_core::model_limits::context_window),
        )
    }

    /// `thresholds` fitted to a window of `context_window` tokens, every mechanism on.
    pub fn new(thresholds: Thresholds, context_window: Option<u64>) -> Self {
        Self {
            thresholds: context_window.map_or(thresholds, |w| thresholds.fitted(w)),
            context_window,
            reminders: true,
            automatic: true,
            requested: true,
            tools: ModelTools::ALL,
        }
    }
}

/// How a turn ended, as the gateway saw it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TurnEnd {
    Completed,
    /// Cancelled by the client: drafts are discarded and pending requests dropped.
    Aborted,
    /// The provider refused the request as too long.
    Overflow,
    /// Another provider failure: no reset.
    Error,
}

/// What a turn boundary decided ([`crate::turn::end_turn`]).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct TurnEndOutcome {
    /// Ids of the entries drafted (appended as one atomic batch).
    pub appended: Vec<EntryId>,
    /// `injected` kind of the budget reminder committed, if any.
    pub reminder: Option<&'static str>,
    /// The window opened, and why.
    pub reset: Option<(String, &'static str)>,
    /// Tokens left in the window before this boundary's drafts (`None`: unknown).
    pub remaining: Option<u64>,
}

/// A turn boundary decided but not yet drafted ([`decide_turn_end`]): the reminder
/// due, and the window to open, whose boot needs the notes as they are now.
#[derive(Debug)]
pub struct TurnEndPlan {
    outcome: TurnEndOutcome,
    drafts: Vec<EntryKind>,
    reset: Option<ResetCause>,
    leaf: Option<EntryId>,
    now_ms: i64,
    /// The ctxd tools the model has (the boot names no other).
    tools: ModelTools,
    /// The checkpoint's size limit in this window.
    checkpoint_chars: usize,
}

impl TurnEndPlan {
    /// Whether [`TurnEndPlan::finish`] needs a notes snapshot (a window opens).
    pub fn needs_notes(&self) -> bool {
        self.reset.is_some()
    }

    /// The outcome and the entries to append as one batch, chained from the branch's leaf.
    /// `notes` is the snapshot for the boot when [`TurnEndPlan::needs_notes`]; without one the
    /// window is not opened (its boot could not list the notes).
    pub fn finish(
        self,
        caller: &Caller,
        record: &SessionRecord,
        session: &Session,
        branch: &[usize],
        notes: Option<&NotesSnapshot>,
    ) -> (TurnEndOutcome, Vec<Entry>) {
        let TurnEndPlan {
            mut outcome,
            mut drafts,
            reset,
            leaf,
            now_ms,
            tools,
            checkpoint_chars,
        } = self;
        let opening = match (reset, notes) {
            (Some(cause), Some(notes)) => {
                // The marker's own id pairs it with its boot; the model is shown the history id
                // of the window, which needs the marker's entry id: the boot is rendered once
                // the chain is laid.
                let marker_id = windows::new_window_id(&record.key, leaf.as_ref());
                drafts.extend(windows::reset_drafts(&marker_id, cause, String::new()));
                Some((cause, notes))
            }
            _ => None,
        };
        if drafts.is_empty() {
            return (outcome, Vec::new());
        }
        let mut entries = windows::chain(leaf.as_ref(), drafts, Some(windows::iso8601(now_ms)));
        if let Some((cause, notes)) = opening {
            let n = entries.len();
            let window_id = windows::history_window_id(record.id, &entries[n - 2].id);
            let boot = render_boot_of(
                caller,
                record,
                session,
                branch,
                &window_id,
                notes,
                tools,
                checkpoint_chars,
            );
            if let EntryKind::WindowBoot { message, .. } = &mut entries[n - 1].kind {
                message.content = vec![ContentBlock::text(boot)];
            }
            outcome.reset = Some((window_id, cause.as_str()));
        }
        outcome.appended = entries.iter().map(|e| e.id.clone()).collect();
        (outcome, entries)
    }
}

/// What [`Engine::repair_window`] did.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum RepairOutcome {
    NotNeeded,
    Repaired { window_id: String, boot: EntryId },
    Refused { window_id: String, reason: String },
}

impl<S: Store + ?Sized> Engine<S> {
    /// The caller's session, checked against its tenant.
    pub(crate) fn caller_session(
        &self,
        caller: &Caller,
        what: &'static str,
    ) -> Result<(SessionRecord, Session), EngineError> {
        let id = caller.session.ok_or(EngineError::NoSession(what))?;
        let record = self
            .store
            .session(&caller.tenant, id)?
            .ok_or_else(|| EngineError::invalid(format!("no session {id} for this caller")))?;
        let session = self.store.load(id)?;
        Ok((record, session))
    }

    /// Tokens left before the final warning (what `get_context_remaining` reports); `None`
    /// when the window's size or content cannot be measured.
    pub fn context_remaining(
        &self,
        caller: &Caller,
        policy: Option<WindowPolicy>,
        counter: &dyn TokenCounter,
    ) -> Result<Option<u64>, EngineError> {
        let (_, session) = self.caller_session(caller, "get_context_remaining")?;
        let policy = policy_or_default(caller, &session, policy);
        let branch = active_branch(&session);
        let Some(window) = policy.context_window else {
            return Ok(None);
        };
        Ok(budget::window_tokens(&session, &branch, counter).map(|t| {
            policy
                .thresholds
                .shown_remaining(budget::remaining(window, t))
        }))
    }

    /// The seed's narrow repair: append the boot of a marker whose boot is missing when only
    /// metadata follows it; refuse when later work does.
    pub fn repair_window(
        &self,
        caller: &Caller,
        tools: ModelTools,
        now_ms: i64,
    ) -> Result<RepairOutcome, EngineError> {
        let (record, session) = self.caller_session(caller, "repair_window")?;
        let branch = active_branch(&session);
        match windows::repair_plan(&session, &branch) {
            Repair::NotNeeded => Ok(RepairOutcome::NotNeeded),
            Repair::Refuse { window_id, reason } => {
                Ok(RepairOutcome::Refused { window_id, reason })
            }
            Repair::AppendBoot { window_id, marker } => {
                // The boot describes the window as it opened: the branch up to its marker.
                let upto = branch
                    .iter()
                    .position(|&p| p == marker)
                    .unwrap_or(branch.len());
                let before = &branch[..upto];
                let shown_id = session
                    .entries
                    .get(marker)
                    .map(|e| windows::history_window_id(record.id, &e.id))
                    .unwrap_or_default();
                let notes = self.notes_snapshot(caller, now_ms)?;
                let policy = policy_or_default(caller, &session, None);
                let boot = render_boot_of(
                    caller,
                    &record,
                    &session,
                    before,
                    &shown_id,
                    &notes,
                    tools,
                    windows::checkpoint_limit(policy.context_window),
                );
                let leaf = branch
                    .last()
                    .and_then(|&p| session.entries.get(p))
                    .map(|e| e.id.clone());
                let appended = self.commit(
                    &record,
                    leaf.as_ref(),
                    vec![windows::repair_boot(&window_id, boot)],
                    Some(windows::iso8601(now_ms)),
                )?;
                Ok(RepairOutcome::Repaired {
                    window_id,
                    boot: appended
                        .into_iter()
                        .next()
                        .unwrap_or_else(|| EntryId::new("")),
                })
            }
        }
    }

    fn commit(
        &self,
        record: &SessionRecord,
        parent: Option<&EntryId>,
        drafts: Vec<ctxd_core::model::EntryKind>,
        timestamp: Option<String>,
    ) -> Result<Vec<EntryId>, EngineError> {
        if drafts.is_empty() {
            return Ok(Vec::new());
        }
        let entries = windows::chain(parent, drafts, timestamp);
        let ids = entries.iter().map(|e| e.id.clone()).collect();
        let batch: Vec<NewEntry> = entries.into_iter().map(NewEntry::new).collect();
        self.store.append(record.id, &batch, None)?;
        Ok(ids)
    }
}

/// `policy`, else the default policy of the caller's model (the session's when the caller names
/// none).
fn policy_or_default(
    caller: &Caller,
    session: &Session,
    policy: Option<WindowPolicy>,
) -> WindowPolicy {
    policy.unwrap_or_else(|| {
        WindowPolicy::for_model(caller.model.as_deref().or(session.meta.model.as_deref()))
    })
}

/// What a turn boundary is decided from: the session's log as the caller has it (the gateway's
/// copy includes writes still queued) and its active branch, how the turn ended, the policy.
pub struct TurnEndInput<'a> {
    pub session: &'a Session,
    /// The active branch (positions, root first).
    pub branch: &'a [usize],
    pub end: TurnEnd,
    pub policy: &'a WindowPolicy,
    pub counter: &'a dyn TokenCounter,
    pub now_ms: i64,
}

/// The turn boundary's decision, without any I/O: the reminder due and whether a window opens.
///
/// As in the seed, a boundary is a model response whose tool batch has completed: an answer
/// without tool calls (decided when it arrives), or the request that carries the last results of
/// a batch (decided before that request is projected). A completed turn whose batch is still
/// open decides nothing: a reminder there would sit between the calls and their results, which
/// no provider accepts. A caller on an async thread decides here and reads the notes snapshot
/// (needed only when a window opens: [`TurnEndPlan::needs_notes`]) off that thread.
pub fn decide_turn_end(input: &TurnEndInput<'_>) -> TurnEndPlan {
    let TurnEndInput {
        session,
        branch,
        end,
        policy,
        counter,
        now_ms,
    } = *input;
    let leaf = branch
        .last()
        .and_then(|&p| session.entries.get(p))
        .map(|e| e.id.clone());
    let mut plan = TurnEndPlan {
        outcome: TurnEndOutcome::default(),
        drafts: Vec::new(),
        reset: None,
        leaf,
        now_ms,
        tools: policy.tools,
        checkpoint_chars: windows::checkpoint_limit(policy.context_window),
    };
    if end == TurnEnd::Aborted {
        plan.drafts.push(EntryKind::Event {
            name: windows::ABORT_EVENT.to_owned(),
            detail: None,
        });
        return plan;
    }
    let complete = windows::batch_complete(session, branch);
    if end == TurnEnd::Completed && !complete {
        return plan;
    }

    let remaining = policy
        .context_window
        .zip(budget::window_tokens(session, branch, counter))
        .map(|(w, t)| budget::remaining(w, t));
    plan.outcome.remaining = remaining;
    if let Some(reminder) = remaining
        .filter(|_| policy.reminders)
        .and_then(|r| budget::due_reminder(session, branch, r, &policy.thresholds))
    {
        plan.outcome.reminder = Some(reminder.kind());
        plan.drafts.push(EntryKind::Message(
            reminder.message(policy.tools, policy.automatic),
        ));
    }

    plan.reset = match end {
        TurnEnd::Overflow
            if policy.automatic && windows::overflow_recovery_allowed(session, branch) =>
        {
            Some(ResetCause::Overflow)
        }
        TurnEnd::Completed if policy.requested && windows::reset_requests(session, branch) > 0 => {
            Some(ResetCause::Requested)
        }
        TurnEnd::Completed
            if policy.automatic && remaining.is_some_and(|r| policy.thresholds.reset_due(r)) =>
        {
            Some(ResetCause::Threshold)
        }
        _ => None,
    };
    plan
}

/// The boot text of window `window_id` opened at the end of `branch`, given the notes as they
/// are now (pure).
#[allow(clippy::too_many_arguments)]
fn render_boot_of(
    caller: &Caller,
    record: &SessionRecord,
    session: &Session,
    branch: &[usize],
    window_id: &str,
    notes: &NotesSnapshot,
    tools: ModelTools,
    checkpoint_chars: usize,
) -> String {
    let root = windows::first_history_window_id(session, branch, record.id).unwrap_or_default();
    let previous = windows::current_history_window_id(session, branch, record.id);
    let checkpoint = windows::checkpoint(session, branch, record.id, notes, checkpoint_chars);
    let agent = caller
        .agent
        .clone()
        .or_else(|| session.meta.agent.map(|a| a.as_str().to_owned()))
        .unwrap_or_else(|| "agent".to_owned());
    let model = caller
        .model
        .clone()
        .or_else(|| session.meta.model.clone())
        .unwrap_or_else(|| "unknown model".to_owned());
    windows::render_boot(&BootData {
        agent: &agent,
        model: &model,
        first_window_id: &root,
        current_window_id: window_id,
        previous_window_id: previous.as_deref(),
        reset_line: true,
        notes,
        checkpoint: Some(&checkpoint),
        tools,
    })
}
