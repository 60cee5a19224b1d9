//! The notes address grammar (seed `pi-context` 0.25.0, `notesHomeBlock`), strict:
//!
//! ```text
//! address := vpath                      this session
//!          | "@project/" vpath          this project
//!          | "@human/" vpath            the human's cross-project home
//!          | "@self/" vpath             the calling agent's home
//!          | "@agents/" name "/" vpath  a named agent's home
//!          | "@model/" vpath            the answering model's home
//!          | "@models/" name "/" vpath  a named model's home
//! vpath   := segment ("/" segment)*
//! ```
//!
//! A segment (and a name) is non-empty, is not `.` or `..`, and holds no `@`, `\` or control
//! character. Anything else after `@`, an absolute path, leading or trailing whitespace and an
//! address over [`MAX_ADDRESS_BYTES`] are hard errors: there is no fallback to another home.
//! `@self` and `@model` resolve to the caller's names, and every address shown back (listings,
//! results) uses the resolved form (`@agents/<name>/...`, `@models/<name>/...`).

use super::{HomeScope, NoteError};

/// The longest address accepted, in bytes.
pub const MAX_ADDRESS_BYTES: usize = 1024;

const HOMES_HELP: &str = "the homes are @project/, @human/, @self/, @agents/<name>/, @model/ and @models/<name>/; a bare path is this session";

/// Who is asking: what bare paths, `@project`, `@self` and `@model` resolve against.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Who<'a> {
    /// The session's store key (bare paths).
    pub session: Option<&'a str>,
    /// The project's key (`@project/`).
    pub project: Option<&'a str>,
    /// The calling agent's name (`@self/`).
    pub agent: Option<&'a str>,
    /// The answering model's name (`@model/`).
    pub model: Option<&'a str>,
}

/// One resolved home.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Home {
    pub scope: HomeScope,
    /// The session key, project key, agent name or model name (empty for the human home).
    pub name: String,
}

impl Home {
    pub fn new(scope: HomeScope, name: impl Into<String>) -> Self {
        Self {
            scope,
            name: name.into(),
        }
    }

    /// The store's key of the home: `session:<key>`, `project:<key>`, `human`, `agent:<name>`,
    /// `model:<name>`.
    pub fn key(&self) -> String {
        match self.scope {
            HomeScope::Session => format!("session:{}", self.name),
            HomeScope::Project => format!("project:{}", self.name),
            HomeScope::Human => "human".to_owned(),
            HomeScope::Agent => format!("agent:{}", self.name),
            HomeScope::Model => format!("model:{}", self.name),
        }
    }

    /// The address prefix shown for notes of this home: ``, `@project/`, `@human/`,
    /// `@agents/<name>/`, `@models/<name>/`.
    pub fn prefix(&self) -> String {
        match self.scope {
            HomeScope::Session => String::new(),
            HomeScope::Project => "@project/".to_owned(),
            HomeScope::Human => "@human/".to_owned(),
            HomeScope::Agent => format!("@agents/{}/", self.name),
            HomeScope::Model => format!("@models/{}/", self.name),
        }
    }

    /// The resolved address of `path` in this home.
    pub fn address(&self, path: &str) -> String {
        format!("{}{path}", self.prefix())
    }

    /// A short label for messages (`this session`, `@project`, `@agents/pi`...).
    pub fn label(&self) -> String {
        match self.scope {
            HomeScope::Session => "this session".to_owned(),
            _ => self.prefix().trim_end_matches('/').to_owned(),
        }
    }
}

/// A resolved note address: its home and its path inside the home.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NoteAddress {
    pub home: Home,
    pub path: String,
}

impl NoteAddress {
    /// The resolved address as shown back (`plan.md`, `@agents/pi/plan.md`).
    pub fn display(&self) -> String {
        self.home.address(&self.path)
    }
}

/// A resolved listing prefix: one home and a path prefix inside it (possibly empty).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NotePrefix {
    pub home: Home,
    pub prefix: String,
}

