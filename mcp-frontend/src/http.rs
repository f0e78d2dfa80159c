//! `patchdiff-mcp serve --listen ADDR`: the same server over Streamable HTTP, at `/mcp`, in both
//! eras (docs/http.md, docs/eras.md). Each POST is one JSON-RPC message, answered with one JSON
//! response, without sessions; the one exception is 2026-07-28 `subscriptions/listen` in the
//! `extended` profile, answered with an SSE stream of the change feed (issue 19 item 2, see
//! [`listen`]). A bearer token from the token file names the PostgreSQL role every call of the
//! request runs as (`SET ROLE` on a pooled connection of the login role), so the tenancy rules
//! hold over HTTP exactly as over SQL.

use crate::catalog::REVISIONS;
use crate::config::{Config, Profile};
use crate::database::{Db, RoleError};
use crate::modern::{self, MODERN};
use crate::rpc::{
    self, INTERNAL_ERROR, INVALID_PARAMS, INVALID_REQUEST, Incoming, METHOD_NOT_FOUND,
};
use crate::server::{self, Server, Subscriptions};
use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, watch};

/// The tokens of the token file, each with the role its requests run as.
pub struct Tokens {
    entries: Vec<(Vec<u8>, String)>,
}

/// Shortest token accepted: a token is a password, and a short one can be guessed.
pub const MIN_TOKEN_BYTES: usize = 16;

impl Tokens {
    /// Reads the token file: one `TOKEN ROLE` pair per line, `#` comments and blank lines
    /// ignored. Refused unless only its owner may read it (mode 0600 or stricter), since every
    /// token in it is a credential.
    pub fn load(path: &Path) -> Result<Tokens, String> {
        use std::os::unix::fs::PermissionsExt;
        let shown = path.display();
        let meta = std::fs::metadata(path)
            .map_err(|e| format!("cannot read the token file {shown}: {e}"))?;
        let mode = meta.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            return Err(format!(
                "the token file {shown} has mode {mode:03o}: it holds credentials, so group and others must have no access (chmod 600 {shown})"
            ));
        }
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read the token file {shown}: {e}"))?;
        Tokens::parse(&text).map_err(|e| format!("the token file {shown}: {e}"))
    }

    pub fn parse(text: &str) -> Result<Tokens, String> {
        let mut entries: Vec<(Vec<u8>, String)> = Vec::new();
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let fields: Vec<&str> = line.split_whitespace().collect();
            let [token, role] = fields[..] else {
                return Err(format!("line {}: expected `TOKEN ROLE`", n + 1));
            };
            if token.len() < MIN_TOKEN_BYTES || !token.bytes().all(|b| b.is_ascii_graphic()) {
                return Err(format!(
                    "line {}: a token is at least {MIN_TOKEN_BYTES} visible ASCII characters",
                    n + 1
                ));
            }
            if role.len() > 63 || role.contains('\0') {
                return Err(format!("line {}: {role:?} is not a role name", n + 1));
            }
            if entries.iter().any(|(t, _)| t == token.as_bytes()) {
                return Err(format!("line {}: the same token twice", n + 1));
            }
            entries.push((token.as_bytes().to_vec(), role.to_owned()));
        }
        if entries.is_empty() {
            return Err("no tokens".into());
        }
        Ok(Tokens { entries })
    }

    /// The roles the tokens name, each once.
    pub fn roles(&self) -> std::collections::BTreeSet<&str> {
        self.entries.iter().map(|(_, role)| role.as_str()).collect()
    }

    /// The role of a presented token. Every token is compared, each in time that does not depend
    /// on where the bytes differ, so the answer's timing tells nothing about any token.
    pub fn role_of(&self, presented: &[u8]) -> Option<&str> {
        let mut found = None;
        for (token, role) in &self.entries {
            if constant_time_eq(token, presented) {
                found = Some(role.as_str());
            }
        }
        found
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    let mut diff = a.len() ^ b.len();
    for i in 0..a.len().max(b.len()) {
        let x = a.get(i).copied().unwrap_or(0);
        let y = b.get(i).copied().unwrap_or(0);
        diff |= usize::from(x ^ y);
    }
    std::hint::black_box(diff) == 0
}

/// How the endpoint is set up (docs/http.md).
pub struct Options {
    pub listen: SocketAddr,
    pub tokens: Tokens,
    /// Calls served at once (each on its own pooled connection).
    pub connections: usize,
    /// How long a request may wait for a free connection before it is answered 503.
    pub queue_wait: Duration,
    /// `Origin` values allowed besides loopback ones.
    pub allowed_origins: Vec<String>,
    /// `subscriptions/listen` streams open at once, in all ([`MAX_STREAMS`] by default).
    pub max_streams: usize,
    /// ... and of one role ([`MAX_STREAMS_PER_ROLE`] by default).
    pub max_streams_per_role: usize,
    /// How long a graceful shutdown waits for the calls in flight ([`SHUTDOWN_GRACE`] by
    /// default) before the server exits anyway.
    pub shutdown_grace: Duration,
    /// HTTP connections open at once ([`MAX_HTTP_CONNECTIONS`] by default); one more is
    /// answered 503 and closed.
    pub max_http_connections: usize,
    /// ... and from one peer address ([`MAX_HTTP_CONNECTIONS_PER_PEER`] by default).
    pub max_http_connections_per_peer: usize,
    /// How long a client may take to send a request's headers, to send its body, and to start
    /// its next request on a kept-alive connection ([`REQUEST_TIMEOUT`] by default).
    pub request_timeout: Duration,
}

/// Default of `--max-http-connections`. Without a cap, connections that never finish a request
/// held the process's file descriptors until a legitimate client could no longer connect.
pub const MAX_HTTP_CONNECTIONS: usize = 256;

/// Default of `--max-http-connections-per-peer`. The cap on all connections is counted before a
/// request is read, so before any token: without a cap per peer, one client with no token held
/// every place (300 connections that trickle their headers) and every other client was refused.
/// Behind a reverse proxy every connection comes from the proxy's address: raise it to
/// `--max-http-connections` there, and cap clients at the proxy (docs/http.md).
pub const MAX_HTTP_CONNECTIONS_PER_PEER: usize = 32;

/// Default of `--request-timeout`: the headers, the body, and the idle time before a kept-alive
/// connection's next request each get this long; then the connection is closed (or the call is
/// answered 408). A client that sends a byte every few seconds no longer holds its connection,
/// nor the memory of a body it never finishes.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// Request bodies being received at once may hold at most this many times the largest body
/// (`PATCHDIFF_MCP_MAX_LINE_BYTES`) in memory; a request that would need more waits up to the
/// queue wait (`--queue-ms`) for room, then is answered 503. Each body reserves its declared
/// `Content-Length` (the largest body when it declares none) before a byte of it is read.
pub const BODY_BUDGET_FACTOR: usize = 4;

/// An answer longer than this holds room in the answer budget (as much room as the bodies have,
/// [`BODY_BUDGET_FACTOR`] times the largest body) until it has been handed to its connection
/// whole. An answer is built whole and held until its client reads it: a tenant that asked for
/// large exports on many connections and read none of them held 1.7 GB of the process with 64.
/// A read's answer that finds no room within the queue wait is dropped and answered 503 (nothing
/// was written, the client asks again); a write's is sent anyway.
pub const LARGE_ANSWER_BYTES: usize = 1 << 20;

/// Default cap on the `subscriptions/listen` streams open at once (`--max-streams`). The
/// streams share the endpoint's listening sessions (one per database, `feed::Hub`); each
/// update's access check borrows a connection of the `--connections` pool.
pub const MAX_STREAMS: usize = 64;

/// Default of `--shutdown-grace`: after SIGTERM, the calls in flight get this long to finish.
/// A client that never finishes sending its request (or never reads its response) cannot keep
/// the server from stopping beyond it.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(30);

/// Default cap on one role's open streams (`--max-streams-per-role`): one tenant cannot take
/// every stream of the server.
pub const MAX_STREAMS_PER_ROLE: usize = 16;

/// An SSE comment is written on every stream this often: a proxy does not time the stream out,
/// and a client that vanished without closing its connection is noticed when the writes fail.
pub const KEEPALIVE: Duration = Duration::from_secs(15);

/// SSE events of one stream waiting to be written to a client that is slow to read. When full,
/// the stream waits, and its listening session's own queue (then a resync) absorbs the rest.
const STREAM_QUEUE: usize = 64;

