//! Context windows learned from the provider. An overflow error states the real limit
//! ("prompt is too long: 37400 tokens > 30000 maximum"), which can be smaller than ctxd's table
//! says (a deployment with a smaller window, a local server started with a small context):
//! without it every few steps would be refused, each refusal an extra upstream call. The limit
//! is kept per model (and per `context-1m` beta) in the store's settings, so every gateway on the
//! store uses it from its next request on; a configured `--model-window` still wins
//! (`policy::model_window`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use crate::server::Gateway;

/// The settings' key prefix of learned windows.
const PREFIX: &str = "learned-window/";

/// How often a gateway on a shared store reads what the others learned.
const REFRESH_MS: u64 = 30_000;

/// The windows learned so far, by [`key`].
#[derive(Debug, Default)]
pub struct Learned {
    windows: RwLock<HashMap<String, u64>>,
    /// When the map was last read from the store (ms since the epoch), and whether a read is
    /// under way.
    refreshed_ms: AtomicU64,
    refreshing: AtomicBool,
}

/// The settings key of `model`'s learned window (with the 1M beta or without: two windows).
fn key(model: &str, beta_1m: bool) -> String {
    let beta = if beta_1m { "+context-1m" } else { "" };
    format!("{PREFIX}{}{beta}", model.to_ascii_lowercase())
}

impl Learned {
    /// What the store holds (a store that cannot answer leaves the map empty: the table's
    /// windows apply until an overflow teaches them again).
    pub fn load(store: &dyn ctxd_store::Store) -> Self {
        let learned = Learned::default();
        learned.read(store);
        learned
    }

    fn read(&self, store: &dyn ctxd_store::Store) {
        match store.settings_with_prefix(PREFIX) {
            Ok(rows) => {
                let map = rows
                    .into_iter()
                    .filter_map(|(k, v)| Some((k, std::str::from_utf8(&v).ok()?.parse().ok()?)))
                    .collect();
                *self.windows.write().unwrap_or_else(|p| p.into_inner()) = map;
            }
            Err(e) => tracing::warn!(error = %e, "learned context windows could not be read"),
        }
        self.refreshed_ms
            .store(ctxd_engine::now_ms().max(0) as u64, Ordering::Relaxed);
    }

    /// The window learned for `model`.
    pub fn window(&self, model: &str, beta_1m: bool) -> Option<u64> {
        self.windows
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(&key(model, beta_1m))
            .copied()
    }

    fn remember(&self, model: &str, beta_1m: bool, window: u64) -> bool {
        let mut map = self.windows.write().unwrap_or_else(|p| p.into_inner());
        map.insert(key(model, beta_1m), window) != Some(window)
    }
}

/// The window learned for `model`. On a store that several gateways share, what the others
/// learned is read again in the background at most every [`REFRESH_MS`].
pub fn window(app: &Arc<Gateway>, model: Option<&str>, beta_1m: bool) -> Option<u64> {
    let learned = &app.learned;
    if app.engine.store().shared() {
        let age = (ctxd_engine::now_ms().max(0) as u64)
            .saturating_sub(learned.refreshed_ms.load(Ordering::Relaxed));
        if age > REFRESH_MS && !learned.refreshing.swap(true, Ordering::AcqRel) {
            let app = app.clone();
            tokio::task::spawn_blocking(move || {
                app.learned.read(app.engine.store());
                app.learned.refreshing.store(false, Ordering::Release);
            });
        }
    }
    learned.window(model?, beta_1m)
}

/// The provider refused a prompt of `model` as too long with `body`: the window it states is
/// remembered (in memory at once, in the store in the background). A model whose window is
/// configured keeps it.
pub fn observe_overflow(app: &Arc<Gateway>, model: Option<&str>, beta_1m: bool, body: &[u8]) {
    let Some(model) = model else {
        return;
    };
    if app.settings.management.configured_window(model).is_some() {
        return;
    }
    let text = String::from_utf8_lossy(&body[..body.len().min(4096)]);
    let Some(window) = ctxd_core::model_limits::stated_window(&text) else {
        return;
    };
    if !app.learned.remember(model, beta_1m, window) {
        return;
    }
    tracing::info!(
        model,
        window,
        "the provider stated this model's context window: used from the next request on"
    );
    metrics::counter!("ctxd_windows_learned_total").increment(1);
    let app = app.clone();
    let key = key(model, beta_1m);
    tokio::task::spawn_blocking(move || {
        if let Err(e) = app
            .engine
            .store()
            .put_setting(&key, window.to_string().as_bytes())
        {
            tracing::warn!(error = %e, "a learned context window could not be stored");
        }
    });
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn windows_are_kept_per_model_and_beta() {
        let l = Learned::default();
        assert!(l.remember("Claude-X", false, 30_000));
        assert!(
            !l.remember("claude-x", false, 30_000),
            "the same window again"
        );
        assert_eq!(l.window("claude-x", false), Some(30_000));
        assert_eq!(l.window("claude-x", true), None);
    }
}