/// Resolve a note's address for `who`.
pub fn resolve(address: &str, who: &Who<'_>) -> Result<NoteAddress, NoteError> {
    let (spec, rest) = split_home(address, false)?;
    check_vpath(address, rest, false)?;
    let home = spec.resolve(address, who)?;
    Ok(NoteAddress {
        home,
        path: rest.to_owned(),
    })
}

/// Resolve a listing or search prefix for `who`. Same grammar, but the path may be empty, end
/// with `/` or stop inside a segment (`@project/pla` lists `@project/plans/...`); `@project`
/// alone is the whole home.
pub fn resolve_prefix(prefix: &str, who: &Who<'_>) -> Result<NotePrefix, NoteError> {
    if prefix.is_empty() {
        return Ok(NotePrefix {
            home: session_home(who)?,
            prefix: String::new(),
        });
    }
    let (spec, rest) = split_home(prefix, true)?;
    check_vpath(prefix, rest, true)?;
    let home = spec.resolve(prefix, who)?;
    Ok(NotePrefix {
        home,
        prefix: rest.to_owned(),
    })
}

/// The homes `who` can reach without naming anyone: this session, the project, the human, the
/// caller's agent and model (the ones whose names are known), broadest last.
pub fn own_homes(who: &Who<'_>) -> Vec<Home> {
    let mut homes = Vec::new();
    if let Some(s) = who.session {
        homes.push(Home::new(HomeScope::Session, s));
    }
    if let Some(p) = who.project {
        homes.push(Home::new(HomeScope::Project, p));
    }
    homes.push(Home::new(HomeScope::Human, ""));
    if let Some(a) = who.agent.filter(|a| check_name(a).is_ok()) {
        homes.push(Home::new(HomeScope::Agent, a));
    }
    if let Some(m) = who.model.filter(|m| check_name(m).is_ok()) {
        homes.push(Home::new(HomeScope::Model, m));
    }
    homes
}

fn session_home(who: &Who<'_>) -> Result<Home, NoteError> {
    let key = who.session.ok_or(NoteError::UnknownCaller {
        home: "a bare path (this session's notes)",
        what: "session",
    })?;
    Ok(Home::new(HomeScope::Session, key))
}

/// The home an address names, before the caller's names are filled in.
enum Spec<'s> {
    Session,
    Project,
    Human,
    SelfAgent,
    SelfModel,
    Named(HomeScope, &'s str),
}

impl Spec<'_> {
    fn resolve(&self, address: &str, who: &Who<'_>) -> Result<Home, NoteError> {
        match *self {
            Spec::Session => session_home(who),
            Spec::Project => {
                let key = who.project.ok_or(NoteError::UnknownCaller {
                    home: "@project",
                    what: "project",
                })?;
                Ok(Home::new(HomeScope::Project, key))
            }
            Spec::Human => Ok(Home::new(HomeScope::Human, "")),
            Spec::SelfAgent => {
                let name = who.agent.ok_or(NoteError::UnknownCaller {
                    home: "@self",
                    what: "calling agent's name",
                })?;
                check_caller_name(address, name, "agent")?;
                Ok(Home::new(HomeScope::Agent, name))
            }
            Spec::SelfModel => {
                let name = who.model.ok_or(NoteError::UnknownCaller {
                    home: "@model",
                    what: "model's name",
                })?;
                check_caller_name(address, name, "model")?;
                Ok(Home::new(HomeScope::Model, name))
            }
            Spec::Named(scope, name) => Ok(Home::new(scope, name)),
        }
    }
}