struct Shared {
    config: Config,
    /// The tool list, computed once from the first connection's database.
    tools: Arc<Vec<crate::catalog::Declaration>>,
    tokens: Tokens,
    pool: Mutex<Vec<Db>>,
    /// One per call running on a pooled connection ([`Options::connections`]). Held by the
    /// call's own task until its connection is back in the pool.
    permits: Arc<Semaphore>,
    /// Each token role's share of [`Shared::permits`]: half of them when the token file names
    /// more than one role, all of them otherwise. A call takes its role's before the server's.
    role_permits: HashMap<String, Arc<Semaphore>>,
    queue_wait: Duration,
    allowed_origins: Vec<String>,
    /// Bound to a loopback address: `Host` must name loopback too (DNS rebinding).
    loopback: bool,
    /// Open `subscriptions/listen` streams per role (their sum is the server's count).
    streams: Mutex<HashMap<String, usize>>,
    max_streams: usize,
    max_streams_per_role: usize,
    /// Becomes true when the server stops: every stream ends.
    stopping: watch::Receiver<bool>,
    /// The change feed's listening sessions, one per database, shared by every open stream.
    feed: crate::feed::HubSlot,
    /// See [`Options::request_timeout`].
    request_timeout: Duration,
    /// Room for the bodies being received, in KiB ([`BODY_BUDGET_FACTOR`]). A body's room is
    /// held until its call has ended, whether its client is still there or not.
    body_budget: Arc<Semaphore>,
    /// Each token role's share of [`Shared::body_budget`]: half of it (two of the largest
    /// bodies) when the token file names more than one role, all of it otherwise.
    role_body_budgets: HashMap<String, Arc<Semaphore>>,
    /// Room for the large answers not yet handed to their connections, in KiB
    /// ([`LARGE_ANSWER_BYTES`]), as much as [`Shared::body_budget`]'s.
    answer_budget: Arc<Semaphore>,
    answer_budget_kib: usize,
    /// Each token role's share of [`Shared::answer_budget`], as for bodies: half of it when the
    /// token file names more than one role (helper-96: one role's unread answers held all of
    /// it, and every other role's large reads were dropped and answered `503`), and its size.
    role_answer_budgets: HashMap<String, Arc<Semaphore>>,
    role_answer_kib: usize,
    /// The calls running in tasks of their own ([`call`]), which a graceful shutdown waits for
    /// as it waits for connections: a call whose client hung up has no connection left.
    in_flight: Arc<InFlight>,
}

/// How long what this server sent on a connection may stay unacknowledged before the kernel
/// closes it (TCP_USER_TIMEOUT). A client that vanished without closing (its host gone, a
/// network cut) is then noticed within this, plus at most one [`KEEPALIVE`] on a listen stream,
/// which frees the stream's place; the system's default (`tcp_retries2`) is about 15 minutes.
pub const UNACKNOWLEDGED: Duration = Duration::from_secs(60);

/// Sets TCP_USER_TIMEOUT on an accepted connection.
fn give_up_unacknowledged(tcp: &tokio::net::TcpStream, after: Duration) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let ms = libc::c_uint::try_from(after.as_millis()).unwrap_or(libc::c_uint::MAX);
    // SAFETY: the descriptor is the open socket's for the whole call; the option's value is a
    // c_uint, passed by address with its size.
    let rc = unsafe {
        libc::setsockopt(
            tcp.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_USER_TIMEOUT,
            (&raw const ms).cast::<libc::c_void>(),
            std::mem::size_of_val(&ms) as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Resolves once the client has closed its side of `tcp` or reset it, as the kernel tells
/// (EPOLLRDHUP, EPOLLHUP, EPOLLERR), watched on a descriptor of its own: hyper sees a close only
/// while it reads, and it stops reading a connection that has sent more than the request it is
/// answering, so a call followed by a byte (a pipelined request, a stray `\r\n`) was not
/// cancelled when its client went, and a listen stream so followed ended only at its next
/// keep-alive, 15 to 30 s later (helper-115). Never resolves if the watch cannot be set up.
fn closed_by_client(
    tcp: &tokio::net::TcpStream,
) -> impl std::future::Future<Output = ()> + Send + 'static {
    use std::os::fd::AsFd;
    let watch = tcp.as_fd().try_clone_to_owned().and_then(|fd| {
        // SAFETY: `fd` is an open descriptor, owned by the AsyncFd from here on (closed when it is
        // dropped), and `as_raw_fd` of an OwnedFd always returns that same descriptor.
        unsafe {
            tokio::io::unix::AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE)
        }
        .map_err(|e| std::io::Error::other(e.to_string()))
    });
    async move {
        let watch = match watch {
            Ok(w) => w,
            Err(e) => {
                tracing::warn!("cannot watch a connection for its client's close: {e}");
                return std::future::pending().await;
            }
        };
        loop {
            let Ok(mut ready) = watch.readable().await else {
                return std::future::pending().await;
            };
            if ready.ready().is_read_closed() || ready.ready().is_error() {
                return;
            }
            // Bytes to read are hyper's; this waits for the next event.
            ready.clear_ready();
        }
    }
}

