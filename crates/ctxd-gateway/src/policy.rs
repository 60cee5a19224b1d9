//! The budget policy of one request (pure): the model's context window and the mechanisms
//! that act on it.
//!
//! The window is the largest of what is known: the configured window of the model (else the
//! window the provider stated in an overflow error, else the `anthropic-beta: context-1m-…`
//! header's million tokens, else ctxd's model table), and the largest prompt the provider has
//! already accepted in this session. A 1M-token Claude Code session is never managed as if it
//! had 200k, nor a 30k deployment as if it had 200k.

use axum::http::HeaderMap;
use ctxd_core::offered::ModelTools;
use ctxd_engine::windows::WindowPolicy;

use crate::config::Management;

/// The window Anthropic's `context-1m` beta opens.
pub const BETA_1M_WINDOW: u64 = 1_000_000;

/// Whether the request opts into Anthropic's 1M-token context beta.
pub fn wants_1m_context(headers: &HeaderMap) -> bool {
    headers
        .get_all("anthropic-beta")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|b| b.trim().starts_with("context-1m"))
}

/// What a request says of its window beyond the model's name.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RequestWindow {
    /// The `anthropic-beta: context-1m-…` header.
    pub beta_1m: bool,
    /// The window the provider stated for this model (`crate::learned`).
    pub learned: Option<u64>,
}

/// The context window of `model` for this request, before the session's own evidence.
/// `learned`: the window the provider stated for it (`crate::learned`).
pub fn model_window(
    management: &Management,
    model: Option<&str>,
    beta_1m: bool,
    learned: Option<u64>,
) -> Option<u64> {
    if let Some(w) = model.and_then(|m| management.configured_window(m)) {
        return Some(w);
    }
    if learned.is_some() {
        return learned;
    }
    if beta_1m {
        return Some(BETA_1M_WINDOW);
    }
    model.and_then(ctxd_core::model_limits::context_window)
}

/// The policy of one request of agent `agent`: the window (at least `accepted`, the largest
/// prompt the provider reported for the session), the thresholds fitted to it, the mechanisms,
/// and `offered`, ctxd's tools the gateway gives the model on this request (the texts it reads
/// name no others; a `new_context` it was not given is the client's own tool, no request to
/// ctxd).
pub fn window_policy(
    management: &Management,
    agent: &str,
    model: Option<&str>,
    window: RequestWindow,
    accepted: u64,
    offered: ModelTools,
) -> WindowPolicy {
    let window =
        model_window(management, model, window.beta_1m, window.learned).map(|w| w.max(accepted));
    let mut policy = WindowPolicy::new(management.thresholds, window);
    let mechanisms = management.mechanisms_for(agent);
    policy.reminders = mechanisms.reminders && !management.record_only;
    policy.automatic = mechanisms.resets && !management.record_only;
    policy.requested = offered.reset && !management.record_only;
    policy.tools = if management.record_only {
        ModelTools::NONE
    } else {
        offered
    };
    policy
}

/// `policy` with the window known now (the provider has just stated one): the same
/// mechanisms, the thresholds fitted to the new window. A configured window still wins.
pub fn refit(
    management: &Management,
    policy: WindowPolicy,
    model: Option<&str>,
    window: RequestWindow,
) -> WindowPolicy {
    match model_window(management, model, window.beta_1m, window.learned) {
        Some(w) if Some(w) != policy.context_window => WindowPolicy {
            reminders: policy.reminders,
            automatic: policy.automatic,
            requested: policy.requested,
            tools: policy.tools,
            ..WindowPolicy::new(management.thresholds, Some(w))
        },
        _ => policy,
    }
}