/// Whole-address checks, then the home it names. Returns the home and the rest (the vpath).
fn split_home(address: &str, prefix_mode: bool) -> Result<(Spec<'_>, &str), NoteError> {
    if address.is_empty() {
        return Err(NoteError::address(address, "the address is empty"));
    }
    if address.len() > MAX_ADDRESS_BYTES {
        return Err(NoteError::address(
            &address.chars().take(60).collect::<String>(),
            format!("longer than {MAX_ADDRESS_BYTES} bytes"),
        ));
    }
    if address.chars().any(char::is_control) {
        return Err(NoteError::address(
            address,
            "control characters are not allowed",
        ));
    }
    if address.trim() != address {
        return Err(NoteError::address(
            address,
            "leading or trailing whitespace is not allowed",
        ));
    }
    if address.contains('\\') {
        return Err(NoteError::address(
            address,
            "`\\` is not allowed (the separator is `/`)",
        ));
    }
    if address.starts_with('/') {
        return Err(NoteError::address(
            address,
            "absolute paths are not note addresses: a path is relative to its home (bare = this session)",
        ));
    }
    let Some(after_at) = address.strip_prefix('@') else {
        return Ok((Spec::Session, address));
    };
    let (word, rest) = match after_at.split_once('/') {
        Some((w, r)) => (w, Some(r)),
        None => (after_at, None),
    };
    let needs_rest = |home: &str| -> Result<&str, NoteError> {
        match rest {
            Some(r) => Ok(r),
            None if prefix_mode => Ok(""),
            None => Err(NoteError::address(
                address,
                format!("{home} needs a path after it ({home}/<path>)"),
            )),
        }
    };
    match word {
        "project" => Ok((Spec::Project, needs_rest("@project")?)),
        "human" => Ok((Spec::Human, needs_rest("@human")?)),
        "self" => Ok((Spec::SelfAgent, needs_rest("@self")?)),
        "model" => Ok((Spec::SelfModel, needs_rest("@model")?)),
        "agents" | "models" => {
            let (scope, what) = if word == "agents" {
                (HomeScope::Agent, "agent")
            } else {
                (HomeScope::Model, "model")
            };
            let Some(rest) = rest else {
                return Err(NoteError::address(
                    address,
                    format!("@{word} needs a name: @{word}/<{what} name>/<path>"),
                ));
            };
            let (name, path) = match rest.split_once('/') {
                Some((n, p)) => (n, Some(p)),
                None => (rest, None),
            };
            check_name(name).map_err(|reason| {
                NoteError::address(address, format!("bad {what} name {name:?}: {reason}"))
            })?;
            let path = match path {
                Some(p) => p,
                None if prefix_mode => "",
                None => {
                    return Err(NoteError::address(
                        address,
                        format!("@{word}/{name} needs a path after it (@{word}/{name}/<path>)"),
                    ))
                }
            };
            Ok((Spec::Named(scope, name), path))
        }
        "" => Err(NoteError::address(
            address,
            format!("`@` must name a home: {HOMES_HELP}"),
        )),
        other => Err(NoteError::address(
            address,
            format!("unknown home @{other}: {HOMES_HELP}"),
        )),
    }
}

fn check_caller_name(address: &str, name: &str, what: &str) -> Result<(), NoteError> {
    check_name(name).map_err(|reason| {
        NoteError::address(
            address,
            format!("the caller's {what} name {name:?} cannot name a home: {reason}"),
        )
    })
}

/// A home name is one segment.
fn check_name(name: &str) -> Result<(), String> {
    if name.contains('/') {
        return Err("a name is one path segment (no `/`)".to_owned());
    }
    check_segment(name)
}

fn check_segment(segment: &str) -> Result<(), String> {
    if segment.is_empty() {
        return Err("empty path segment (`//`, or `/` at the start or end)".to_owned());
    }
    if segment == ".." {
        return Err("`..` (parent traversal) is not allowed".to_owned());
    }
    if segment == "." {
        return Err("`.` segments are not allowed".to_owned());
    }
    if segment.contains('@') {
        return Err("`@` inside a path is not allowed: `@` only starts an address".to_owned());
    }
    if segment.chars().any(char::is_control) || segment.contains('\\') {
        return Err("control characters and `\\` are not allowed".to_owned());
    }
    Ok(())
}

