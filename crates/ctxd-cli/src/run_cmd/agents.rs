//! How `ctxd run` points each agent at the gateway without editing the user's own files:
//! Claude Code, Gemini CLI and any other command through the environment
//! (`ANTHROPIC_BASE_URL`, `OPENAI_BASE_URL`, `GOOGLE_GEMINI_BASE_URL`), Codex through `-c`
//! overrides of its active provider, Pi through an extension file of ctxd's own (`-e`) that
//! overrides its providers' base URLs (`/v1` for OpenAI's APIs, `/v1beta` for Google's).
//!
//! Gemini CLI with a base URL set needs `security.auth.selectedType` `"gemini-api-key"` in its
//! settings (it has no flag or variable for it; without it, it takes the base URL for an auth
//! type of its own and exits 41, "Invalid auth method selected"); its settings are read, and
//! when they select no auth or another one, the run says what to change before it starts.
//!
//! Pure: the caller reads the environment and the agents' config files and hands their texts
//! in, so every rule here is tested without a process or a home directory.

use std::ffi::{OsStr, OsString};

/// The agents `ctxd run` knows by their command's name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Agent {
    ClaudeCode,
    Codex,
    Pi,
    GeminiCli,
    /// Anything else: pointed at the gateway through the three base-URL variables.
    Other,
}

impl Agent {
    /// The agent a command runs, from its file name (`/usr/bin/claude`, `codex`, `pi`,
    /// `gemini`).
    pub fn of(program: &OsStr) -> Agent {
        let name = std::path::Path::new(program)
            .file_name()
            .and_then(OsStr::to_str)
            .unwrap_or("");
        match name {
            "claude" => Agent::ClaudeCode,
            "codex" => Agent::Codex,
            "pi" => Agent::Pi,
            "gemini" => Agent::GeminiCli,
            _ => Agent::Other,
        }
    }

    /// The agent name the gateway records for its sessions (`None`: any).
    pub fn recorded(self) -> Option<ctxd_core::model::Agent> {
        match self {
            Agent::ClaudeCode => Some(ctxd_core::model::Agent::ClaudeCode),
            Agent::Codex => Some(ctxd_core::model::Agent::Codex),
            Agent::Pi => Some(ctxd_core::model::Agent::Pi),
            Agent::GeminiCli => Some(ctxd_core::model::Agent::GeminiCli),
            Agent::Other => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Agent::ClaudeCode => "claude-code",
            Agent::Codex => "codex",
            Agent::Pi => "pi",
            Agent::GeminiCli => "gemini-cli",
            Agent::Other => "command",
        }
    }
}

/// What the agent would have talked to without ctxd, read from its environment and config:
/// the gateway ctxd starts forwards there (unless ctxd's own upstream is configured), so
/// `ctxd run` sits in front of what the agent already used.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Priors {
    pub anthropic: Option<String>,
    pub openai: Option<String>,
    pub gemini: Option<String>,
}

/// Everything read from outside for one agent.
#[derive(Clone, Debug, Default)]
pub struct Inputs<'a> {
    /// `ANTHROPIC_BASE_URL` in ctxd's environment.
    pub anthropic_base_url: Option<&'a str>,
    /// `OPENAI_BASE_URL` in ctxd's environment.
    pub openai_base_url: Option<&'a str>,
    /// `GOOGLE_GEMINI_BASE_URL` in ctxd's environment.
    pub gemini_base_url: Option<&'a str>,
    /// Codex's `config.toml`, when there is one.
    pub codex_config: Option<&'a str>,
    /// Pi's `models.json` and `settings.json`, when there are.
    pub pi_models: Option<&'a str>,
    pub pi_settings: Option<&'a str>,
    /// Gemini CLI's settings files that exist, as (path, text), the one that wins first:
    /// system settings, the workspace's, the user's, system defaults.
    pub gemini_settings: &'a [(String, String)],
    /// Where Gemini CLI keeps the user's settings (`~/.gemini/settings.json`), for the advice.
    pub gemini_user_settings: &'a str,
}