/// Serves until SIGTERM or SIGINT, then finishes the calls in flight and returns.
pub async fn serve(config: Config, first: Db, options: Options) -> Result<(), String> {
    let listener = tokio::net::TcpListener::bind(options.listen)
        .await
        .map_err(|e| format!("cannot listen on {}: {e}", options.listen))?;
    let bound = listener.local_addr().map_err(|e| e.to_string())?;
    let tools = Arc::new(crate::server::active_tools(&config, &|name| {
        first.functions.contains(name)
    }));
    let (stop, stopping) = watch::channel(false);
    let mut stopped = stopping.clone();
    let budget_kib = (BODY_BUDGET_FACTOR * config.max_line_bytes.max(1)).div_ceil(1024);
    let connections = options.connections.max(1);
    let roles = options.tokens.roles();
    let role_permits = role_shares(&roles, connections, (connections / 2).max(1));
    let budget_kib = budget_kib.min(Semaphore::MAX_PERMITS);
    let role_body_budgets = role_shares(&roles, budget_kib, budget_kib / 2);
    let role_answer_budgets = role_shares(&roles, budget_kib, budget_kib / 2);
    let role_answer_kib = if roles.len() > 1 {
        budget_kib / 2
    } else {
        budget_kib
    };
    let shared = Arc::new(Shared {
        config,
        tools,
        tokens: options.tokens,
        pool: Mutex::new(vec![first]),
        permits: Arc::new(Semaphore::new(connections)),
        role_permits,
        queue_wait: options.queue_wait,
        allowed_origins: options.allowed_origins,
        loopback: bound.ip().is_loopback(),
        streams: Mutex::new(HashMap::new()),
        max_streams: options.max_streams.max(1),
        max_streams_per_role: options.max_streams_per_role.max(1),
        stopping,
        feed: Default::default(),
        request_timeout: options.request_timeout,
        body_budget: Arc::new(Semaphore::new(budget_kib)),
        role_body_budgets,
        answer_budget: Arc::new(Semaphore::new(budget_kib)),
        answer_budget_kib: budget_kib,
        role_answer_budgets,
        role_answer_kib,
        in_flight: Arc::default(),
    });
    let in_flight = shared.in_flight.clone();
    let app = Router::new()
        .route("/mcp", post(handle).get(not_allowed).delete(not_allowed))
        .with_state(shared);
    // Tests and scripts read the address from this line (port 0 picks a free one).
    eprintln!("patchdiff-mcp: listening on http://{bound}/mcp");
    tracing::info!(%bound, "listening");
    let mut http = hyper::server::conn::http1::Builder::new();
    // A client that closes its side of the connection is gone (hyper's default, no half close):
    // that is how a call's or a stream's hang-up is seen at once. A client that shuts down its
    // sending side after its request (`nc -N`) therefore gets no answer (docs/http.md).
    http.timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(options.request_timeout);
    let open = Arc::new(Semaphore::new(options.max_http_connections.max(1)));
    let peers = Peers::new(options.max_http_connections_per_peer.max(1));
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let signal = shutdown(stop);
    tokio::pin!(signal);
    loop {
        let (tcp, peer) = tokio::select! {
            () = &mut signal => break,
            accepted = listener.accept() => match accepted {
                Ok((tcp, peer)) => (tcp, peer.ip()),
                Err(e) => {
                    // Out of descriptors, say: the connections that hold them end in time.
                    tracing::warn!("accepting a connection: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        if let Err(e) = give_up_unacknowledged(&tcp, UNACKNOWLEDGED) {
            tracing::warn!("cannot set TCP_USER_TIMEOUT on a connection: {e}");
        }
        let Some(from_peer) = peers.take(peer) else {
            tracing::warn!(
                %peer,
                cap = options.max_http_connections_per_peer,
                "a connection over --max-http-connections-per-peer was refused"
            );
            tokio::spawn(refuse_connection(
                tcp,
                format!(
                    "this server has {} HTTP connections open from your address (--max-http-connections-per-peer); try again shortly\n",
                    options.max_http_connections_per_peer
                ),
            ));
            continue;
        };
        let Ok(place) = open.clone().try_acquire_owned() else {
            tracing::warn!(
                cap = options.max_http_connections,
                "a connection over --max-http-connections was refused"
            );
            tokio::spawn(refuse_connection(
                tcp,
                format!(
                    "this server has {} HTTP connections open (--max-http-connections); try again shortly\n",
                    options.max_http_connections
                ),
            ));
            continue;
        };
        let app = app.clone();
        let service = hyper::service::service_fn(move |request: Request<hyper::body::Incoming>| {
            let mut app = app.clone();
            tower_service::Service::call(&mut app, request.map(Body::new))
        });
        let closed = closed_by_client(&tcp);
        let connection =
            graceful.watch(http.serve_connection(hyper_util::rt::TokioIo::new(tcp), service));
        tokio::spawn(async move {
            // A client that closed its side is gone: the connection is dropped with what it
            // serves (a 2026-07-28 call is then cancelled, a stream ends).
            tokio::select! {
                ended = connection => {
                    if let Err(e) = ended {
                        tracing::debug!("connection ended: {e}");
                    }
                }
                () = closed => tracing::debug!("the client closed the connection"),
            }
            drop((place, from_peer));
        });
    }
    drop(listener);
    tokio::select! {
        () = async {
            graceful.shutdown().await;
            in_flight.finished().await;
        } => {
            tracing::info!("stopped: every call in flight finished");
        }
        () = async {
            let _ = stopped.wait_for(|s| *s).await;
            tokio::time::sleep(options.shutdown_grace).await;
        } => {
            // Their connections close with the process. A statement already running may still
            // commit (the backend notices the closed connection when it answers); what a call
            // committed is in the log, where a keyed resend recovers it.
            tracing::warn!(
                calls = in_flight.count(),
                "stopped: calls still in flight {:?} after the shutdown began were abandoned",
                options.shutdown_grace
            );
        }
    }
    Ok(())
}

/// The open connections of each peer address, capped ([`Options::max_http_connections_per_peer`]).
#[derive(Clone)]
struct Peers {
    open: Arc<Mutex<HashMap<std::net::IpAddr, usize>>>,
    cap: usize,
}

/// A connection's place among its peer's, given back when the connection ends.
struct PeerPlace {
    peers: Peers,
    peer: std::net::IpAddr,
}

impl Peers {
    fn new(cap: usize) -> Peers {
        Peers {
            open: Arc::default(),
            cap,
        }
    }

    /// A place for one more connection from `peer` ([`peer_key`]), or `None` at the cap.
    fn take(&self, peer: std::net::IpAddr) -> Option<PeerPlace> {
        let peer = peer_key(peer);
        let mut open = self.open.lock().expect("the peers lock");
        let n = open.entry(peer).or_default();
        if *n >= self.cap {
            return None;
        }
        *n += 1;
        Some(PeerPlace {
            peers: self.clone(),
            peer,
        })
    }
}

/// The address a connection is counted under: an IPv4-mapped IPv6 address as its IPv4 one, every
/// loopback address (127.0.0.0/8, ::1) as one, and an IPv6 address by its /64 (one host's usual
/// share). Counted by exact address, one local process took every place from 127.0.0.2,
/// 127.0.0.3, ... (helper-43).
fn peer_key(peer: std::net::IpAddr) -> std::net::IpAddr {
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
    let peer = match peer {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(peer, IpAddr::V4),
        v4 => v4,
    };
    match peer {
        p if p.is_loopback() => IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(v6) => {
            let s = v6.segments();
            IpAddr::V6(Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0))
        }
        v4 => v4,
    }
}

impl Drop for PeerPlace {
    fn drop(&mut self) {
        give_back(
            &mut self.peers.open.lock().expect("the peers lock"),
            &self.peer,
        );
    }
}

/// Gives back one place of `key` among those counted in `open` (a peer's connections, a role's
/// streams), forgetting a key that holds none.
fn give_back<K: std::hash::Hash + Eq>(open: &mut HashMap<K, usize>, key: &K) {
    if let Some(n) = open.get_mut(key) {
        *n -= 1;
        if *n == 0 {
            open.remove(key);
        }
    }
}

/// Each token role's share of a server's `total`: `half` when the token file names more than one
/// role, all of it otherwise.
fn role_shares(
    roles: &std::collections::BTreeSet<&str>,
    total: usize,
    half: usize,
) -> HashMap<String, Arc<Semaphore>> {
    let share = if roles.len() > 1 { half } else { total };
    roles
        .iter()
        .map(|r| (r.to_string(), Arc::new(Semaphore::new(share))))
        .collect()
}

/// The calls running in tasks of their own, counted so that a shutdown can wait for them.
#[derive(Default)]
struct InFlight {
    count: std::sync::atomic::AtomicUsize,
    changed: tokio::sync::Notify,
}

/// One call counted in [`InFlight`] for as long as it lives.
struct Running(Arc<InFlight>);

impl InFlight {
    fn start(self: &Arc<Self>) -> Running {
        self.count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Running(self.clone())
    }

    fn count(&self) -> usize {
        self.count.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Returns once no call is running.
    async fn finished(&self) {
        loop {
            let changed = self.changed.notified();
            if self.count() == 0 {
                return;
            }
            changed.await;
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.0
            .count
            .fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
        self.0.changed.notify_waiters();
    }
}

/// A connection over a cap: a 503 that says which (`body`), and the connection closed, without
/// reading the request (a client that does not read the answer within a second is closed on
/// anyway).
async fn refuse_connection(mut tcp: tokio::net::TcpStream, body: String) {
    use tokio::io::AsyncWriteExt;
    let response = format!(
        "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nRetry-After: 1\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = tokio::time::timeout(Duration::from_secs(1), async {
        let _ = tcp.write_all(response.as_bytes()).await;
        let _ = tcp.shutdown().await;
    })
    .await;
}

async fn shutdown(stop: watch::Sender<bool>) {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("installing the SIGTERM handler");
    tokio::select! {
        _ = term.recv() => {},
        _ = tokio::signal::ctrl_c() => {},
    }
    tracing::info!(
        "shutting down: no new connections, finishing the calls in flight, ending the listen streams"
    );
    // The streams end (each with its final response), so their responses finish too.
    stop.send_replace(true);
}

/// GET (a standalone SSE stream) and DELETE (ending a session) do not exist here: no session,
/// no server-initiated messages outside the response to a request.
async fn not_allowed() -> Response {
    let mut r = (
        StatusCode::METHOD_NOT_ALLOWED,
        "patchdiff-mcp serves MCP with POST only: it keeps no sessions; the change feed is a 2026-07-28 subscriptions/listen POST, answered with an SSE stream\n",
    )
        .into_response();
    r.headers_mut()
        .insert(header::ALLOW, HeaderValue::from_static("POST"));
    r
}

fn plain(status: StatusCode, text: &str) -> Response {
    (status, format!("{text}\n")).into_response()
}

fn json(status: StatusCode, line: String) -> Response {
    let mut r = (status, line).into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

/// A large answer ([`LARGE_ANSWER_BYTES`]), handed to its connection in 64 KiB slices of one
/// buffer, holding `room` in the answer budget until the last slice is taken: hyper takes the
/// next slice only once it has written most of the ones before, so the room is held for as long
/// as the answer is, give or take hyper's own write buffer.
fn held_json<R: Send + 'static>(status: StatusCode, line: String, room: Option<R>) -> Response {
    const SLICE: usize = 64 * 1024;
    let bytes = Bytes::from(line);
    let length = bytes.len();
    let slices = futures_util::stream::unfold((bytes, room), |(mut rest, room)| async move {
        if rest.is_empty() {
            return None;
        }
        let slice = rest.split_to(rest.len().min(SLICE));
        Some((Ok::<_, std::convert::Infallible>(slice), (rest, room)))
    });
    let mut r = Body::from_stream(slices).into_response();
    *r.status_mut() = status;
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    h.insert(header::CONTENT_LENGTH, HeaderValue::from(length));
    r
}

fn header_str<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// Why `header_str` found no `shown` header: it is absent (`absent`), or it was sent with bytes
/// that are not visible ASCII, which is said as such rather than as a missing header.
fn no_header_text(headers: &HeaderMap, shown: &str, absent: String) -> String {
    if headers.contains_key(shown) {
        format!("the {shown} header is not visible ASCII text")
    } else {
        absent
    }
}

/// `localhost`, `127.0.0.1` or `[::1]`, with or without a port (digits only): nothing else
/// after the name, so `localhost:1@evil.example` or `localhost:evil.example` is not loopback.
fn is_loopback_host(host: &str) -> bool {
    let (name, port) = match host.strip_prefix('[') {
        Some(rest) => match rest.split_once(']') {
            Some((name, "")) => (name, None),
            Some((name, after)) => match after.strip_prefix(':') {
                Some(port) => (name, Some(port)),
                None => return false,
            },
            None => return false,
        },
        None => match host.split_once(':') {
            Some((name, port)) => (name, Some(port)),
            None => (host, None),
        },
    };
    let port_ok = port.is_none_or(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
    // Host names are case-insensitive (RFC 9110 4.2.3): `LOCALHOST` is loopback too. Every
    // address of 127.0.0.0/8 is loopback, as `::1` in any spelling is (helper-92: a server bound
    // to 127.0.0.2 refused its own address); an address literal can name no other host, so
    // DNS rebinding cannot use one.
    let literal = name
        .parse::<std::net::IpAddr>()
        .is_ok_and(|ip| ip.is_loopback());
    port_ok && (name.eq_ignore_ascii_case("localhost") || literal)
}

fn origin_allowed(shared: &Shared, origin: &str) -> bool {
    if shared.allowed_origins.iter().any(|o| o == origin) {
        return true;
    }
    match origin.split_once("://") {
        Some(("http" | "https", host)) => is_loopback_host(host),
        _ => false,
    }
}

#[derive(Deserialize)]
struct Params<'a> {
    #[serde(borrow, default)]
    name: Option<&'a RawValue>,
    /// `resources/read`'s resource (the `extended` profile), which `Mcp-Name` carries too.
    #[serde(borrow, default)]
    uri: Option<&'a RawValue>,
}

/// A value of `Mcp-Name` as the body would hold it: plain, or `=?base64?...?=`.
fn header_value(raw: &str) -> Option<String> {
    match raw
        .strip_prefix("=?base64?")
        .and_then(|r| r.strip_suffix("?="))
    {
        Some(b64) => String::from_utf8(base64_decode(b64)?).ok(),
        None => Some(raw.to_owned()),
    }
}

fn base64_decode(s: &str) -> Option<Vec<u8>> {
    let value = |c: u8| -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        } as u32)
    };
    let s = s.trim_end_matches('=').as_bytes();
    let mut out = Vec::with_capacity(s.len() * 3 / 4);
    for chunk in s.chunks(4) {
        let mut acc = 0u32;
        for (i, &c) in chunk.iter().enumerate() {
            acc |= value(c)? << (18 - 6 * i);
        }
        let bytes = acc.to_be_bytes();
        let n = match chunk.len() {
            4 => 3,
            3 => 2,
            2 => 1,
            _ => return None,
        };
        out.extend_from_slice(&bytes[1..1 + n]);
    }
    Some(out)
}

