//! The broker setting as a list of nodes: one URL whose authority names several hosts,
//! `amqp://user:password@h1:5672,h2:5672,h3:5672/vhost?heartbeat=15`.
//!
//! Why one URL and not several: the nodes of a RabbitMQ cluster share their users, vhosts and
//! permissions, so the credentials, the vhost and the options are written once (and the password
//! is in the value once, where the tools that take it from the environment or hide it already
//! look: between `://` and the last `@` before the first `/`). It is the form libpq and the
//! MongoDB drivers use for the same thing. A single host is the list of one.
//!
//! The parsing is strict and its errors never quote the value: a host is named by its position
//! ("host 2 of 3"), since a mistyped URL may hold its password where a host is expected.

use lapin::uri::AMQPUri;

/// Most nodes a list may name: a cluster has three or five; a longer list is a mistake.
pub const MAX_NODES: usize = 16;

/// One broker node: where to connect (with the credentials) and how logs name it.
#[derive(Clone)]
pub(super) struct Node {
    /// Carries the credentials: never logged, never put in an error.
    pub uri: AMQPUri,
    /// `amqp://host:port/vhost`: what logs and errors say instead.
    pub endpoint: String,
}

/// A broker setting that is not a valid node list. The message names what is wrong and never
/// shows the value (nor any part of it: a host is named by its position).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidBrokerUrl(pub String);

impl std::fmt::Display for InvalidBrokerUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for InvalidBrokerUrl {}

/// The form a broker setting takes, for error messages.
pub const NODE_LIST_FORM: &str = "one node is `amqp://user:password@host:5672/vhost`; a cluster \
     is one URL with its hosts between `@` and `/`, commas between them and no spaces: \
     `amqp://user:password@h1:5672,h2:5672,h3:5672/vhost`";

fn invalid(what: impl Into<String>) -> InvalidBrokerUrl {
    InvalidBrokerUrl(format!("{} ({NODE_LIST_FORM})", what.into()))
}

/// The endpoints (`amqp://host:port/vhost`, no credentials) of the nodes a broker setting names,
/// in order, or why it is not a valid node list. For checking a setting before it is used and
/// for printing what it names.
pub fn broker_endpoints(url: &str) -> Result<Vec<String>, InvalidBrokerUrl> {
    Ok(parse(url)?.into_iter().map(|n| n.endpoint).collect())
}

/// The nodes of `url`, in order. See the [module docs](self) for the form.
pub(super) fn parse(url: &str) -> Result<Vec<Node>, InvalidBrokerUrl> {
    let Some((scheme, rest)) = url.split_once("://") else {
        return Err(invalid("not a URL (the value is not shown)"));
    };
    if !matches!(scheme, "amqp" | "amqps") {
        return Err(invalid(
            "the scheme must be `amqp://` or `amqps://` (the value is not shown)",
        ));
    }
    if rest.contains("://") {
        return Err(invalid(
            "several URLs in one setting (the value is not shown); several nodes are one URL \
             with a list of hosts",
        ));
    }
    // The authority ends at the first `/` or `?`; the credentials end at its last `@`.
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let (userinfo, hosts) = match authority.rsplit_once('@') {
        Some((userinfo, hosts)) => (Some(userinfo), hosts),
        None => (None, authority),
    };
    let entries: Vec<&str> = hosts.split(',').collect();
    if entries.len() > MAX_NODES {
        return Err(invalid(format!(
            "{} hosts; at most {MAX_NODES} nodes may be listed",
            entries.len()
        )));
    }
    let mut nodes: Vec<Node> = Vec::with_capacity(entries.len());
    for (k, entry) in entries.iter().enumerate() {
        let which = || {
            if entries.len() == 1 {
                "the host".to_string()
            } else {
                format!("host {} of {}", k + 1, entries.len())
            }
        };
        check_host(entry).map_err(|why| invalid(format!("{} {why}", which())))?;
        let one = match userinfo {
            Some(userinfo) => format!("{scheme}://{userinfo}@{entry}{tail}"),
            None => format!("{scheme}://{entry}{tail}"),
        };
        let uri: AMQPUri = one.parse().map_err(|e: String| {
            // The parser's message may quote part of the URL; say it only if it holds no secret.
            let detail = match userinfo {
                Some(userinfo) if quotes_userinfo(&e, userinfo) => "malformed URL".to_string(),
                _ => e,
            };
            invalid(format!(
                "invalid AMQP URL (not shown: it may carry credentials): {detail}"
            ))
        })?;
        let node = Node {
            endpoint: endpoint(&uri),
            uri,
        };
        if nodes.iter().any(|n| n.endpoint == node.endpoint) {
            return Err(invalid(format!("{} repeats an earlier host", which())));
        }
        nodes.push(node);
    }
    Ok(nodes)
}