/// How one agent is launched against the gateway.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    pub priors: Priors,
    /// Codex: the custom provider whose `base_url` is overridden (`None`: the built-in
    /// `openai`, pointed through `OPENAI_BASE_URL`).
    codex_provider: Option<String>,
    /// Pi: providers to override, with the API each speaks.
    pi_providers: Vec<(String, PiApi)>,
    /// What to tell the user before the agent starts (how to make its requests go through ctxd).
    pub notes: Vec<String>,
}

/// A launch: arguments before the user's own, environment to set, and Pi's extension.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Launch {
    pub leading_args: Vec<OsString>,
    pub env: Vec<(&'static str, String)>,
    /// The text of Pi's extension file; its path goes into `leading_args` as `-e PATH`.
    pub pi_extension: Option<String>,
}

/// The served APIs' families as Pi's base URLs tell them apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum PiApi {
    /// The gateway's root.
    Anthropic,
    /// `/v1`.
    OpenAi,
    /// `/v1beta`: Pi's Google provider takes the version from its base URL.
    Gemini,
}

/// APIs the gateway serves, as Pi names them.
const PI_SERVED_APIS: [(&str, PiApi); 4] = [
    ("anthropic-messages", PiApi::Anthropic),
    ("openai-completions", PiApi::OpenAi),
    ("openai-responses", PiApi::OpenAi),
    ("google-generative-ai", PiApi::Gemini),
];

impl Plan {
    /// Read what `agent` (run with `args`) uses now.
    pub fn new(agent: Agent, args: &[OsString], inputs: &Inputs) -> Plan {
        let mut plan = Plan::default();
        let env_anthropic = inputs.anthropic_base_url.map(str::to_owned);
        let env_openai = inputs.openai_base_url.map(str::to_owned);
        let env_gemini = inputs.gemini_base_url.map(str::to_owned);
        match agent {
            Agent::ClaudeCode => plan.priors.anthropic = env_anthropic,
            Agent::Other => {
                plan.priors.anthropic = env_anthropic;
                plan.priors.openai = env_openai;
                plan.priors.gemini = env_gemini;
            }
            Agent::GeminiCli => {
                plan.priors.gemini = env_gemini;
                plan.notes.extend(gemini_auth_note(
                    inputs.gemini_settings,
                    inputs.gemini_user_settings,
                ));
            }
            Agent::Codex => match codex_provider(args, inputs.codex_config) {
                Some((name, base_url)) => {
                    plan.priors.openai = base_url;
                    plan.codex_provider = Some(name);
                }
                None => plan.priors.openai = env_openai,
            },
            Agent::Pi => {
                plan.pi_providers = vec![
                    ("anthropic".into(), PiApi::Anthropic),
                    ("openai".into(), PiApi::OpenAi),
                    ("google".into(), PiApi::Gemini),
                ];
                if let Some((name, api, base_url)) =
                    pi_selected(args, inputs.pi_models, inputs.pi_settings)
                {
                    match api {
                        PiApi::Anthropic => plan.priors.anthropic = base_url,
                        PiApi::OpenAi => plan.priors.openai = base_url,
                        PiApi::Gemini => {
                            plan.priors.gemini = base_url.map(|u| {
                                let u = u.trim().trim_end_matches('/');
                                u.strip_suffix("/v1beta").unwrap_or(u).to_owned()
                            });
                        }
                    }
                    plan.pi_providers.retain(|(n, _)| *n != name);
                    plan.pi_providers.push((name, api));
                }
            }
        }
        plan
    }