/// A JSON-RPC error line with the HTTP status the era gives it.
fn refusal(
    status: StatusCode,
    id: &Value,
    code: i64,
    message: &str,
    data: Option<Value>,
) -> Response {
    json(status, rpc::error_line_with_data(id, code, message, data))
}

/// The 2026-07-28 transport's header rules (streamable-http "Protocol Version Header",
/// "Standard Request Headers", "Server Validation"): `Mcp-Method` always, `Mcp-Name` for
/// `tools/call`, each equal to the body's value, and the version header equal to the body's
/// `_meta` version when the body has one. -32020 HeaderMismatch with 400 otherwise.
fn modern_headers(
    headers: &HeaderMap,
    method: &str,
    params: Option<&RawValue>,
) -> Result<(), String> {
    let Some(sent) = header_str(headers, "mcp-method") else {
        return Err(no_header_text(
            headers,
            "Mcp-Method",
            "the Mcp-Method header is required".into(),
        ));
    };
    if sent != method {
        return Err(format!(
            "Header mismatch: Mcp-Method header value {sent:?} does not match body value {method:?}"
        ));
    }
    let p = params.and_then(|p| serde_json::from_str::<Params>(p.get()).ok());
    if method == "tools/call" || method == "resources/read" {
        let body = p
            .as_ref()
            .and_then(|p| {
                if method == "tools/call" {
                    p.name
                } else {
                    p.uri
                }
            })
            .and_then(|n| serde_json::from_str::<String>(n.get()).ok());
        let Some(raw) = header_str(headers, "mcp-name") else {
            return Err(no_header_text(
                headers,
                "Mcp-Name",
                format!("the Mcp-Name header is required on {method}"),
            ));
        };
        let Some(value) = header_value(raw) else {
            return Err("the Mcp-Name header is not valid base64".into());
        };
        if body.as_deref() != Some(value.as_str()) {
            // The body's value as it is quoted in JSON, or said to be absent (not Rust's `Some`).
            let body = body.map_or_else(|| "(absent)".to_owned(), |b| format!("{b:?}"));
            return Err(format!(
                "Header mismatch: Mcp-Name header value {value:?} does not match body value {body}"
            ));
        }
    }
    if let Some(v) = modern::requested_version(params)
        && v != MODERN
    {
        return Err(format!(
            "Header mismatch: MCP-Protocol-Version header value \"{MODERN}\" does not match body value {v:?}"
        ));
    }
    Ok(())
}

