//! Simulated hosts in network namespaces for `shoal-bench fleet --netns`: each eval worker
//! process gets a namespace of its own, joined to this machine by a veth pair
//! (`10.215.<h>.1` here, `10.215.<h>.2` there), so that its broker and database traffic crosses
//! a network interface as a real host's does instead of loopback. The machine's RabbitMQ and
//! MariaDB listen on loopback only, so the bench relays each host's connections to them from
//! its end of the pair. Needs root and `ip` (iproute2); everything made is removed on drop.

use std::net::{Ipv4Addr, SocketAddr};
use std::process::Command;

use anyhow::Context;

/// What every namespace of the bench is called before its run's pid.
const PREFIX: &str = "shoalfleet";

/// One simulated host's namespace, and the relays of its broker and database connections.
pub struct HostNamespace {
    pub name: String,
    /// This machine's end of the pair: where the host's workers connect.
    pub gateway: Ipv4Addr,
    /// The relays run on a runtime of their own: the bench's own task must not be what a
    /// worker's every byte waits for.
    relays: Option<tokio::runtime::Runtime>,
}

fn ip(args: &[&str]) -> anyhow::Result<()> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .context("running `ip` (iproute2)")?;
    anyhow::ensure!(
        out.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr).trim()
    );
    Ok(())
}

impl HostNamespace {
    /// Namespace `h` of this run, relaying `targets` (the broker's and the database's
    /// addresses on loopback) from the same ports on its gateway address.
    pub fn create(h: u32, targets: &[SocketAddr]) -> anyhow::Result<HostNamespace> {
        anyhow::ensure!(h < 250, "at most 250 namespaced hosts");
        if h == 0 {
            remove_stale();
        }
        let tag = std::process::id();
        let name = format!("{PREFIX}{tag}h{h}");
        let veth = format!("sf{tag}h{h}");
        let gateway = Ipv4Addr::new(10, 215, h as u8, 1);
        let mut ns = HostNamespace {
            name: name.clone(),
            gateway,
            relays: None,
        };
        ip(&["netns", "add", &name])?;
        // From here on, dropping `ns` removes the namespace (and the pair with it).
        let (host_cidr, peer_cidr) = (format!("{gateway}/24"), format!("10.215.{h}.2/24"));
        ip(&[
            "link", "add", &veth, "type", "veth", "peer", "name", "eth0", "netns", &name,
        ])?;
        ip(&["addr", "add", &host_cidr, "dev", &veth])?;
        ip(&["link", "set", &veth, "up"])?;
        ip(&[
            "netns", "exec", &name, "ip", "addr", "add", &peer_cidr, "dev", "eth0",
        ])?;
        ip(&["netns", "exec", &name, "ip", "link", "set", "eth0", "up"])?;
        ip(&["netns", "exec", &name, "ip", "link", "set", "lo", "up"])?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("netns-relay")
            .enable_all()
            .build()?;
        for target in targets {
            let listen = SocketAddr::new(gateway.into(), target.port());
            let listener = std::net::TcpListener::bind(listen)
                .with_context(|| format!("listening on {listen}"))?;
            listener.set_nonblocking(true)?;
            runtime.spawn(relay(listener, *target));
        }
        ns.relays = Some(runtime);
        Ok(ns)
    }

    /// The command prefix that runs a program inside the namespace.
    pub fn wrap(&self) -> Vec<String> {
        ["ip", "netns", "exec", &self.name]
            .iter()
            .map(|s| s.to_string())
            .collect()
    }
}

impl Drop for HostNamespace {
    fn drop(&mut self) {
        if let Some(rt) = self.relays.take() {
            rt.shutdown_background();
        }
        let _ = ip(&["netns", "del", &self.name]);
    }
}

/// Joins each connection accepted by `listener` to a new connection to `target`.
async fn relay(listener: std::net::TcpListener, target: SocketAddr) {
    let Ok(listener) = tokio::net::TcpListener::from_std(listener) else {
        return;
    };
    while let Ok((mut inbound, _)) = listener.accept().await {
        tokio::spawn(async move {
            if let Ok(mut outbound) = tokio::net::TcpStream::connect(target).await {
                let _ = inbound.set_nodelay(true);
                let _ = outbound.set_nodelay(true);
                let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
            }
        });
    }
}

/// Namespaces (`shoalfleet<pid>h<h>`) of bench runs whose process is gone (killed before it
/// could remove them): removed.
fn remove_stale() {
    let Ok(out) = Command::new("ip").args(["netns", "list"]).output() else {
        return;
    };
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let name = line.split_whitespace().next().unwrap_or("");
        let Some(pid) = name
            .strip_prefix(PREFIX)
            .and_then(|rest| rest.split_once('h'))
            .and_then(|(pid, _)| pid.parse::<u32>().ok())
        else {
            continue;
        };
        if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            let _ = ip(&["netns", "del", name]);
        }
    }
}

/// The loopback address a server URL (`amqp://user@127.0.0.1:5672/…`, `mysql://…:3306`)
/// points at, and the URL with its host replaced by `host`.
pub fn relayed(url: &str, host: Ipv4Addr) -> anyhow::Result<(SocketAddr, String)> {
    let (scheme, rest) = url.split_once("://").context("a URL with a scheme")?;
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let (authority, path) = rest.split_at(authority_end);
    let (userinfo, hostport) = match authority.rsplit_once('@') {
        Some((u, hp)) => (Some(u), hp),
        None => (None, authority),
    };
    let addr: SocketAddr = hostport
        .parse()
        .with_context(|| format!("`{hostport}` is not an address with a port"))?;
    anyhow::ensure!(
        addr.ip().is_loopback(),
        "--netns relays servers on loopback only, not {addr}"
    );
    let user = userinfo.map(|u| format!("{u}@")).unwrap_or_default();
    Ok((
        addr,
        format!("{scheme}://{user}{host}:{}{path}", addr.port()),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_pointed_at_the_gateway() {
        let gw = Ipv4Addr::new(10, 215, 3, 1);
        let (addr, url) = relayed("amqp://shoal:pw@127.0.0.1:5672/%2f", gw).unwrap();
        assert_eq!(addr, "127.0.0.1:5672".parse().unwrap());
        assert_eq!(url, "amqp://shoal:pw@10.215.3.1:5672/%2f");
        let (_, url) = relayed("mysql://root@127.0.0.1:3306", gw).unwrap();
        assert_eq!(url, "mysql://root@10.215.3.1:3306");
        assert!(relayed("mysql://db.example:3306", gw).is_err());
        assert!(relayed("mysql://10.0.0.5:3306", gw).is_err());
    }
}