    /// The launch against the gateway at `url` (`http://host:port`, no trailing slash);
    /// `extension_path` is where Pi's extension file will be written.
    pub fn launch(&self, agent: Agent, url: &str, extension_path: &OsStr) -> Launch {
        let openai = format!("{url}/v1");
        let mut launch = Launch::default();
        match agent {
            Agent::ClaudeCode => launch.env.push(("ANTHROPIC_BASE_URL", url.to_owned())),
            Agent::Other => {
                launch.env.push(("ANTHROPIC_BASE_URL", url.to_owned()));
                launch.env.push(("OPENAI_BASE_URL", openai));
                launch.env.push(("GOOGLE_GEMINI_BASE_URL", url.to_owned()));
            }
            // The SDK inside appends `/v1beta/models/...`.
            Agent::GeminiCli => launch.env.push(("GOOGLE_GEMINI_BASE_URL", url.to_owned())),
            Agent::Codex => match &self.codex_provider {
                Some(name) => {
                    launch.leading_args.push("-c".into());
                    launch
                        .leading_args
                        .push(format!("model_providers.{name}.base_url={openai:?}").into());
                }
                None => launch.env.push(("OPENAI_BASE_URL", openai)),
            },
            Agent::Pi => {
                let mut text = String::from(
                    "// Written by `ctxd run` for this run only: Pi's providers through ctxd.\n\
                     export default function (pi) {\n",
                );
                let gemini = format!("{url}/v1beta");
                for (name, api) in &self.pi_providers {
                    let base = match api {
                        PiApi::Anthropic => url,
                        PiApi::OpenAi => openai.as_str(),
                        PiApi::Gemini => gemini.as_str(),
                    };
                    let name = serde_json::to_string(name).unwrap_or_default();
                    let base = serde_json::to_string(base).unwrap_or_default();
                    text.push_str(&format!(
                        "  pi.registerProvider({name}, {{ baseUrl: {base} }});\n"
                    ));
                }
                text.push_str("}\n");
                launch.pi_extension = Some(text);
                launch.leading_args.push("-e".into());
                launch.leading_args.push(extension_path.to_owned());
            }
        }
        launch
    }
}

/// The value of `--flag VALUE` or `--flag=VALUE` in `args`, the last one given.
fn flag_value(args: &[OsString], flag: &str) -> Option<String> {
    let mut found = None;
    let mut it = args.iter().filter_map(|a| a.to_str());
    while let Some(a) = it.next() {
        if a == flag {
            found = it.next().map(str::to_owned);
        } else if let Some(v) = a.strip_prefix(flag).and_then(|r| r.strip_prefix('=')) {
            found = Some(v.to_owned());
        }
    }
    found
}

/// Codex's active custom provider and its base URL: `-c model_provider=NAME` in the arguments,
/// else `model_provider` in its config. `None` for the built-in `openai` (or no config).
fn codex_provider(args: &[OsString], config: Option<&str>) -> Option<(String, Option<String>)> {
    let config: toml::Table = config
        .and_then(|c| toml::from_str(c).ok())
        .unwrap_or_default();
    let mut chosen = config
        .get("model_provider")
        .and_then(|v| v.as_str())
        .map(str::to_owned);
    let mut it = args.iter().filter_map(|a| a.to_str());
    while let Some(a) = it.next() {
        let set = if a == "-c" || a == "--config" {
            it.next()
        } else {
            a.strip_prefix("--config=")
        };
        if let Some(v) = set.and_then(|s| s.strip_prefix("model_provider=")) {
            chosen = Some(v.trim().trim_matches('"').to_owned());
        }
    }
    let name = chosen.filter(|n| n != "openai")?;
    let provider = config.get("model_providers")?.get(&name)?;
    let wire = provider
        .get("wire_api")
        .and_then(|v| v.as_str())
        .unwrap_or("responses");
    if !matches!(wire, "responses" | "chat") {
        return None;
    }
    let base_url = provider
        .get("base_url")
        .and_then(|v| v.as_str())
        .map(str::to_owned);
    Some((name, base_url))
}

/// Pi's selected provider when it is one of `models.json` on an API the gateway serves:
/// (name, its API's family, its base URL). `--provider NAME` in the arguments, else
/// `defaultProvider` in its settings.
fn pi_selected(
    args: &[OsString],
    models: Option<&str>,
    settings: Option<&str>,
) -> Option<(String, PiApi, Option<String>)> {
    let name = flag_value(args, "--provider").or_else(|| {
        let s: serde_json::Value = serde_json::from_str(settings?).ok()?;
        s.get("defaultProvider")?.as_str().map(str::to_owned)
    })?;
    let models: serde_json::Value = serde_json::from_str(models?).ok()?;
    let provider = models.get("providers")?.get(&name)?;
    let api = provider.get("api")?.as_str()?;
    let (_, family) = PI_SERVED_APIS.iter().find(|(a, _)| *a == api)?;
    let base_url = provider
        .get("baseUrl")
        .and_then(|v| v.as_str())
        .map(str::to_owned);
    Some((name, *family, base_url))
}