/// The era a request is served in, from its `MCP-Protocol-Version` header.
enum Era {
    Modern,
    Legacy(&'static str),
    /// `initialize` without a version header: the handshake picks the revision.
    Handshake,
}

/// What the log line of a request names: never the token, only the role it maps to. The line is
/// written when the request is answered, or when its client goes away first (status 499, as
/// nginx names it: the request's future is dropped, and with it this).
struct CallLog {
    started: Instant,
    method: String,
    tool: String,
    role: String,
    /// The answer's status, once there is one.
    status: Option<u16>,
}

impl Drop for CallLog {
    fn drop(&mut self) {
        let ms = format_args!("{:.2}", self.started.elapsed().as_secs_f64() * 1e3);
        match self.status {
            Some(status) => tracing::info!(
                method = self.method,
                tool = self.tool,
                role = self.role,
                status,
                ms,
                "call"
            ),
            // A call already running goes on to its end ([`call`]).
            None => tracing::info!(
                method = self.method,
                tool = self.tool,
                role = self.role,
                status = 499,
                ms,
                closed = "by the client before its answer",
                "call"
            ),
        }
    }
}

/// One request, and its log line: every request gets one, refusals too (a 401 has no role, a
/// body that is not JSON-RPC no method), so an operator sees a flood of refused tokens.
async fn handle(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    // A listen stream logs its own end (`stream ended`) after this line, which logs its start.
    let mut log = CallLog {
        started: Instant::now(),
        method: String::new(),
        tool: String::new(),
        role: String::new(),
        status: None,
    };
    let response = answer(&shared, request, &mut log).await;
    log.status = Some(response.status().as_u16());
    response
}

async fn answer(shared: &Arc<Shared>, request: Request, log: &mut CallLog) -> Response {
    let headers = request.headers().clone();
    // Each of these is checked once, so it must be there once: with two Origins, only the first
    // was checked, and another reader of the request (a proxy, a log) may take the second.
    // So are the MCP headers that choose the revision and route the call (helper-115: with
    // `MCP-Protocol-Version: 2025-11-25` first and `2026-07-28` second, a 2026-07-28 body was
    // served as 2025-11-25, without its header checks).
    let once = [
        header::ORIGIN,
        header::HOST,
        header::AUTHORIZATION,
        header::HeaderName::from_static("mcp-protocol-version"),
        header::HeaderName::from_static("mcp-method"),
        header::HeaderName::from_static("mcp-name"),
    ];
    for name in once {
        if headers.get_all(&name).iter().nth(1).is_some() {
            return plain(
                StatusCode::BAD_REQUEST,
                &format!("the {name} header must not be sent more than once"),
            );
        }
    }
    // An Origin that is not visible ASCII is no allowed one: it is refused, not overlooked.
    if let Some(origin) = headers.get("origin")
        && !origin.to_str().is_ok_and(|o| origin_allowed(shared, o))
    {
        return plain(StatusCode::FORBIDDEN, "this Origin is not allowed");
    }
    if shared.loopback && !header_str(&headers, "host").is_some_and(is_loopback_host) {
        return plain(
            StatusCode::FORBIDDEN,
            "this server listens on loopback: the Host header must name localhost",
        );
    }
    // The scheme is case-insensitive (RFC 9110 11.1); the token is compared exactly.
    let Some(role) = header_str(&headers, "authorization")
        .and_then(|a| a.split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .and_then(|(_, t)| shared.tokens.role_of(t.trim().as_bytes()))
        .map(str::to_owned)
    else {
        let mut r = plain(StatusCode::UNAUTHORIZED, "a valid bearer token is required");
        r.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static("Bearer realm=\"patchdiff-mcp\""),
        );
        return r;
    };
    log.role.clone_from(&role);
    let limit = shared.config.max_line_bytes;
    // The rest of such a body is not read: the connection closes after the answer.
    let too_large = || {
        let mut r = plain(
            StatusCode::PAYLOAD_TOO_LARGE,
            &format!(
                "the body is over this server's limit of {limit} bytes (PATCHDIFF_MCP_MAX_LINE_BYTES)"
            ),
        );
        r.headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
        r
    };
    // Room for the body before a byte of it is read: what it declares, or the most it may be.
    // (One declared over the limit is still read up to it, then refused: answering before the
    // client has sent it makes the client's write fail instead of showing it the 413.)
    let declared = header_str(&headers, "content-length").and_then(|v| v.parse::<usize>().ok());
    let kib = declared.unwrap_or(limit).min(limit).div_ceil(1024).max(1);
    let room = u32::try_from(kib).unwrap_or(u32::MAX);
    // The role's share first (half the room when the token file names several roles), then the
    // server's: one tenant's unfinished bodies no longer hold every other tenant's room.
    let deadline = tokio::time::Instant::now() + shared.queue_wait;
    let Some(share) = shared.role_body_budgets.get(&role) else {
        return unavailable("no share of the room for bodies for this role");
    };
    let Ok(Ok(own)) =
        tokio::time::timeout_at(deadline, share.clone().acquire_many_owned(room)).await
    else {
        return busy(
            "this token's role has its share of this server's room for request bodies in use (half of it when the token file names several roles); try again shortly",
        );
    };
    let Ok(Ok(server_room)) = tokio::time::timeout_at(
        deadline,
        shared.body_budget.clone().acquire_many_owned(room),
    )
    .await
    else {
        return busy("too many request bodies are being received at once; try again shortly");
    };
    let room: BodyRoom = (own, server_room);
    let reading = axum::body::to_bytes(request.into_body(), limit);
    let body: Bytes = match tokio::time::timeout(shared.request_timeout, reading).await {
        Ok(Ok(b)) => b,
        Ok(Err(e)) => {
            let inner = e.into_inner();
            if inner.is::<http_body_util::LengthLimitError>() {
                return too_large();
            }
            return plain(
                StatusCode::BAD_REQUEST,
                &format!("the body could not be read: {inner}"),
            );
        }
        Err(_) => {
            let mut r = plain(
                StatusCode::REQUEST_TIMEOUT,
                &format!(
                    "the body did not arrive within {:?} (--request-timeout)",
                    shared.request_timeout
                ),
            );
            r.headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
            return r;
        }
    };
    let (id, method, params) = match rpc::parse_line(&body) {
        Err((id, code, message)) => {
            return refusal(StatusCode::BAD_REQUEST, &id, code, &message, None);
        }
        Ok(Incoming::Notification { method, .. }) => {
            log.method = method;
            return StatusCode::ACCEPTED.into_response();
        }
        // Streamable HTTP: a POSTed response is accepted with 202 and no body.
        Ok(Incoming::Response) => return StatusCode::ACCEPTED.into_response(),
        Ok(Incoming::Request { id, method, params }) => (id, method, params),
    };
    log.method.clone_from(&method);
    let era = match header_str(&headers, "mcp-protocol-version") {
        Some(MODERN) => Era::Modern,
        // A client that already names a revision on its handshake still negotiates it.
        Some(v) if method == "initialize" && REVISIONS.contains(&v) => Era::Handshake,
        Some(v) => match REVISIONS.iter().find(|r| **r == v) {
            Some(r) => Era::Legacy(r),
            None => {
                let r = modern::unsupported(Some(v));
                return refusal(StatusCode::BAD_REQUEST, &id, r.code, &r.message, r.data);
            }
        },
        None if headers.contains_key("mcp-protocol-version") => {
            return refusal(
                StatusCode::BAD_REQUEST,
                &id,
                INVALID_REQUEST,
                "Invalid Request: the MCP-Protocol-Version header is not visible ASCII text",
                None,
            );
        }
        None if method == "initialize" => Era::Handshake,
        None => {
            return refusal(
                StatusCode::BAD_REQUEST,
                &id,
                INVALID_REQUEST,
                "Invalid Request: the MCP-Protocol-Version header is required (this server does not serve 2025-03-26)",
                None,
            );
        }
    };
    if let Era::Modern = era {
        if method == "initialize" {
            return refusal(
                StatusCode::NOT_FOUND,
                &id,
                METHOD_NOT_FOUND,
                &format!("Method not found: initialize (MCP {MODERN} has no handshake)"),
                None,
            );
        }
        if let Err(why) = modern_headers(&headers, &method, params.as_deref()) {
            return refusal(
                StatusCode::BAD_REQUEST,
                &id,
                modern::HEADER_MISMATCH,
                &why,
                None,
            );
        }
    }
    log.tool = (method == "tools/call")
        .then(|| {
            params
                .as_deref()
                .and_then(|p| serde_json::from_str::<Params>(p.get()).ok())
                .and_then(|p| p.name.map(|n| n.get().trim_matches('"').to_owned()))
        })
        .flatten()
        .unwrap_or_default();
    if matches!(era, Era::Modern)
        && method == "subscriptions/listen"
        && shared.config.profile == Profile::Extended
    {
        return listen(shared, &headers, &role, id, body, room).await;
    }
    // Only a read's large answer may be dropped for want of room (LARGE_ANSWER_BYTES).
    let read_only = method == "resources/read"
        || (method == "tools/call"
            && shared
                .tools
                .iter()
                .any(|d| d.name() == log.tool && matches!(d.kind, crate::catalog::Kind::Read)));
    call(shared, era, role, body, room, read_only).await
}

/// A call's places: its role's share of the connections and one of the server's.
type Permits = (OwnedSemaphorePermit, OwnedSemaphorePermit);

/// A body's room: in its role's share of the body budget and in the server's.
type BodyRoom = (OwnedSemaphorePermit, OwnedSemaphorePermit);

/// A pooled connection as `role` and its permits: a free connection within `wait`, within the
/// role's share of them, else the refusal to answer (503).
async fn checkout(shared: &Shared, role: &str, wait: Duration) -> Result<(Permits, Db), Response> {
    let deadline = tokio::time::Instant::now() + wait;
    let Some(share) = shared.role_permits.get(role) else {
        return Err(unavailable("no share of the connections for this role"));
    };
    let Ok(Ok(own)) = tokio::time::timeout_at(deadline, share.clone().acquire_owned()).await else {
        return Err(busy(
            "this token's role has its share of this server's database connections busy (half of --connections when the token file names several roles): retry shortly",
        ));
    };
    let Ok(Ok(permit)) =
        tokio::time::timeout_at(deadline, shared.permits.clone().acquire_owned()).await
    else {
        return Err(busy(
            "every database connection of this server is busy: retry shortly",
        ));
    };
    let permit = (own, permit);
    let pooled = shared.pool.lock().expect("the pool lock").pop();
    let mut db = match pooled {
        Some(db) => db,
        None => match connect(&shared.config).await {
            Ok(db) => db,
            Err(why) => {
                tracing::error!(error = why, "cannot open a database connection");
                return Err(unavailable(&why));
            }
        },
    };
    match db.assume_role(role).await {
        Ok(()) => {}
        // Never used again: its role is not known to be the one asked for.
        Err(RoleError::Unreachable(why)) => {
            tracing::error!(role, error = why, "SET ROLE failed");
            return Err(unavailable(&why));
        }
        // The token names a role that does not exist (dropped since the token file was read) or
        // that the login role may not become: no retry helps, so no `503` inviting one (each
        // retry opened a new backend: helper-76). The failed `SET ROLE` left the session as it
        // was, and `assume_role`, which forgot the role, sets one anew before any later use:
        // back to the pool, so that refusals open no backends (helper-78).
        Err(RoleError::Refused(why)) => {
            checkin(shared, db);
            tracing::error!(role, error = why, "this token's role cannot be taken");
            return Err(plain(
                StatusCode::FORBIDDEN,
                &format!(
                    "this token's role cannot be taken ({why}); nothing was done: the token file or the database's roles must change first"
                ),
            ));
        }
    }
    Ok((permit, db))
}

/// A server on a pooled connection as `role`, in `era`.
fn server_for(shared: &Shared, era: &Era, db: Db) -> Server {
    let server = Server::with_tools(shared.config.clone(), db, shared.tools.clone());
    match era {
        Era::Modern if shared.config.profile == Profile::Extended => {
            server.on_modern().listening_over_http()
        }
        Era::Modern => server.on_modern(),
        Era::Legacy(r) => server.on_legacy_revision(r),
        Era::Handshake => server,
    }
}

fn checkin(shared: &Shared, db: Db) {
    shared.pool.lock().expect("the pool lock").push(db);
}

/// One request on a pooled connection as `role`: a free connection within `queue_wait`, or 503.
///
/// The call runs in a task of its own, which holds the connection's permit and the body's room
/// until its statements have ended: a client that hangs up mid-call (which drops this future)
/// never lets them go while the backend still works. Before, the permit and the connection were
/// let go at once while the backend went on with the statement (or waited for a row lock), and
/// the next request opened another backend: one tenant that cut its own calls short took every
/// connection slot of the database, far past `--connections`.
///
/// A hang-up is a cancellation in 2026-07-28 ("The server MUST treat a client disconnect as
/// cancellation of that request"): a call still waiting for a connection is not started, and one
/// that has not ended [`HANG_UP_GRACE`] after the hang-up has its statements cancelled as a
/// `notifications/cancelled` cancels them over stdio, its connection closed rather than pooled.
/// What it wrote is rolled back unless it had committed, and a keyed resend tells which.
/// The earlier revisions say the opposite (a disconnect is not a cancellation): there a call, once
/// sent, runs to its end, as it would have at the database.
async fn call(
    shared: &Arc<Shared>,
    era: Era,
    role: String,
    body: Bytes,
    room: BodyRoom,
    read_only: bool,
) -> Response {
    let shared = shared.clone();
    let running = shared.in_flight.start();
    // Its sender lives in this future: dropped with it when the client hangs up.
    let (client_here, gone) = tokio::sync::oneshot::channel::<()>();
    let mut gone = matches!(era, Era::Modern).then_some(gone);
    let task = tokio::spawn(async move {
        let _running = running;
        // A call whose client leaves while it waits for a connection stops waiting (helper-115:
        // 25,154 such calls held 373 MB for the whole --queue-ms).
        let checked = match gone.as_mut() {
            Some(g) => tokio::select! {
                biased;
                _ = g => return StatusCode::ACCEPTED.into_response(),
                c = checkout(&shared, &role, shared.queue_wait) => c,
            },
            None => checkout(&shared, &role, shared.queue_wait).await,
        };
        let (permit, db) = match checked {
            Ok(c) => c,
            Err(refused) => return refused,
        };
        // A call whose client left while it waited for a connection is not started.
        if gone.as_mut().is_some_and(|g| {
            matches!(
                g.try_recv(),
                Err(tokio::sync::oneshot::error::TryRecvError::Closed)
            )
        }) {
            checkin(&shared, db);
            drop(permit);
            return StatusCode::ACCEPTED.into_response();
        }
        let cancellation = db.cancellation();
        cancellation.clear();
        let mut server = server_for(&shared, &era, db);
        let Some(reply) = unless_hung_up(&mut server, &body, &cancellation, gone).await else {
            // Closed, not pooled: a cancel request may still be on its way to this session.
            tracing::info!(role, "the client hung up: its call was cancelled");
            return StatusCode::ACCEPTED.into_response();
        };
        checkin(&shared, server.into_db());
        // The permits are held until the answer has its room: answers waiting for room are
        // then never more than `--connections`.
        let _held = (permit, room);
        let Some(line) = reply else {
            return StatusCode::ACCEPTED.into_response();
        };
        let status = status_of(&era, &line);
        if line.len() <= LARGE_ANSWER_BYTES {
            return json(status, line);
        }
        // At most the role's share (the whole budget with one role): one answer larger than it
        // still goes, holding all of the share, and the other roles keep the rest.
        let kib = line
            .len()
            .div_ceil(1024)
            .min(shared.answer_budget_kib)
            .min(shared.role_answer_kib);
        let kib = u32::try_from(kib).unwrap_or(u32::MAX);
        let wait = if read_only {
            shared.queue_wait
        } else {
            Duration::ZERO
        };
        // The role's share first, then the server's.
        let share = shared.role_answer_budgets.get(&role).cloned();
        let rooms = async {
            let own = match share {
                Some(s) => Some(s.acquire_many_owned(kib).await?),
                None => None,
            };
            let all = shared.answer_budget.clone().acquire_many_owned(kib).await?;
            Ok::<_, tokio::sync::AcquireError>((own, all))
        };
        match tokio::time::timeout(wait, rooms).await {
            Ok(Ok(held)) => held_json(status, line, Some(held)),
            _ if !read_only => held_json::<()>(status, line, None),
            _ => {
                tracing::warn!(
                    role,
                    bytes = line.len(),
                    "a large answer was dropped: the answer budget is held by answers not yet read"
                );
                busy(
                    "large answers not yet read by their clients hold this server's room for answers, or this token's role's share of it (half when the token file names several roles); nothing was written: retry shortly",
                )
            }
        }
    });
    let answer = task.await.unwrap_or_else(|e| {
        tracing::error!(error = %e, "a call's task failed");
        unavailable("the call failed inside the server")
    });
    drop(client_here);
    answer
}

/// How long a 2026-07-28 call whose client hung up may still end by itself before its statements
/// are cancelled.
const HANG_UP_GRACE: Duration = Duration::from_millis(50);

/// The answer of `server` to `body` (which nobody reads if `gone` came first); `None` when `gone`
/// (the client's hang-up, 2026-07-28 only) came first and the call did not end within
/// [`HANG_UP_GRACE`]: then the call's statements are cancelled, and cancelled again every
/// [`server::CANCEL_AGAIN`] while it still runs (a statement sent after a cancel request reached
/// an idle session), and this returns once the call has ended.
async fn unless_hung_up(
    server: &mut Server,
    body: &[u8],
    cancellation: &crate::database::Cancellation,
    gone: Option<tokio::sync::oneshot::Receiver<()>>,
) -> Option<Option<String>> {
    let call = server.handle_message(body);
    tokio::pin!(call);
    let Some(mut gone) = gone else {
        return Some(call.await);
    };
    tokio::select! {
        biased;
        reply = &mut call => return Some(reply),
        _ = &mut gone => {}
    }
    // A call that ends within a moment ends by itself, its connection pooled as any other:
    // cancelling it closes the connection (a cancel request may still be on its way), and a
    // client that cut every call made every other tenant's call open a session (helper-115: 121
    // to 134 new sessions a second, another role's read median from 0.7 to 17-57 ms).
    if let Ok(reply) = tokio::time::timeout(HANG_UP_GRACE, &mut call).await {
        return Some(reply);
    }
    cancellation.cancel(true).await;
    let mut again = tokio::time::interval(server::CANCEL_AGAIN);
    again.reset();
    loop {
        tokio::select! {
            biased;
            _ = &mut call => return None,
            _ = again.tick() => cancellation.cancel(true).await,
        }
    }
}

/// A place among the open streams, given back when its stream ends (the stream's task owns it).
struct StreamSlot {
    shared: Arc<Shared>,
    role: String,
}

impl Drop for StreamSlot {
    fn drop(&mut self) {
        give_back(
            &mut self.shared.streams.lock().expect("the streams lock"),
            &self.role,
        );
    }
}

/// A place for one more stream of `role`, or the cap that refuses it (with its HTTP status).
fn reserve(shared: &Arc<Shared>, role: &str) -> Result<StreamSlot, (StatusCode, String)> {
    let mut open = shared.streams.lock().expect("the streams lock");
    let total: usize = open.values().sum();
    if total >= shared.max_streams {
        return Err((
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "Subscription limit reached: this server has {total} subscriptions/listen streams open, the most it serves (--max-streams); nothing was subscribed: retry later"
            ),
        ));
    }
    let mine = open.get(role).copied().unwrap_or(0);
    if mine >= shared.max_streams_per_role {
        return Err((
            StatusCode::TOO_MANY_REQUESTS,
            format!(
                "Subscription limit reached: this token's role has {mine} subscriptions/listen streams open, the most one role may (--max-streams-per-role); nothing was subscribed: close one first"
            ),
        ));
    }
    *open.entry(role.to_owned()).or_insert(0) += 1;
    Ok(StreamSlot {
        shared: shared.clone(),
        role: role.to_owned(),
    })
}