/// `policy` for a request ctxd records but does not manage: no reminder, no reset, none of
/// ctxd's tools.
pub fn unmanaged(policy: WindowPolicy) -> WindowPolicy {
    WindowPolicy {
        reminders: false,
        automatic: false,
        requested: false,
        tools: ModelTools::NONE,
        ..policy
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::config::MechanismOverrides;
    use axum::http::HeaderValue;

    #[test]
    fn the_window_is_the_largest_known() {
        let m = Management::default();
        let p = window_policy(
            &m,
            "sdk",
            Some("claude-sonnet-4-5"),
            RequestWindow::default(),
            0,
            ModelTools::NONE,
        );
        assert_eq!(p.context_window, Some(200_000));
        // The beta header opens 1M.
        let p = window_policy(
            &m,
            "sdk",
            Some("claude-sonnet-4-5"),
            RequestWindow {
                beta_1m: true,
                learned: None,
            },
            0,
            ModelTools::NONE,
        );
        assert_eq!(p.context_window, Some(1_000_000));
        // The provider accepted more than the table allows: the window is at least that.
        let p = window_policy(
            &m,
            "sdk",
            Some("claude-sonnet-4-5"),
            RequestWindow::default(),
            450_000,
            ModelTools::NONE,
        );
        assert_eq!(p.context_window, Some(450_000));
        // A window the provider stated wins over the table and the beta; the configured one
        // over it (below).
        let learned = RequestWindow {
            beta_1m: true,
            learned: Some(30_000),
        };
        let p = window_policy(
            &m,
            "sdk",
            Some("claude-sonnet-4-5"),
            learned,
            0,
            ModelTools::NONE,
        );
        assert_eq!(p.context_window, Some(30_000));
        let mut configured = Management::default();
        configured
            .model_windows
            .push(("claude-sonnet".into(), 50_000));
        let p = window_policy(
            &configured,
            "sdk",
            Some("claude-sonnet-4-5"),
            learned,
            0,
            ModelTools::NONE,
        );
        assert_eq!(p.context_window, Some(50_000));
        // Unknown models stay unknown (no threshold, no reminder).
        let p = window_policy(
            &m,
            "sdk",
            Some("llama-3"),
            RequestWindow::default(),
            1_000,
            ModelTools::NONE,
        );
        assert_eq!(p.context_window, None);
    }

    #[test]
    fn configuration_wins_over_the_table() {
        let mut m = Management::default();
        m.model_windows.push(("claude".into(), 300_000));
        m.model_windows.push(("claude-sonnet".into(), 500_000));
        m.model_windows.push(("llama".into(), 8_192));
        let w = |model| {
            window_policy(
                &m,
                "sdk",
                Some(model),
                RequestWindow {
                    beta_1m: true,
                    learned: None,
                },
                0,
                ModelTools::NONE,
            )
            .context_window
        };
        assert_eq!(w("claude-sonnet-4-5"), Some(500_000), "longest prefix");
        assert_eq!(w("Claude-Opus-4"), Some(300_000));
        assert_eq!(w("llama-3"), Some(8_192));
    }

    #[test]
    fn small_windows_get_fitted_thresholds() {
        let m = Management::default();
        let p = window_policy(
            &m,
            "sdk",
            Some("gpt-4"),
            RequestWindow::default(),
            0,
            ModelTools::NONE,
        );
        assert_eq!(p.context_window, Some(8_192));
        assert!(p.thresholds.reminder_line() <= 4_096, "{p:?}");
        let p = window_policy(
            &m,
            "sdk",
            Some("gpt-4o"),
            RequestWindow::default(),
            0,
            ModelTools::NONE,
        );
        assert_eq!(p.thresholds, m.thresholds, "128k keeps the seed's lines");
    }

    #[test]
    fn mechanisms_per_agent_and_record_only() {
        let mut m = Management::default();
        m.agents.insert(
            "codex".into(),
            MechanismOverrides {
                reminders: Some(false),
                resets: None,
                distill: None,
                digests: None,
                amnesia: None,
                lazy_tools: None,
                tools: None,
            },
        );
        let p = window_policy(
            &m,
            "codex",
            Some("gpt-5"),
            RequestWindow::default(),
            0,
            ModelTools::NONE,
        );
        assert!(!p.reminders && p.automatic);
        let p = window_policy(
            &m,
            "pi",
            Some("gpt-5"),
            RequestWindow::default(),
            0,
            ModelTools::NONE,
        );
        assert!(p.reminders && p.automatic && !p.requested);
        m.record_only = true;
        let p = window_policy(
            &m,
            "pi",
            Some("gpt-5"),
            RequestWindow::default(),
            0,
            ModelTools::NONE,
        );
        assert!(!p.reminders && !p.automatic);
    }

    #[test]
    fn the_1m_beta_is_read_from_any_anthropic_beta_value() {
        let mut h = HeaderMap::new();
        assert!(!wants_1m_context(&h));
        h.append(
            "anthropic-beta",
            HeaderValue::from_static("oauth-2025-04-20, context-1m-2025-08-07"),
        );
        assert!(wants_1m_context(&h));
    }
}
