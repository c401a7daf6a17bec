//! **Hostile peers**, for tests only: HTTP servers on loopback that answer the way a broken or
//! malicious server would — without end, a byte at a time, with pages that never advance, or
//! with one enormous answer — so that each client gpulens has (alert receivers, webhooks, the
//! Kubernetes API, slurmrestd, the OpenID provider, dcgm-exporter) is tested against them.
//! Every answer is generated as it is written: the server itself holds nothing.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// How a hostile peer answers every request.
#[derive(Debug, Clone)]
pub enum Behaviour {
    /// `status` with a chunked body of `filler` repeated without end.
    Endless { status: u16, filler: &'static str },
    /// `status` with a JSON document that opens `prefix`, repeats `item` (comma-separated)
    /// until `bytes` are written, and closes with `suffix`: one enormous, well-formed answer.
    Huge {
        status: u16,
        prefix: &'static str,
        item: String,
        suffix: &'static str,
        bytes: usize,
    },
    /// 200 with a `Content-Length` of a megabyte, sent one byte every `every`.
    Trickle { every: Duration },
    /// 200 with this body, the same every time (a page that never advances, say).
    Fixed { body: String },
    /// 307 to `to`.
    Redirect { to: String },
}

/// A running hostile peer.
#[derive(Debug, Clone)]
pub struct Hostile {
    pub url: String,
    requests: Arc<AtomicUsize>,
}

impl Hostile {
    /// Starts a peer on a free loopback port.
    pub async fn start(behaviour: Behaviour) -> Hostile {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind a loopback port");
        let url = format!("http://{}", listener.local_addr().expect("local address"));
        let requests = Arc::new(AtomicUsize::new(0));
        let count = requests.clone();
        tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                let b = behaviour.clone();
                let count = count.clone();
                tokio::spawn(async move {
                    let _ = serve(socket, b, count).await;
                });
            }
        });
        Hostile { url, requests }
    }

    /// Requests answered (or being answered) so far.
    pub fn requests(&self) -> usize {
        self.requests.load(Ordering::Relaxed)
    }
}

/// Answers the requests of one connection until it closes.
async fn serve(
    mut socket: tokio::net::TcpStream,
    b: Behaviour,
    count: Arc<AtomicUsize>,
) -> std::io::Result<()> {
    while read_request(&mut socket).await? {
        count.fetch_add(1, Ordering::Relaxed);
        answer(&mut socket, &b).await?;
    }
    Ok(())
}

/// Reads one request (its head, and a body of the length it declares); false at the end of
/// the connection.
async fn read_request(socket: &mut tokio::net::TcpStream) -> std::io::Result<bool> {
    let mut head = Vec::new();
    let mut buf = [0u8; 4096];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = socket.read(&mut buf).await?;
        if n == 0 || head.len() > 1 << 20 {
            return Ok(false);
        }
        head.extend_from_slice(&buf[..n]);
    }
    let text = String::from_utf8_lossy(&head).to_lowercase();
    if let Some(len) = text
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse::<usize>().ok())
    {
        let start = head.windows(4).position(|w| w == b"\r\n\r\n").unwrap_or(0) + 4;
        let mut left = len.saturating_sub(head.len() - start);
        while left > 0 {
            let n = socket.read(&mut buf[..left.min(4096)]).await?;
            if n == 0 {
                return Ok(false);
            }
            left -= n;
        }
    }
    Ok(true)
}

/// Answers one request as `b` says.
async fn answer(socket: &mut tokio::net::TcpStream, b: &Behaviour) -> std::io::Result<()> {
    {
        match b {
            Behaviour::Endless { status, filler } => {
                socket
                    .write_all(
                        format!(
                            "HTTP/1.1 {status} Hostile\r\ncontent-type: application/json\r\n\
                             transfer-encoding: chunked\r\n\r\n"
                        )
                        .as_bytes(),
                    )
                    .await?;
                let chunk = filler.repeat((64 * 1024 / filler.len().max(1)).max(1));
                let framed = format!("{:x}\r\n{chunk}\r\n", chunk.len());
                loop {
                    socket.write_all(framed.as_bytes()).await?;
                }
            }
            Behaviour::Huge {
                status,
                prefix,
                item,
                suffix,
                bytes,
            } => {
                let n = (bytes / (item.len() + 1)).max(1);
                let len = prefix.len() + n * item.len() + (n - 1) + suffix.len();
                socket
                    .write_all(
                        format!(
                            "HTTP/1.1 {status} Hostile\r\ncontent-type: application/json\r\n\
                             content-length: {len}\r\n\r\n{prefix}"
                        )
                        .as_bytes(),
                    )
                    .await?;
                let per_write = (64 * 1024 / (item.len() + 1)).max(1);
                let mut written = 0;
                while written < n {
                    let k = per_write.min(n - written);
                    let mut block = String::with_capacity(k * (item.len() + 1));
                    for i in 0..k {
                        if written + i > 0 {
                            block.push(',');
                        }
                        block.push_str(item);
                    }
                    socket.write_all(block.as_bytes()).await?;
                    written += k;
                }
                socket.write_all(suffix.as_bytes()).await?;
            }
            Behaviour::Trickle { every } => {
                socket
                    .write_all(
                        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\
                          content-length: 1048576\r\n\r\n",
                    )
                    .await?;
                loop {
                    socket.write_all(b" ").await?;
                    tokio::time::sleep(*every).await;
                }
            }
            Behaviour::Redirect { to } => {
                socket
                    .write_all(
                        format!(
                            "HTTP/1.1 307 Temporary Redirect\r\nlocation: {to}\r\n\
                             content-length: 0\r\n\r\n"
                        )
                        .as_bytes(),
                    )
                    .await?;
            }
            Behaviour::Fixed { body } => {
                socket
                    .write_all(
                        format!(
                            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\
                             content-length: {}\r\n\r\n{body}",
                            body.len()
                        )
                        .as_bytes(),
                    )
                    .await?;
            }
        }
    }
    Ok(())
}