/// The auth Gemini CLI's settings select: (the file that says so, the type).
fn gemini_selected_auth(files: &[(String, String)]) -> Option<(&str, String)> {
    files.iter().find_map(|(path, text)| {
        let settings: serde_json::Value = serde_json::from_str(&strip_json_comments(text)).ok()?;
        let chosen = settings.pointer("/security/auth/selectedType")?.as_str()?;
        Some((path.as_str(), chosen.to_owned()))
    })
}

/// What the user must change for Gemini CLI's requests to go through ctxd, if anything: an
/// API key is the only auth that talks to the Gemini API at a base URL of one's choosing.
fn gemini_auth_note(files: &[(String, String)], user_settings: &str) -> Option<String> {
    match gemini_selected_auth(files) {
        Some((_, chosen)) if chosen == "gemini-api-key" => None,
        Some((path, chosen)) => Some(format!(
            "ctxd run: Gemini CLI signs in with \"{chosen}\" (security.auth.selectedType in \
             {path}); only \"gemini-api-key\" talks to the Gemini API through ctxd: select it there \
             (or pick \"Use Gemini API Key\" in its /auth dialog), with GEMINI_API_KEY set"
        )),
        None => Some(format!(
            "ctxd run: Gemini CLI's settings select no auth: with a base URL set, `gemini -p` then \
             exits 41 (\"Invalid auth method selected\") and the interactive CLI asks; to use \
             GEMINI_API_KEY through ctxd, add \"security\": {{\"auth\": {{\"selectedType\": \
             \"gemini-api-key\"}}}} to {user_settings} (or pick \"Use Gemini API Key\" in its /auth \
             dialog), with GEMINI_API_KEY set"
        )),
    }
}