/// Whether the `Accept` header allows an SSE response (`text/event-stream`, `text/*` or `*/*`,
/// not with `q=0`).
fn accepts_sse(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|range| {
            let mut parts = range.split(';');
            let media = parts.next().unwrap_or("").trim();
            let refused = parts.any(|p| {
                p.trim()
                    .strip_prefix("q=")
                    .is_some_and(|q| q.trim().parse::<f32>().is_ok_and(|q| q <= 0.0))
            });
            !refused
                && (media.eq_ignore_ascii_case("text/event-stream")
                    || media.eq_ignore_ascii_case("text/*")
                    || media == "*/*")
        })
}

/// One JSON-RPC message as an SSE event (each line this server writes is one line of ASCII).
fn sse_event(line: &str) -> Bytes {
    Bytes::from(format!("event: message\ndata: {line}\n\n"))
}

/// The SSE comment written every [`KEEPALIVE`].
const KEEPALIVE_COMMENT: &[u8] = b": keep-alive\n\n";

/// 2026-07-28 `subscriptions/listen` over HTTP (issue 19 item 2; docs/http.md
/// "Subscriptions"). The request is checked and acknowledged exactly as over stdio, on a pooled
/// connection as the token's role (an error answers with one JSON response, as any request);
/// then the response is an SSE stream: the acknowledgment, one `notifications/resources/updated`
/// per change of a watched target the role may still read (checked as the role, on a pooled
/// connection taken for that moment), an SSE comment every [`KEEPALIVE`]. Between changes the
/// stream holds only its LISTEN session. It ends when the client closes it (the only way to
/// cancel on this transport) or the server stops (then with the request's result). Events carry
/// no IDs: a stream is not resumed, a client listens again and reads again.
async fn listen(
    shared: &Arc<Shared>,
    headers: &HeaderMap,
    role: &str,
    id: Value,
    body: Bytes,
    room: BodyRoom,
) -> Response {
    if !accepts_sse(headers) {
        return refusal(
            StatusCode::NOT_ACCEPTABLE,
            &id,
            INVALID_REQUEST,
            "Invalid Request: subscriptions/listen is answered with an SSE stream: the Accept header must allow text/event-stream",
            None,
        );
    }
    // Capped before anything is held: a refused stream costs no session.
    let slot = match reserve(shared, role) {
        Ok(slot) => slot,
        Err((status, why)) => {
            tracing::warn!(role, why, "listen refused");
            let mut r = refusal(status, &id, INTERNAL_ERROR, &why, None);
            r.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("5"));
            return r;
        }
    };
    // The acknowledgment runs in a task of its own, as every call does ([`call`]), but only for
    // as long as its client is there: it writes nothing, and a stream nobody reads is not worth
    // a session. Each stream closed before its acknowledgment used to run on, holding a pooled
    // connection of its role while it waited for the feed's shared sessions, which start one at
    // a time (2 s each while another session holds the feed's key): a client that opened and
    // closed streams in a loop took its role's share of the connections, every other call of
    // that role was answered 503, and the listening sessions went on starting for tens of
    // seconds after it stopped (helper-111).
    let (client_here, gone) = tokio::sync::oneshot::channel::<()>();
    let acknowledging = {
        let (shared, role) = (shared.clone(), role.to_owned());
        let running = shared.in_flight.start();
        tokio::spawn(async move {
            let _running = running;
            let mut gone = gone;
            let (permit, db) = tokio::select! {
                checked_out = checkout(&shared, &role, shared.queue_wait) => checked_out?,
                _ = &mut gone => return Err(StatusCode::ACCEPTED.into_response()),
            };
            let cancellation = db.cancellation();
            cancellation.clear();
            let mut server = server_for(&shared, &Era::Modern, db)
                .for_stream(Subscriptions::default(), shared.feed.clone());
            // As a call's ([`unless_hung_up`]): given up part way, its statements are cancelled
            // and waited for before the connection is closed and the permit given back. They
            // were left running: a backend waiting on a lock does not notice its client's close,
            // and while an administrator held a table lock, 120 listens cut at 50 ms left 95 of
            // the login's backends and filled the cluster's connection slots (helper-119).
            let Some(reply) = unless_hung_up(&mut server, &body, &cancellation, Some(gone)).await
            else {
                // Closed, not pooled: a cancel request may still be on its way to this session.
                drop((server, permit, room));
                return Err(StatusCode::ACCEPTED.into_response());
            };
            let subs = server.take_subscriptions();
            checkin(&shared, server.into_db());
            drop((permit, room));
            Ok::<_, Response>((reply, subs))
        })
    };
    // Dropped with this future when the client goes away, which ends the task above.
    let _client_here = client_here;
    let (reply, subs) = match acknowledging.await {
        Ok(Ok(acknowledged)) => acknowledged,
        Ok(Err(refused)) => return refused,
        Err(e) => {
            tracing::error!(error = %e, "a listen call's task failed");
            return unavailable("the call failed inside the server");
        }
    };
    let Some(ack) = reply else {
        return StatusCode::ACCEPTED.into_response();
    };
    if !server::is_acknowledgment(&ack) {
        return json(status_of(&Era::Modern, &ack), ack);
    }
    let (tx, rx) = mpsc::channel::<Bytes>(STREAM_QUEUE);
    if tx.try_send(sse_event(&ack)).is_err() {
        return unavailable("the stream could not start");
    }
    tokio::spawn(stream(shared.clone(), slot, id, subs, tx));
    // The body ends when the stream's task drops its sender; hyper drops the body (and so the
    // receiver, which the task notices at once) when the client goes away.
    let events = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv()
            .await
            .map(|event| (Ok::<_, std::convert::Infallible>(event), rx))
    });
    let mut r = Body::from_stream(events).into_response();
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    h.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("no-cache, no-transform"),
    );
    h.insert("x-accel-buffering", HeaderValue::from_static("no"));
    r
}

