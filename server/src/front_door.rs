//! Who may talk to the server from a browser: every web page its user visits can send requests
//! to a server on 127.0.0.1, so the server checks where each request comes from before it
//! does anything (as Jupyter does for its local server).
//!
//! * `Host` (every route): a page on `attacker.example` whose name was rebound to 127.0.0.1
//!   sends `Host: attacker.example`; only the listen address, `localhost`, the loopback
//!   addresses, the `--public-url`'s host and `--allow-host` names are answered (421 else).
//! * `Origin` (the API, WebSocket handshakes included): a browser names the page that sent a
//!   request; one from another origin than the server's own, `--public-url`'s or an
//!   `--allow-origin`, is refused (403). A request without `Origin` is refused when
//!   `Sec-Fetch-Site` says another site sent it. Programs (curl, SDKs) send neither.
//! * `Content-Type` (the API's POSTs): a browser sends `text/plain` or a form cross-site
//!   without asking first; a JSON route takes `application/json` only (415 else), so a page
//!   must ask (a CORS preflight, which this server never grants) before it can post JSON.

use std::{net::IpAddr, sync::Arc};

use axum::{
    extract::Request,
    http::{HeaderMap, Method, StatusCode, header},
};
use reel_engine::ErrorCode;

use crate::error::ApiError;

/// The names and origins the server answers, besides its own.
#[derive(Clone, Debug, Default)]
pub struct Allowed {
    /// Host names (no port) a request's `Host` may carry: `--allow-host` and the host of
    /// `--public-url`.
    pub hosts: Vec<String>,
    /// Origins (`scheme://host[:port]`) a page may call the API from: `--allow-origin` and
    /// `--public-url`'s.
    pub origins: Vec<String>,
}

impl Allowed {
    /// The allowed names and origins, with `public_url`'s host and origin among them.
    pub fn new(hosts: &[String], origins: &[String], public_url: Option<&str>) -> Self {
        let mut allowed = Self {
            hosts: hosts.iter().map(|h| h.to_ascii_lowercase()).collect(),
            origins: origins.iter().filter_map(|o| origin_of(o)).collect(),
        };
        if let Some(origin) = public_url.and_then(origin_of) {
            if let Some(host) = authority_of(&origin).map(|a| host_of(a).to_owned()) {
                allowed.hosts.push(host);
            }
            allowed.origins.push(origin);
        }
        allowed
    }
}

/// What the checks compare with: where the server listens and what the user allowed.
#[derive(Clone)]
pub struct Door {
    pub listen: IpAddr,
    pub allowed: Arc<Allowed>,
}

impl Door {
    /// Whether a request naming `host` (`Host`'s value) is for this server.
    fn answers_host(&self, host: &str) -> bool {
        let name = host_of(host).to_ascii_lowercase();
        let name = name.trim_start_matches('[').trim_end_matches(']');
        if name == "localhost" || self.allowed.hosts.iter().any(|h| h == name) {
            return true;
        }
        match name.parse::<IpAddr>() {
            // An address a browser was given as such cannot have been rebound; one listening
            // on every interface is reached by each of them.
            Ok(ip) => ip.is_loopback() || ip == self.listen || self.listen.is_unspecified(),
            Err(_) => false,
        }
    }

    /// Whether a page at `origin` may call the API of a server reached as `host`.
    fn trusts_origin(&self, origin: &str, host: Option<&str>) -> bool {
        let Some(origin) = origin_of(origin) else {
            return false;
        };
        let own = authority_of(&origin)
            .zip(host)
            .is_some_and(|(authority, host)| authority.eq_ignore_ascii_case(host));
        own || self.allowed.origins.contains(&origin)
    }

    /// Answers only requests whose `Host` names this server (421 otherwise).
    pub fn check_host(&self, request: &Request) -> Result<(), ApiError> {
        match request_host(request) {
            Some(host) if !self.answers_host(&host) => Err(ApiError::new(
                StatusCode::MISDIRECTED_REQUEST,
                ErrorCode::HostNotAllowed,
                format!(
                    "this server does not answer for host {host:?} (a page whose name points at this machine may be trying to reach it); if you reach it by that name, start it with --allow-host {}",
                    host_of(&host)
                ),
            )),
            _ => Ok(()),
        }
    }

    /// Refuses API requests sent by another site's page (403), and JSON routes' bodies of
    /// another type (415).
    pub fn check_origin(&self, request: &Request) -> Result<(), ApiError> {
        let headers = request.headers();
        let host = request_host(request);
        let origin = headers.get(header::ORIGIN).and_then(|v| v.to_str().ok());
        let refused = match origin {
            Some(origin) if !self.trusts_origin(origin, host.as_deref()) => Some(format!(
                "a page at {origin:?} may not call this server; start it with --allow-origin {origin} if you trust that page"
            )),
            Some(_) => None,
            None => match headers.get("sec-fetch-site").map(|v| v.as_bytes()) {
                Some(b"cross-site" | b"same-site") => Some(
                    "a page of another site may not call this server (Sec-Fetch-Site); open the page this server serves, or start it with --allow-origin ORIGIN".to_owned(),
                ),
                _ => None,
            },
        };
        if let Some(message) = refused {
            return Err(ApiError::new(
                StatusCode::FORBIDDEN,
                ErrorCode::ForbiddenOrigin,
                message,
            ));
        }
        if request.method() == Method::POST {
            check_json(headers)?;
        }
        Ok(())
    }
}