/// Checks one entry of the host list: `name` or `name:port`, a name being letters, digits, `-`,
/// `.` and `_` (an IPv4 address is one). Says what is wrong without quoting the entry.
fn check_host(entry: &str) -> Result<(), &'static str> {
    if entry.is_empty() {
        return Err("is empty (two commas in a row, or one at an end)");
    }
    if entry.chars().any(char::is_whitespace) {
        return Err("has a space in it (write no spaces around the commas)");
    }
    if entry.starts_with('[') {
        // lapin's URL parser takes only a domain for the host: an IPv6 literal would become
        // `localhost`, silently. A name that resolves to the address works.
        return Err("is an IPv6 address, which the AMQP client cannot take; use a host name");
    }
    let (host, port) = match entry.split_once(':') {
        Some((host, port)) => (host, Some(port)),
        None => (entry, None),
    };
    if host.is_empty()
        || !host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_'))
    {
        return Err("is not a host name or IPv4 address (letters, digits, `-`, `.`, `_`)");
    }
    if let Some(port) = port {
        let valid = !port.is_empty()
            && port.len() <= 5
            && port.bytes().all(|b| b.is_ascii_digit())
            && port.parse::<u32>().is_ok_and(|p| (1..=65535).contains(&p));
        if !valid {
            return Err("has a port that is not a number from 1 to 65535");
        }
    }
    Ok(())
}

/// `amqp://host:port/vhost`, with no credentials.
pub(super) fn endpoint(uri: &AMQPUri) -> String {
    format!("{}://{}/{}", uri.scheme, host_port(uri), shown_vhost(uri))
}

/// How logs name a list of nodes: the URL without credentials, its hosts listed
/// (`amqp://h1:5672,h2:5672/%2f`); a single node's endpoint as it is.
pub(super) fn list_endpoint(nodes: &[Node]) -> String {
    let Some(first) = nodes.first() else {
        return String::new();
    };
    let hosts: Vec<String> = nodes.iter().map(|n| host_port(&n.uri)).collect();
    let (scheme, vhost) = (&first.uri.scheme, shown_vhost(&first.uri));
    format!("{scheme}://{}/{vhost}", hosts.join(","))
}

/// `host:port`.
fn host_port(uri: &AMQPUri) -> String {
    format!("{}:{}", uri.authority.host, uri.authority.port)
}

fn shown_vhost(uri: &AMQPUri) -> &str {
    if uri.vhost == "/" {
        "%2f"
    } else {
        uri.vhost.as_str()
    }
}