/// Queues one event of a stream. A client that takes none of [`STREAM_QUEUE`] queued events
/// for a whole [`KEEPALIVE`] period is not reading: its stream ends, and gives back its place
/// among the streams, rather than wait for it.
async fn put(tx: &mpsc::Sender<Bytes>, event: Bytes) -> Result<(), &'static str> {
    match tokio::time::timeout(KEEPALIVE, tx.send(event)).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(_)) => Err("the connection ended"),
        Err(_) => Err("the client stopped reading"),
    }
}

/// One open stream, until the client goes, the server stops, or the feed cannot go on.
async fn stream(
    shared: Arc<Shared>,
    slot: StreamSlot,
    id: Value,
    mut subs: Subscriptions,
    tx: mpsc::Sender<Bytes>,
) {
    let started = Instant::now();
    let mut stopping = shared.stopping.clone();
    let mut keepalive =
        tokio::time::interval_at(tokio::time::Instant::now() + KEEPALIVE, KEEPALIVE);
    let ended: String = loop {
        tokio::select! {
            // The client closed it, or the kernel gave up on it (TCP_USER_TIMEOUT, after a
            // client that stopped reading filled the socket's buffers): not told apart here.
            () = tx.closed() => break "the connection ended".into(),
            _ = async { stopping.wait_for(|stop| *stop).await.is_ok() } => {
                // Not awaited: a client that stopped reading must not hold up the shutdown.
                let _ = tx.try_send(sse_event(&server::listen_ended(&id)));
                break "the server is stopping".into();
            }
            _ = keepalive.tick() => {
                if let Err(why) = put(&tx, Bytes::from_static(KEEPALIVE_COMMENT)).await {
                    break why.into();
                }
            }
            signal = server::next_signal(&mut subs) => {
                let (back, events) = deliver(&shared, &slot.role, subs, signal).await;
                subs = back;
                match events {
                    Ok(events) => {
                        let mut gone = None;
                        for e in events {
                            if gone.is_none() {
                                gone = put(&tx, e).await.err();
                            }
                        }
                        if let Some(why) = gone {
                            break why.into();
                        }
                    }
                    Err(why) => {
                        let line = rpc::error_line(
                            &id,
                            INTERNAL_ERROR,
                            &format!("Internal error: the change feed stopped ({why}); listen again, then read the resources again"),
                        );
                        let _ = put(&tx, sse_event(&line)).await;
                        break why;
                    }
                }
            }
        }
    };
    // The listening session closes with `subs`, the place among the streams with `slot`.
    drop(subs);
    tracing::info!(
        method = "subscriptions/listen",
        role = slot.role,
        ended,
        s = format_args!("{:.1}", started.elapsed().as_secs_f64()),
        "stream ended"
    );
}

