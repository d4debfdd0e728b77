//! The `/metrics` endpoint: axum over HTTP/1, read-only, one route. Anything else is a 404.
//!
//! Binding is the caller's decision (`--metrics-addr`, loopback unless told otherwise); this
//! module only refuses to start silently: a port in use is an error that names the address.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;

use axum::extract::State;
use axum::http::header::CONTENT_TYPE;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;

use crate::metrics;

/// What a scrape refreshes first: the readings only the store or the broker has.
pub type Collect = Arc<dyn Fn() -> Pin<Box<dyn Future<Output = ()> + Send>> + Send + Sync>;

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("metrics: cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
}

/// A running endpoint; stops when [`MetricsServer::stop`] is called or the value is dropped.
pub struct MetricsServer {
    /// The address it listens on (the port chosen, when asked for port 0).
    pub addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl MetricsServer {
    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// Serves `/metrics` on `addr` from a task of the current tokio runtime.
pub async fn serve(
    addr: SocketAddr,
    collect: Option<Collect>,
) -> Result<MetricsServer, ServeError> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| ServeError::Bind { addr, source })?;
    let addr = listener
        .local_addr()
        .map_err(|source| ServeError::Bind { addr, source })?;
    let app = Router::new()
        .route("/metrics", get(scrape))
        .with_state(collect);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        let shutdown = async {
            let _ = stopped.await;
        };
        if let Err(e) = axum::serve(listener, app)
            .with_graceful_shutdown(shutdown)
            .await
        {
            tracing::warn!(error = %e, "the metrics endpoint stopped");
        }
    });
    tracing::info!(%addr, "serving metrics on /metrics");
    Ok(MetricsServer {
        addr,
        stop: Some(stop),
        task: Some(task),
    })
}

async fn scrape(
    State(collect): State<Option<Collect>>,
    headers: axum::http::HeaderMap,
) -> impl IntoResponse {
    if let Some(collect) = &collect {
        collect().await;
    }
    let accept = headers
        .get(axum::http::header::ACCEPT)
        .and_then(|v| v.to_str().ok());
    let (content_type, body) = metrics().scrape(accept);
    ([(CONTENT_TYPE, content_type)], body)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Exposition;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    async fn get(addr: SocketAddr, path: &str) -> String {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        s.write_all(
            format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .await
        .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        out
    }

    #[tokio::test]
    async fn a_scrape_refreshes_the_collected_readings_first() {
        let collect: Collect = Arc::new(|| {
            Box::pin(async {
                metrics().set_queue_depths([("t.compile.x86_64".to_string(), 7)]);
            })
        });
        let server = serve("127.0.0.1:0".parse().unwrap(), Some(collect))
            .await
            .unwrap();
        let reply = get(server.addr, "/metrics").await;
        assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
        assert!(
            reply.contains(Exposition::Text.content_type()),
            "no Accept header, the classic format: {reply}"
        );
        assert!(
            reply.contains("shoal_queue_messages{queue=\"t.compile.x86_64\"} 7"),
            "{reply}"
        );
        assert!(get(server.addr, "/other").await.starts_with("HTTP/1.1 404"));
        let taken = server.addr;
        // A port in use is an error naming it.
        match serve(taken, None).await {
            Err(e) => assert!(e.to_string().contains(&taken.to_string()), "{e}"),
            Ok(_) => panic!("bound twice"),
        }
        server.stop().await;
    }
}