fn check_vpath(address: &str, vpath: &str, prefix_mode: bool) -> Result<(), NoteError> {
    if vpath.is_empty() {
        if prefix_mode {
            return Ok(());
        }
        return Err(NoteError::address(address, "the note path is empty"));
    }
    let segments: Vec<&str> = vpath.split('/').collect();
    let last = segments.len() - 1;
    for (i, segment) in segments.iter().enumerate() {
        // A prefix may end with `/` (an empty last segment).
        if prefix_mode && i == last && segment.is_empty() {
            continue;
        }
        check_segment(segment).map_err(|reason| NoteError::address(address, reason))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const WHO: Who<'static> = Who {
        session: Some("pi:abc"),
        project: Some("/home/me/repo"),
        agent: Some("claude-code"),
        model: Some("claude-sonnet-4"),
    };

    fn ok(address: &str) -> (String, String, String) {
        let a = resolve(address, &WHO).unwrap();
        (a.home.key(), a.path.clone(), a.display())
    }

    fn err(address: &str) -> String {
        resolve(address, &WHO).unwrap_err().to_string()
    }

    #[test]
    fn every_home_resolves() {
        assert_eq!(
            ok("todo.md"),
            ("session:pi:abc".into(), "todo.md".into(), "todo.md".into())
        );
        assert_eq!(
            ok("@project/plans/a.md"),
            (
                "project:/home/me/repo".into(),
                "plans/a.md".into(),
                "@project/plans/a.md".into()
            )
        );
        assert_eq!(
            ok("@human/prefs.md"),
            ("human".into(), "prefs.md".into(), "@human/prefs.md".into())
        );
        assert_eq!(
            ok("@self/MAP.md"),
            (
                "agent:claude-code".into(),
                "MAP.md".into(),
                "@agents/claude-code/MAP.md".into()
            )
        );
        assert_eq!(
            ok("@agents/codex/x/y.md"),
            (
                "agent:codex".into(),
                "x/y.md".into(),
                "@agents/codex/x/y.md".into()
            )
        );
        assert_eq!(
            ok("@model/tips"),
            (
                "model:claude-sonnet-4".into(),
                "tips".into(),
                "@models/claude-sonnet-4/tips".into()
            )
        );
        assert_eq!(
            ok("@models/gpt-5/tips"),
            (
                "model:gpt-5".into(),
                "tips".into(),
                "@models/gpt-5/tips".into()
            )
        );
        // Dots inside names are fine; unicode too.
        assert_eq!(ok(".hidden/v1.2.md").1, ".hidden/v1.2.md");
        assert_eq!(ok("notes/été ok.md").1, "notes/été ok.md");
    }

    #[test]
    fn malformed_addresses_are_hard_errors() {
        for (address, needle) in [
            ("", "empty"),
            ("@", "must name a home"),
            ("@proj/a", "unknown home @proj"),
            ("@Project/a", "unknown home @Project"),
            ("@session/a", "unknown home @session"),
            ("@project", "needs a path"),
            ("@project/", "path is empty"),
            ("@agents/", "bad agent name"),
            ("@agents/bob", "needs a path"),
            ("@agents//a", "bad agent name"),
            ("@agents/../a", "bad agent name"),
            ("@models/a@b/x", "`@` inside"),
            ("../etc/passwd", "parent traversal"),
            ("a/../b", "parent traversal"),
            ("@project/../x", "parent traversal"),
            ("./a", "`.` segments"),
            ("a//b", "empty path segment"),
            ("a/", "empty path segment"),
            ("/etc/passwd", "absolute"),
            ("a@b.md", "`@` inside"),
            ("dir/@project/x", "`@` inside"),
            ("a\nb", "control"),
            ("a\u{0}b", "control"),
            ("a\\b", "`\\`"),
            (" a", "whitespace"),
            ("a ", "whitespace"),
        ] {
            let message = err(address);
            assert!(message.contains(needle), "{address:?}: {message}");
            assert!(
                message.starts_with("invalid note address"),
                "{address:?}: {message}"
            );
        }
        let long = "a".repeat(MAX_ADDRESS_BYTES + 1);
        assert!(err(&long).contains("longer than 1024 bytes"));
    }

    #[test]
    fn unknown_callers_are_clear_errors() {
        let nobody = Who::default();
        for (address, needle) in [
            ("todo.md", "session"),
            ("@self/a", "@self"),
            ("@model/a", "@model"),
            ("@project/a", "@project"),
        ] {
            let message = resolve(address, &nobody).unwrap_err().to_string();
            assert!(message.contains(needle), "{address}: {message}");
            assert!(message.contains("unknown here"), "{message}");
        }
        // Named homes and the human home need no caller.
        assert!(resolve("@human/a", &nobody).is_ok());
        assert!(resolve("@agents/x/a", &nobody).is_ok());
        // A caller name that cannot be a segment.
        let odd = Who {
            agent: Some("root/research"),
            ..WHO
        };
        assert!(resolve("@self/a", &odd)
            .unwrap_err()
            .to_string()
            .contains("cannot name a home"));
    }

    #[test]
    fn prefixes() {
        let p = |s: &str| {
            let r = resolve_prefix(s, &WHO).unwrap();
            (r.home.key(), r.prefix)
        };
        assert_eq!(p(""), ("session:pi:abc".into(), "".into()));
        assert_eq!(p("plans/"), ("session:pi:abc".into(), "plans/".into()));
        assert_eq!(p("pla"), ("session:pi:abc".into(), "pla".into()));
        assert_eq!(p("@project"), ("project:/home/me/repo".into(), "".into()));
        assert_eq!(p("@project/"), ("project:/home/me/repo".into(), "".into()));
        assert_eq!(p("@agents/bob"), ("agent:bob".into(), "".into()));
        assert_eq!(p("@self/a/b/"), ("agent:claude-code".into(), "a/b/".into()));
        for bad in ["@x", "../", "a//", "@agents", "a@", "/a"] {
            assert!(resolve_prefix(bad, &WHO).is_err(), "{bad}");
        }
    }

    #[test]
    fn own_homes_skip_unknown_names() {
        let homes = own_homes(&Who {
            agent: Some("a/b"),
            model: None,
            ..WHO
        });
        let keys: Vec<String> = homes.iter().map(Home::key).collect();
        assert_eq!(keys, ["session:pi:abc", "project:/home/me/repo", "human"]);
        assert_eq!(own_homes(&WHO).len(), 5);
    }
}