/// A change feed signal for one stream: the update events to send (each checked as `role` on a
/// pooled connection taken for this moment), and the subscriptions back.
async fn deliver(
    shared: &Shared,
    role: &str,
    subs: Subscriptions,
    signal: Option<crate::feed::Signal>,
) -> (Subscriptions, Result<Vec<Bytes>, String>) {
    if signal.is_none() {
        return (subs, Err("its listening session ended".into()));
    }
    let (permit, db) = match checkout(shared, role, KEEPALIVE).await {
        Ok(c) => c,
        Err(_) => {
            return (
                subs,
                Err("no database connection to check access with".into()),
            );
        }
    };
    let mut server = server_for(shared, &Era::Modern, db).for_stream(subs, shared.feed.clone());
    let mut out = Vec::new();
    let written = server.deliver(signal, &mut out).await;
    let subs = server.take_subscriptions();
    checkin(shared, server.into_db());
    drop(permit);
    if let Err(e) = written {
        return (subs, Err(e.to_string()));
    }
    let text = String::from_utf8_lossy(&out);
    let events = text
        .split('\n')
        .filter(|l| !l.is_empty())
        .map(sse_event)
        .collect();
    (subs, Ok(events))
}

/// A JSON-RPC error's HTTP status: on 2026-07-28, 404 for an unknown method and 400 for a
/// malformed request (2026-07-28 streamable-http); a result, and every answer of the earlier
/// revisions, 200.
fn status_of(era: &Era, line: &str) -> StatusCode {
    if !matches!(era, Era::Modern) {
        return StatusCode::OK;
    }
    // Only the error's code is read; a result (a 1 MiB read, say) is skipped unparsed.
    #[derive(Deserialize)]
    struct Code {
        code: i64,
    }
    #[derive(Deserialize)]
    struct Reply {
        #[serde(default)]
        error: Option<Code>,
    }
    let code = serde_json::from_str::<Reply>(line)
        .ok()
        .and_then(|r| r.error)
        .map(|e| e.code);
    match code {
        None => StatusCode::OK,
        Some(METHOD_NOT_FOUND) => StatusCode::NOT_FOUND,
        Some(c)
            if c == INVALID_PARAMS || (-32099..=-32000).contains(&c) || c == INVALID_REQUEST =>
        {
            StatusCode::BAD_REQUEST
        }
        Some(_) => StatusCode::OK,
    }
}

fn unavailable(why: &str) -> Response {
    busy(&format!(
        "the database cannot serve this call now ({why}); nothing was done: retry shortly"
    ))
}

/// `503 Service Unavailable` saying `why`, with `Retry-After: 1`.
fn busy(why: &str) -> Response {
    let mut r = plain(StatusCode::SERVICE_UNAVAILABLE, why);
    r.headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    r
}

/// A new connection of the pool, with the session settings every connection carries.
pub async fn connect(config: &Config) -> Result<Db, String> {
    let mut db = Db::connect(&config.database).await?;
    if let Some(why) = db.refusal() {
        return Err(why);
    }
    db.set_session(&config.session_settings()).await?;
    Ok(db)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Accepted connections give up on a client that stops acknowledging (docs/http.md
    /// "Subscriptions"): the option is set as asked, on a real socket.
    #[tokio::test]
    async fn accepted_connections_give_up_on_unacknowledged_data() {
        use std::os::fd::AsRawFd;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let _client = tokio::net::TcpStream::connect(addr).await.unwrap();
        let (accepted, _) = listener.accept().await.unwrap();
        give_up_unacknowledged(&accepted, UNACKNOWLEDGED).unwrap();
        let mut ms: libc::c_uint = 0;
        let mut len = std::mem::size_of_val(&ms) as libc::socklen_t;
        // SAFETY: the socket is open; `ms` and `len` are valid for writes of their sizes.
        let rc = unsafe {
            libc::getsockopt(
                accepted.as_raw_fd(),
                libc::IPPROTO_TCP,
                libc::TCP_USER_TIMEOUT,
                (&raw mut ms).cast::<libc::c_void>(),
                &mut len,
            )
        };
        assert_eq!((rc, ms), (0, 60_000));
    }

    #[test]
    fn token_files_are_parsed_strictly() {
        let t =
            Tokens::parse("# agents\nabcdefghijklmnop alice\n\n0123456789abcdefXYZ team_docs\n")
                .unwrap();
        assert_eq!(t.role_of(b"abcdefghijklmnop"), Some("alice"));
        assert_eq!(t.role_of(b"0123456789abcdefXYZ"), Some("team_docs"));
        assert_eq!(t.role_of(b"abcdefghijklmno"), None);
        assert_eq!(t.role_of(b"abcdefghijklmnopq"), None);
        assert_eq!(t.role_of(b""), None);
        assert!(Tokens::parse("short alice").is_err());
        assert!(Tokens::parse("abcdefghijklmnop").is_err());
        assert!(Tokens::parse("abcdefghijklmnop a b").is_err());
        assert!(Tokens::parse("abcdefghijklmnop a\nabcdefghijklmnop b").is_err());
        assert!(Tokens::parse("# nothing\n").is_err());
    }

    #[test]
    fn loopback_hosts_and_origins() {
        for h in [
            "localhost",
            "localhost:8080",
            "127.0.0.1:1",
            "[::1]:80",
            "[::1]",
            "LOCALHOST:8080",
            "LocalHost",
            // Every address of 127.0.0.0/8 (helper-92: a server bound to 127.0.0.2 refused it).
            "127.0.0.2",
            "127.255.255.254:9",
            "[0:0:0:0:0:0:0:1]:80",
        ] {
            assert!(is_loopback_host(h), "{h}");
        }
        // Nothing but a port after the name (an Origin's host may carry userinfo or more).
        for h in [
            "evil.example",
            "localhost.evil.example:80",
            "127.0.0.1.evil.example",
            "128.0.0.1",
            "127.1",
            "0x7f000001",
            "",
            "localhost:1@evil.example",
            "localhost:evil.example",
            "localhost:",
            "[::1]evil",
            "[::1]:",
            "[::1",
            "::1",
        ] {
            assert!(!is_loopback_host(h), "{h}");
        }
    }

    /// helper-43: a peer is counted by what it cannot vary at will: loopback as one address,
    /// IPv4-mapped IPv6 as IPv4, IPv6 by its /64.
    #[test]
    fn peers_are_counted_by_what_they_cannot_vary() {
        let key = |s: &str| peer_key(s.parse().unwrap()).to_string();
        for local in [
            "127.0.0.1",
            "127.0.0.2",
            "127.1.2.3",
            "::1",
            "::ffff:127.0.0.9",
        ] {
            assert_eq!(key(local), "127.0.0.1", "{local}");
        }
        assert_eq!(key("::ffff:192.0.2.7"), "192.0.2.7");
        assert_eq!(key("192.0.2.7"), "192.0.2.7");
        assert_eq!(key("2001:db8:1:2:aaaa::1"), "2001:db8:1:2::");
        assert_eq!(key("2001:db8:1:2:bbbb::9"), "2001:db8:1:2::");
        assert_ne!(key("2001:db8:1:3::1"), key("2001:db8:1:2::1"));
    }

    #[test]
    fn listen_needs_an_accept_that_allows_sse() {
        let with = |v: &str| {
            let mut h = HeaderMap::new();
            h.insert(header::ACCEPT, HeaderValue::from_str(v).unwrap());
            accepts_sse(&h)
        };
        assert!(!accepts_sse(&HeaderMap::new()));
        for yes in [
            "application/json, text/event-stream",
            "text/event-stream",
            "TEXT/EVENT-STREAM;q=0.5",
            "text/*",
            "*/*",
        ] {
            assert!(with(yes), "{yes}");
        }
        for no in [
            "application/json",
            "text/event-stream;q=0",
            "text/event-stream; q=0.0, application/json",
            "text/html",
        ] {
            assert!(!with(no), "{no}");
        }
    }

    #[test]
    fn mcp_name_values_decode() {
        assert_eq!(
            header_value("patchdiff_read_target").as_deref(),
            Some("patchdiff_read_target")
        );
        assert_eq!(
            header_value("=?base64?SGVsbG8sIOS4lueVjA==?=").as_deref(),
            Some("Hello, 世界")
        );
        assert_eq!(
            header_value("=?base64?IHBhZGRlZCA=?=").as_deref(),
            Some(" padded ")
        );
        assert_eq!(header_value("=?base64?!!?="), None);
    }
}
