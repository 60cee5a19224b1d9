//! A mock upstream and a gateway in front of it, on the test's runtime.

use std::path::PathBuf;

use ctxd_core::model::{EntryKind, Session};
use ctxd_gateway::{Server, Settings};
use ctxd_mock::{Config, MockServer};
use ctxd_store::{Durability, SessionRecord, SqliteStore, Store};

pub struct Rig {
    pub mock: MockServer,
    pub base: String,
    pub store_path: PathBuf,
    pub client: reqwest::Client,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<std::io::Result<()>>>,
    _dir: tempfile::TempDir,
}

impl Rig {
    pub async fn start() -> Rig {
        Self::with(Config::default(), |_| {}).await
    }

    pub async fn with(config: Config, tweak: impl FnOnce(&mut Settings)) -> Rig {
        let dir = tempfile::tempdir().unwrap();
        let store_path = dir.path().join("ctxd.db");
        Self::with_store(config, store_path, dir, tweak).await
    }

    /// A rig whose store is `store_path` (in `dir`, kept until the rig is dropped).
    pub async fn with_store(
        config: Config,
        store_path: PathBuf,
        dir: tempfile::TempDir,
        tweak: impl FnOnce(&mut Settings),
    ) -> Rig {
        let mock = MockServer::start(config).await.unwrap();
        let mut settings = Settings::new(store_path.clone());
        settings.listen = "127.0.0.1:0".parse().unwrap();
        settings.upstream_anthropic = mock.base_url();
        settings.upstream_openai = mock.base_url();
        settings.upstream_gemini = mock.base_url();
        tweak(&mut settings);
        settings.validate().unwrap();
        let server = Server::bind(settings).await.unwrap();
        let base = format!("http://{}", server.local_addr().unwrap());
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(server.run(async {
            let _ = stopped.await;
        }));
        Rig {
            mock,
            base,
            store_path,
            client: reqwest::Client::new(),
            stop: Some(stop),
            task: Some(task),
            _dir: dir,
        }
    }

    /// The gateway's `host:port`, for clients that speak HTTP on a raw socket.
    pub fn addr(&self) -> String {
        self.base.trim_start_matches("http://").to_owned()
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.base, path)
    }

    /// POST `body` with JSON content type and `headers`.
    pub async fn post(
        &self,
        path: &str,
        headers: &[(&str, &str)],
        body: Vec<u8>,
    ) -> reqwest::Response {
        let mut req = self
            .client
            .post(self.url(path))
            .header("content-type", "application/json")
            .body(body);
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        req.send().await.unwrap()
    }

    /// Stop the gateway (in-flight requests finish, the writer drains, the store closes).
    pub async fn stop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            task.await.unwrap().unwrap();
        }
    }

    /// Stop the gateway and read the store back.
    pub async fn stored(&mut self) -> Stored {
        self.stop().await;
        Stored(SqliteStore::open(&self.store_path, Durability::Full).unwrap())
    }
}

pub struct Stored(pub SqliteStore);

impl Stored {
    /// Every session of every tenant (read straight from the table: the test is the operator).
    pub fn sessions(&self) -> Vec<SessionRecord> {
        let mut out = Vec::new();
        for tenant in self.0.tenants().unwrap() {
            out.extend(self.0.list_sessions(&tenant).unwrap());
        }
        out
    }

    pub fn load(&self, record: &SessionRecord) -> Session {
        self.0.load(record.id).unwrap()
    }
}

/// An Anthropic Messages conversation of one tenant's session, driven turn by turn: each
/// turn resends the whole history, as clients do, and the answer joins it.
pub struct Conversation {
    key: String,
    session: String,
    pub messages: Vec<serde_json::Value>,
}

impl Conversation {
    pub fn new(key: &str, session: &str) -> Conversation {
        Conversation {
            key: key.to_owned(),
            session: session.to_owned(),
            messages: Vec::new(),
        }
    }

    /// Send the user's `content` after the history; the response's headers.
    pub async fn turn(&mut self, rig: &Rig, content: &str) -> reqwest::header::HeaderMap {
        self.messages
            .push(serde_json::json!({"role": "user", "content": content}));
        let body = serde_json::json!({"model": "claude-sonnet-4-5", "max_tokens": 10,
            "messages": self.messages});
        let h = [
            ("x-api-key", self.key.as_str()),
            ("x-ctxd-session", self.session.as_str()),
        ];
        let resp = rig
            .post("/v1/messages", &h, serde_json::to_vec(&body).unwrap())
            .await;
        assert!(resp.status().is_success(), "{}", resp.status());
        let headers = resp.headers().clone();
        let reply: serde_json::Value =
            serde_json::from_slice(&resp.bytes().await.unwrap()).unwrap();
        self.messages
            .push(serde_json::json!({"role": "assistant", "content": reply["content"]}));
        headers
    }
}

/// One turn of a new conversation.
pub async fn chat(rig: &Rig, key: &str, session: &str, text: &str) {
    Conversation::new(key, session).turn(rig, text).await;
}

/// GET `path` with `headers`: status and body text.
pub async fn get(rig: &Rig, path: &str, headers: &[(&str, &str)]) -> (u16, String) {
    let mut req = rig.client.get(rig.url(path));
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    (status, resp.text().await.unwrap())
}

/// A JSON error: the status and `{"error": ...}`.
pub fn assert_json_error(status: u16, body: &str, want: u16) {
    assert_eq!(status, want, "{body}");
    let v: serde_json::Value =
        serde_json::from_str(body).unwrap_or_else(|_| panic!("not JSON: {body}"));
    assert!(v["error"].as_str().is_some_and(|e| !e.is_empty()), "{v}");
}

/// The messages of the active branch, as (role, text of every block) pairs.
pub fn branch_messages(session: &Session) -> Vec<(String, String)> {
    let branch = ctxd_core::tree::active_branch(session);
    branch
        .iter()
        .filter_map(|&p| match &session.entries[p].kind {
            EntryKind::Message(m) => {
                Some((format!("{:?}", m.role), ctxd_core::text::message_text(m)))
            }
            _ => None,
        })
        .collect()
}

/// The reasons of the window markers in the log, in order.
pub fn window_reasons(session: &Session) -> Vec<&str> {
    session
        .entries
        .iter()
        .filter_map(|e| match &e.kind {
            EntryKind::WindowMarker { reason, .. } => Some(reason.as_str()),
            _ => None,
        })
        .collect()
}

/// How many messages ctxd injected (reminders) are in the log.
pub fn injected_count(session: &Session) -> usize {
    session
        .entries
        .iter()
        .filter(|e| matches!(&e.kind, EntryKind::Message(m) if m.injected.is_some()))
        .count()
}

/// Whether the gateway says it rewrote what went upstream (`x-ctxd-rewritten: 1`).
pub fn rewritten(response: &reqwest::Response) -> bool {
    response
        .headers()
        .get("x-ctxd-rewritten")
        .is_some_and(|v| v.as_bytes() == b"1")
}