#[cfg(test)]
mod order_of_checks {
    use super::*;

    #[test]
    fn syntax_errors_come_before_unknown_callers() {
        let nobody = Who::default();
        for address in ["../x", "a//b", "@self/../x", "@model/a@b"] {
            let e = resolve(address, &nobody).unwrap_err();
            assert!(matches!(e, NoteError::Address { .. }), "{address}: {e}");
        }
    }
}

#[cfg(test)]
mod properties {
    use proptest::prelude::*;

    use super::*;

    const WHO: Who<'static> = Who {
        session: Some("s"),
        project: Some("p"),
        agent: Some("a"),
        model: Some("m"),
    };

    proptest! {
        /// Any string: never a panic; an accepted address has only clean segments, and its
        /// resolved form resolves to the same note.
        #[test]
        fn accepted_addresses_are_clean_and_round_trip(
            address in "(@(project|human|self|model|agents|models|x|)/?)?([a-z.@\\\\/ \\n]{0,3}/?){0,4}"
        ) {
            if let Ok(a) = resolve(&address, &WHO) {
                for segment in a.path.split('/') {
                    prop_assert!(!segment.is_empty() && segment != ".." && segment != ".");
                    prop_assert!(!segment.contains('@') && !segment.contains('\\'));
                    prop_assert!(!segment.chars().any(char::is_control));
                }
                let again = resolve(&a.display(), &WHO).unwrap();
                prop_assert_eq!(again, a);
            }
        }
    }
}