/// Whether an error message quotes part of the user info (user name or password).
fn quotes_userinfo(message: &str, userinfo: &str) -> bool {
    userinfo
        .split(':')
        .any(|part| !part.is_empty() && message.contains(part))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn endpoints(url: &str) -> Vec<String> {
        broker_endpoints(url).unwrap_or_else(|e| panic!("{url}: {e}"))
    }

    fn refused(url: &str) -> String {
        let e = broker_endpoints(url).expect_err(url).to_string();
        assert!(!e.contains("hunter2"), "{url}: {e}");
        assert!(e.contains("amqp://user:password@h1:5672,h2:5672"), "{e}");
        e
    }

    #[test]
    fn one_node_is_the_list_of_one() {
        assert_eq!(
            endpoints("amqp://user:s3cret@broker:5673/%2f"),
            ["amqp://broker:5673/%2f"]
        );
        assert_eq!(endpoints("amqps://u:p@h/prod"), ["amqps://h:5671/prod"]);
        assert_eq!(endpoints("amqp://h"), ["amqp://h:5672/%2f"]);
    }

    #[test]
    fn several_hosts_share_the_credentials_vhost_and_options() {
        let nodes =
            parse("amqp://shoal:hunter2@h1:5672,h2:5673,10.0.0.3/tune?heartbeat=7").unwrap();
        let shown: Vec<&str> = nodes.iter().map(|n| n.endpoint.as_str()).collect();
        assert_eq!(
            shown,
            [
                "amqp://h1:5672/tune",
                "amqp://h2:5673/tune",
                "amqp://10.0.0.3:5672/tune"
            ]
        );
        for n in &nodes {
            assert_eq!(n.uri.authority.userinfo.username, "shoal");
            assert_eq!(n.uri.authority.userinfo.password, "hunter2");
            assert_eq!(n.uri.vhost, "tune");
            assert_eq!(n.uri.query.heartbeat, Some(7));
        }
        assert_eq!(
            list_endpoint(&nodes),
            "amqp://h1:5672,h2:5673,10.0.0.3:5672/tune"
        );
        assert_eq!(list_endpoint(&nodes[..1]), "amqp://h1:5672/tune");
    }

    #[test]
    fn a_password_may_hold_commas_and_at_signs() {
        let nodes = parse("amqp://u:a,b@c@h1,h2:5673/%2f").unwrap();
        assert_eq!(nodes.len(), 2);
        assert_eq!(nodes[1].uri.authority.userinfo.password, "a,b@c");
        assert_eq!(nodes[1].endpoint, "amqp://h2:5673/%2f");
    }

    #[test]
    fn ipv6_literals_are_refused_rather_than_taken_for_localhost() {
        let e = refused("amqp://u:hunter2@h1,[::1]:5673/%2f");
        assert!(e.contains("host 2 of 2 is an IPv6 address"), "{e}");
    }

    #[test]
    fn malformed_lists_are_refused_without_showing_the_value() {
        let e = refused("amqp://u:hunter2@h1,,h3/%2f");
        assert!(e.contains("host 2 of 3 is empty"), "{e}");
        assert!(refused("amqp://u:hunter2@h1,/%2f").contains("host 2 of 2 is empty"));
        assert!(refused("amqp://u:hunter2@h1, h2/%2f").contains("space"));
        assert!(refused("amqp://u:hunter2@h1:0,h2/%2f").contains("port"));
        assert!(refused("amqp://u:hunter2@h1:99999/%2f").contains("the host has a port"));
        assert!(refused("amqp://u:hunter2@h1:x/%2f").contains("port"));
        assert!(refused("amqp://u:hunter2@h1,h1:5672/%2f").contains("repeats"));
        assert!(refused("amqp://u:hunter2@h!/%2f").contains("not a host name"));
        // The other way to write several nodes, and a password that swallowed the `@`.
        let e = refused("amqp://u:hunter2@h1/%2f,amqp://u:hunter2@h2/%2f");
        assert!(e.contains("several URLs"), "{e}");
        assert!(refused("amqp://u:hunter2,h2/%2f").contains("host 1 of 2 has a port"));
        assert!(refused("http://u:hunter2@h/").contains("scheme"));
        assert!(refused("hunter2").contains("not a URL"));
        let many = vec!["h"; MAX_NODES + 1].join(",");
        assert!(refused(&format!("amqp://u:hunter2@{many}/")).contains("at most"));
    }

    #[test]
    fn secrets_in_parser_messages_are_noticed() {
        assert!(quotes_userinfo("bad: s3cret", "u:s3cret"));
        assert!(!quotes_userinfo("bad port", "u:s3cret"));
    }
}
