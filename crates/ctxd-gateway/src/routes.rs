//! Upstreams per model: one gateway in front of several providers. A route sends the requests
//! of one API (or of every API) whose model matches its pattern to its own upstream (another
//! vendor's Anthropic-compatible endpoint, OpenRouter, a local vLLM, llama.cpp or Ollama
//! server); every other request goes to its API's upstream (`--upstream-anthropic`,
//! `--upstream-openai`). The client's credentials go along untouched, whichever upstream it is:
//! the client holds the key each provider expects.
//!
//! A pattern is a model name, or a prefix ending in `*` (`claude-*`; `*` alone matches every
//! model). The most specific route that matches wins: an exact name over any prefix, a longer
//! prefix over a shorter one; among equal ones, the one given last (a flag's over the file's).

use serde::Deserialize;

use crate::api::Api;

/// One route: which requests, and where they go.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Route {
    /// A model name, or a prefix ending in `*`.
    pub model: String,
    /// The API whose requests it takes (`anthropic`, `chat`, `responses`, `gemini`, or
    /// `openai` for both of OpenAI's); every API when absent.
    #[serde(default)]
    pub api: Option<RouteApi>,
    /// The upstream's base URL, as `--upstream-anthropic` takes it.
    pub upstream: String,
    /// What stats, response headers and logs call it (default: the upstream's host).
    #[serde(default)]
    pub name: Option<String>,
}

/// The APIs a route takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RouteApi {
    Anthropic,
    Chat,
    Responses,
    /// Chat Completions and Responses.
    Openai,
    Gemini,
}

impl RouteApi {
    fn parse(s: &str) -> Result<Self, String> {
        match s {
            "anthropic" => Ok(Self::Anthropic),
            "chat" => Ok(Self::Chat),
            "responses" => Ok(Self::Responses),
            "openai" => Ok(Self::Openai),
            "gemini" => Ok(Self::Gemini),
            other => Err(format!(
                "{other:?} is not an API (anthropic, chat, responses, openai or gemini)"
            )),
        }
    }

    fn takes(self, api: Api) -> bool {
        matches!(
            (self, api),
            (Self::Anthropic, Api::Anthropic)
                | (Self::Chat | Self::Openai, Api::Chat)
                | (Self::Responses | Self::Openai, Api::Responses)
                | (Self::Gemini, Api::Gemini)
        )
    }
}

impl Route {
    /// `--route [API:]MODEL=URL`, e.g. `anthropic:deepseek-*=https://api.deepseek.com/anthropic`.
    pub fn parse(spec: &str) -> Result<Route, String> {
        let (pattern, upstream) = spec
            .split_once('=')
            .ok_or_else(|| format!("{spec:?} is not [API:]MODEL=URL"))?;
        let (api, model) = match pattern.split_once(':') {
            Some((api, model)) => (Some(RouteApi::parse(api)?), model),
            None => (None, pattern),
        };
        let route = Route {
            model: model.to_owned(),
            api,
            upstream: upstream.to_owned(),
            name: None,
        };
        route.checked()
    }

    /// The route with its URL checked (http or https, no trailing slash) and its pattern
    /// well-formed.
    pub fn checked(mut self) -> Result<Route, String> {
        let star = self.model.find('*');
        if self.model.is_empty() || star.is_some_and(|i| i + 1 != self.model.len()) {
            return Err(format!(
                "route {:?}: a model name, or a prefix ending in `*`",
                self.model
            ));
        }
        let url = reqwest::Url::parse(&self.upstream).map_err(|e| {
            format!(
                "route {}: {:?} is not a URL: {e}",
                self.model, self.upstream
            )
        })?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(format!(
                "route {}: {:?} must be http or https",
                self.model, self.upstream
            ));
        }
        while self.upstream.ends_with('/') {
            self.upstream.pop();
        }
        if self.name.is_none() {
            self.name = Some(url.host_str().unwrap_or("upstream").to_owned());
        }
        Ok(self)
    }

    /// How specific the route is for `model`, when it matches: an exact name beats any
    /// prefix, a longer prefix a shorter one.
    fn specificity(&self, model: &str) -> Option<(bool, usize)> {
        match self.model.strip_suffix('*') {
            Some(prefix) => model.starts_with(prefix).then_some((false, prefix.len())),
            None => (self.model == model).then_some((true, self.model.len())),
        }
    }

    pub fn name(&self) -> &str {
        self.name.as_deref().unwrap_or(&self.upstream)
    }
}

/// The route a request of `api` naming `model` takes, if any (see the module's doc).
pub fn pick<'r>(routes: &'r [Route], api: Api, model: Option<&str>) -> Option<&'r Route> {
    let model = model?;
    routes
        .iter()
        .filter(|r| r.api.is_none_or(|a| a.takes(api)))
        .filter_map(|r| r.specificity(model).map(|s| (s, r)))
        // `max_by_key` keeps the last of equal keys: the route given last wins a tie.
        .max_by_key(|(s, _)| *s)
        .map(|(_, r)| r)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn routes(specs: &[&str]) -> Vec<Route> {
        specs.iter().map(|s| Route::parse(s).unwrap()).collect()
    }

    fn picked(routes: &[Route], api: Api, model: &str) -> Option<String> {
        pick(routes, api, Some(model)).map(|r| r.upstream.clone())
    }

    #[test]
    fn the_most_specific_matching_route_wins() {
        let r = routes(&[
            "*=http://any",
            "deepseek-*=http://deepseek/",
            "deepseek-chat=http://exact",
            "chat:*=http://local:8080",
        ]);
        assert_eq!(
            picked(&r, Api::Anthropic, "deepseek-reasoner").as_deref(),
            Some("http://deepseek")
        );
        assert_eq!(
            picked(&r, Api::Anthropic, "deepseek-chat").as_deref(),
            Some("http://exact")
        );
        assert_eq!(
            picked(&r, Api::Anthropic, "claude-sonnet-4-5").as_deref(),
            Some("http://any")
        );
        // Two `*` for Chat: the one given last wins the tie.
        assert_eq!(
            picked(&r, Api::Chat, "llama-3").as_deref(),
            Some("http://local:8080")
        );
        assert_eq!(
            picked(&r, Api::Responses, "gpt-5").as_deref(),
            Some("http://any")
        );
        assert!(pick(&r, Api::Chat, None).is_none(), "no model, no route");
    }

    #[test]
    fn a_route_takes_only_its_apis() {
        let r = routes(&["anthropic:claude-*=http://a", "openai:gpt-*=http://o"]);
        assert!(picked(&r, Api::Chat, "claude-x").is_none());
        assert_eq!(
            picked(&r, Api::Responses, "gpt-5").as_deref(),
            Some("http://o")
        );
        assert_eq!(picked(&r, Api::Chat, "gpt-5").as_deref(), Some("http://o"));
        assert!(picked(&r, Api::Anthropic, "gpt-5").is_none());
    }

    #[test]
    fn bad_routes_say_why() {
        for (spec, says) in [
            ("deepseek-*", "[API:]MODEL=URL"),
            ("vertex:x=http://a", "not an API"),
            ("a*b=http://a", "prefix ending in `*`"),
            ("=http://a", "prefix ending in `*`"),
            ("x=ftp://a", "http or https"),
            ("x=not a url", "not a URL"),
        ] {
            let e = Route::parse(spec).unwrap_err();
            assert!(e.contains(says), "{spec}: {e}");
        }
        assert_eq!(
            Route::parse("x=https://api.deepseek.com/anthropic")
                .unwrap()
                .name(),
            "api.deepseek.com"
        );
    }
}