/// JSON with `//` and `/* */` comments (Gemini CLI's settings) as plain JSON.
fn strip_json_comments(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    let mut in_string = false;
    while let Some(c) = chars.next() {
        if in_string {
            out.push(c);
            match c {
                '\\' => out.extend(chars.next()),
                '"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match (c, chars.peek()) {
            ('"', _) => {
                in_string = true;
                out.push(c);
            }
            ('/', Some('/')) => {
                for c in chars.by_ref() {
                    if c == '\n' {
                        out.push(c);
                        break;
                    }
                }
            }
            ('/', Some('*')) => {
                chars.next();
                let mut last = ' ';
                for c in chars.by_ref() {
                    if last == '*' && c == '/' {
                        break;
                    }
                    last = c;
                }
                out.push(' ');
            }
            _ => out.push(c),
        }
    }
    out
}

/// An agent's base URL as the gateway's upstream origin: an OpenAI base URL ends in `/v1`,
/// which the client's path repeats.
pub fn upstream_of(base_url: &str) -> String {
    let trimmed = base_url.trim().trim_end_matches('/');
    trimmed.strip_suffix("/v1").unwrap_or(trimmed).to_owned()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<OsString> {
        list.iter().map(OsString::from).collect()
    }

    #[test]
    fn agents_are_known_by_their_command_name() {
        assert_eq!(Agent::of(OsStr::new("claude")), Agent::ClaudeCode);
        assert_eq!(Agent::of(OsStr::new("/opt/bin/codex")), Agent::Codex);
        assert_eq!(Agent::of(OsStr::new("pi")), Agent::Pi);
        assert_eq!(
            Agent::of(OsStr::new("/usr/local/bin/gemini")),
            Agent::GeminiCli
        );
        assert_eq!(Agent::of(OsStr::new("python3")), Agent::Other);
    }

    #[test]
    fn claude_code_and_other_commands_get_environment_only() {
        let inputs = Inputs {
            anthropic_base_url: Some("https://proxy.corp/anthropic"),
            openai_base_url: Some("https://proxy.corp/openai/v1"),
            ..Inputs::default()
        };
        let plan = Plan::new(Agent::ClaudeCode, &[], &inputs);
        assert_eq!(
            plan.priors.anthropic.as_deref(),
            Some("https://proxy.corp/anthropic")
        );
        let l = plan.launch(Agent::ClaudeCode, "http://127.0.0.1:9", OsStr::new("x"));
        assert_eq!(
            l.env,
            vec![("ANTHROPIC_BASE_URL", "http://127.0.0.1:9".into())]
        );
        assert!(l.leading_args.is_empty());
        let other = Plan::new(Agent::Other, &[], &inputs);
        assert_eq!(
            other.priors.openai.as_deref(),
            Some("https://proxy.corp/openai/v1")
        );
        let l = other.launch(Agent::Other, "http://127.0.0.1:9", OsStr::new("x"));
        assert!(l
            .env
            .contains(&("OPENAI_BASE_URL", "http://127.0.0.1:9/v1".into())));
        assert!(l
            .env
            .contains(&("GOOGLE_GEMINI_BASE_URL", "http://127.0.0.1:9".into())));
    }

    #[test]
    fn gemini_cli_gets_its_base_url_and_advice_on_its_auth() {
        let user = "/home/u/.gemini/settings.json";
        let with = |files: &[(String, String)]| {
            Plan::new(
                Agent::GeminiCli,
                &args(&["-p", "hi"]),
                &Inputs {
                    gemini_base_url: Some("https://proxy.corp/gemini/"),
                    gemini_settings: files,
                    gemini_user_settings: user,
                    ..Inputs::default()
                },
            )
        };
        let file = |path: &str, text: &str| (path.to_owned(), text.to_owned());
        let api_key = file(
            user,
            r#"{
                // Comments are allowed, as Gemini CLI allows them.
                "security": {"auth": {"selectedType": "gemini-api-key"}}, /* "x": "//" */
                "ui": {"theme": "http://not-a-comment"}
            }"#,
        );
        let plan = with(std::slice::from_ref(&api_key));
        assert!(plan.notes.is_empty(), "{:?}", plan.notes);
        assert_eq!(
            plan.priors.gemini.as_deref(),
            Some("https://proxy.corp/gemini/")
        );
        let l = plan.launch(Agent::GeminiCli, "http://127.0.0.1:9", OsStr::new("x"));
        assert_eq!(
            l.env,
            vec![("GOOGLE_GEMINI_BASE_URL", "http://127.0.0.1:9".into())]
        );
        assert!(l.leading_args.is_empty() && l.pi_extension.is_none());

        // No auth selected anywhere: the exact fix, in the user's settings.
        let plan = with(&[file(user, r#"{"ui": {"hideTips": true}}"#)]);
        assert_eq!(plan.notes.len(), 1);
        let note = &plan.notes[0];
        assert!(note.contains("exits 41"), "{note}");
        assert!(
            note.contains(&format!(
                r#"add "security": {{"auth": {{"selectedType": "gemini-api-key"}}}} to {user}"#
            )),
            "{note}"
        );
        assert_eq!(with(&[]).notes.len(), 1);

        // Another auth, in a file that wins over the user's: named, with where it is set.
        let system = file(
            "/etc/gemini-cli/settings.json",
            r#"{"security": {"auth": {"selectedType": "oauth-personal"}}}"#,
        );
        let plan = with(&[system, api_key.clone()]);
        let note = &plan.notes[0];
        assert!(
            note.contains(r#"signs in with "oauth-personal" (security.auth.selectedType in /etc/gemini-cli/settings.json)"#),
            "{note}"
        );
        // A file that selects nothing does not hide the next one's choice.
        let workspace = file("/repo/.gemini/settings.json", "{}");
        assert!(with(&[workspace, api_key]).notes.is_empty());
    }

    const CODEX: &str = r#"
model_provider = "mock"
[model_providers.mock]
base_url = "http://127.0.0.1:4000/v1"
wire_api = "responses"
[model_providers.local]
base_url = "http://127.0.0.1:5000/v1"
"#;

    #[test]
    fn codex_gets_a_c_override_of_its_active_provider() {
        let inputs = Inputs {
            codex_config: Some(CODEX),
            ..Inputs::default()
        };
        let plan = Plan::new(Agent::Codex, &args(&["exec", "hi"]), &inputs);
        assert_eq!(
            plan.priors.openai.as_deref(),
            Some("http://127.0.0.1:4000/v1")
        );
        let l = plan.launch(Agent::Codex, "http://127.0.0.1:9", OsStr::new("x"));
        assert_eq!(
            l.leading_args,
            args(&[
                "-c",
                "model_providers.mock.base_url=\"http://127.0.0.1:9/v1\""
            ])
        );
        assert!(l.env.is_empty());
        // A provider chosen on the command line wins over the config's.
        let plan = Plan::new(
            Agent::Codex,
            &args(&["-c", "model_provider=local", "exec"]),
            &inputs,
        );
        assert_eq!(
            plan.priors.openai.as_deref(),
            Some("http://127.0.0.1:5000/v1")
        );
        // The built-in provider (no config, or `openai`): OPENAI_BASE_URL.
        let plan = Plan::new(Agent::Codex, &[], &Inputs::default());
        let l = plan.launch(Agent::Codex, "http://127.0.0.1:9", OsStr::new("x"));
        assert_eq!(
            l.env,
            vec![("OPENAI_BASE_URL", "http://127.0.0.1:9/v1".into())]
        );
        assert!(l.leading_args.is_empty());
    }

    #[test]
    fn pi_gets_an_extension_overriding_its_providers() {
        let models = r#"{"providers": {
            "mock-openai": {"baseUrl": "http://127.0.0.1:4000/v1", "api": "openai-completions"},
            "ollama": {"baseUrl": "http://127.0.0.1:11434", "api": "ollama"}}}"#;
        let inputs = Inputs {
            pi_models: Some(models),
            pi_settings: Some(r#"{"defaultProvider": "ollama"}"#),
            ..Inputs::default()
        };
        let plan = Plan::new(Agent::Pi, &args(&["--provider", "mock-openai"]), &inputs);
        assert_eq!(
            plan.priors.openai.as_deref(),
            Some("http://127.0.0.1:4000/v1")
        );
        let l = plan.launch(Agent::Pi, "http://127.0.0.1:9", OsStr::new("/tmp/e.js"));
        assert_eq!(l.leading_args, args(&["-e", "/tmp/e.js"]));
        let text = l.pi_extension.unwrap();
        assert!(text
            .contains(r#"pi.registerProvider("anthropic", { baseUrl: "http://127.0.0.1:9" });"#));
        assert!(text
            .contains(r#"pi.registerProvider("openai", { baseUrl: "http://127.0.0.1:9/v1" });"#));
        assert!(text.contains(
            r#"pi.registerProvider("mock-openai", { baseUrl: "http://127.0.0.1:9/v1" });"#
        ));
        assert!(text.contains(
            r#"pi.registerProvider("google", { baseUrl: "http://127.0.0.1:9/v1beta" });"#
        ));
        // A Google provider: its version stays in the base URL, out of the upstream.
        let models = r#"{"providers": {"mock-google":
            {"baseUrl": "http://127.0.0.1:4000/v1beta", "api": "google-generative-ai"}}}"#;
        let inputs_google = Inputs {
            pi_models: Some(models),
            ..Inputs::default()
        };
        let plan = Plan::new(
            Agent::Pi,
            &args(&["--provider=mock-google"]),
            &inputs_google,
        );
        assert_eq!(plan.priors.gemini.as_deref(), Some("http://127.0.0.1:4000"));
        let text = plan
            .launch(Agent::Pi, "http://127.0.0.1:9", OsStr::new("e"))
            .pi_extension
            .unwrap();
        assert!(text.contains(
            r#"pi.registerProvider("mock-google", { baseUrl: "http://127.0.0.1:9/v1beta" });"#
        ));
        // A provider on an API the gateway does not serve is left alone.
        let plan = Plan::new(Agent::Pi, &[], &inputs);
        assert_eq!(plan.priors, Priors::default());
        let text = plan
            .launch(Agent::Pi, "http://127.0.0.1:9", OsStr::new("e"))
            .pi_extension
            .unwrap();
        assert!(!text.contains("ollama"));
    }

    #[test]
    fn base_urls_become_upstream_origins() {
        assert_eq!(upstream_of("http://h:1/v1/"), "http://h:1");
        assert_eq!(
            upstream_of("https://api.anthropic.com"),
            "https://api.anthropic.com"
        );
        assert_eq!(
            upstream_of("https://proxy/openai/v1"),
            "https://proxy/openai"
        );
    }
}