/// A POST's body must be JSON: `Content-Type: application/json`, or no body and no type.
fn check_json(headers: &HeaderMap) -> Result<(), ApiError> {
    let given = headers
        .get(header::CONTENT_TYPE)
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
    let empty = headers
        .get(header::CONTENT_LENGTH)
        .is_some_and(|v| v.as_bytes() == b"0")
        || !(headers.contains_key(header::CONTENT_LENGTH)
            || headers.contains_key(header::TRANSFER_ENCODING));
    let json = given.as_deref().is_some_and(|kind| {
        let essence = kind.split(';').next().unwrap_or_default().trim();
        essence.eq_ignore_ascii_case("application/json")
    });
    match given {
        _ if json => Ok(()),
        None if empty => Ok(()),
        given => Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ErrorCode::UnsupportedMediaType,
            format!(
                "this route takes a JSON body with Content-Type: application/json, not {}",
                given.map_or_else(|| "a body without a type".to_owned(), |g| format!("{g:?}"))
            ),
        )),
    }
}

/// The authority a request was sent to: `Host`, or the URI's (HTTP/2).
fn request_host(request: &Request) -> Option<String> {
    request
        .headers()
        .get(header::HOST)
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
        .or_else(|| request.uri().authority().map(|a| a.as_str().to_owned()))
}

/// `scheme://host[:port]` of a URL or origin, lowercased; `None` for `null` and non-HTTP ones.
fn origin_of(url: &str) -> Option<String> {
    let url = url.trim().to_ascii_lowercase();
    let (scheme, rest) = url.split_once("://")?;
    if !matches!(scheme, "http" | "https") {
        return None;
    }
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let authority = authority.rsplit('@').next().unwrap_or_default();
    (!authority.is_empty()).then(|| format!("{scheme}://{authority}"))
}

/// The `host[:port]` of an origin.
fn authority_of(origin: &str) -> Option<&str> {
    origin.split_once("://").map(|(_, authority)| authority)
}

/// The host of `host[:port]` (an IPv6 address keeps its brackets).
fn host_of(authority: &str) -> &str {
    if authority.starts_with('[') {
        return authority
            .find(']')
            .map_or(authority, |end| &authority[..=end]);
    }
    authority.split(':').next().unwrap_or(authority)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn door(listen: &str) -> Door {
        Door {
            listen: listen.parse().unwrap(),
            allowed: Arc::new(Allowed::new(
                &["reel.internal".into()],
                &["http://localhost:3000".into()],
                Some("https://reel.example.com/base"),
            )),
        }
    }

    #[test]
    fn hosts_are_this_machines_names_and_the_allowed_ones() {
        let door = door("127.0.0.1");
        for host in [
            "127.0.0.1:8080",
            "localhost",
            "LOCALHOST:1",
            "[::1]:80",
            "127.0.0.2",
            "reel.internal:9",
            "reel.example.com",
        ] {
            assert!(door.answers_host(host), "{host}");
        }
        for host in [
            "attacker.example",
            "10.0.0.5:8080",
            "localhost.attacker.example",
        ] {
            assert!(!door.answers_host(host), "{host}");
        }
        assert!(self::door("0.0.0.0").answers_host("10.0.0.5:8080"));
        assert!(!self::door("0.0.0.0").answers_host("attacker.example"));
    }

    #[test]
    fn origins_are_the_servers_own_and_the_allowed_ones() {
        let door = door("127.0.0.1");
        let host = Some("127.0.0.1:8080");
        assert!(door.trusts_origin("http://127.0.0.1:8080", host));
        assert!(door.trusts_origin("http://localhost:3000", host));
        assert!(door.trusts_origin("https://reel.example.com", host));
        assert!(!door.trusts_origin("http://127.0.0.1:8081", host));
        assert!(!door.trusts_origin("http://evil.example", host));
        assert!(!door.trusts_origin("null", host));
        assert!(!door.trusts_origin("http://127.0.0.1:8080", None));
    }

    #[test]
    fn json_routes_take_json_or_nothing() {
        let mut headers = HeaderMap::new();
        assert!(check_json(&headers).is_ok(), "no body, no type");
        headers.insert(header::CONTENT_LENGTH, "2".parse().unwrap());
        assert!(check_json(&headers).is_err(), "a body without a type");
        headers.insert(header::CONTENT_TYPE, "text/plain".parse().unwrap());
        assert!(check_json(&headers).is_err());
        headers.insert(
            header::CONTENT_TYPE,
            "application/x-www-form-urlencoded".parse().unwrap(),
        );
        assert!(check_json(&headers).is_err());
        headers.insert(
            header::CONTENT_TYPE,
            "Application/JSON; charset=utf-8".parse().unwrap(),
        );
        assert!(check_json(&headers).is_ok());
    }
}
