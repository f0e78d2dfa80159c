//! The change feed over MCP (issue 19, item 2; docs/profiles.md "extended: targets as
//! resources"): targets are resources `patchdiff://targets/{id}`, and a subscriber hears
//! `notifications/resources/updated` when one changes.
//!
//! The extension announces every acceptance and SAVE with `NOTIFY patchdiff` at COMMIT (with
//! `patchdiff.notify = listened`, its default, while a listener is registered: see
//! [`listen_once`]). A [`Listener`] holds a dedicated session of the front end's own role (its
//! session settings and `SET ROLE` included) that LISTENs on that channel, registers, and
//! passes on the IDs of the targets some subscriber watches; the server then checks, through
//! the API and as the subscriber's role, that the subscriber may still read the target before
//! it says anything (docs/security.md).
//! Behind a sharded router every shard announces its own commits (NOTIFY is per database), so
//! the listener holds one such session per partition database and merges what they hear
//! (docs/scale-out.md).

use crate::database::{connect_with, describe};
use patchdiff_engine::api::feed;
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};
use tokio_postgres::AsyncMessage;

/// The scheme and path of a target's resource URI.
pub const URI_PREFIX: &str = "patchdiff://targets/";
/// The URI template `resources/templates/list` names.
pub const URI_TEMPLATE: &str = "patchdiff://targets/{target_file_id}";

/// The most targets one connection may watch at once (its subscriptions together): each costs
/// an access check when it changes, and the set is copied to the listener on every change.
pub const MAX_WATCHED: usize = 1024;

/// The most `subscriptions/listen` streams one connection may hold open at once (over HTTP each
/// stream is its own request, capped by `--max-streams-per-role`): each keeps its request `id`
/// and is written one line per change of a target it watches, so without a cap one client could
/// keep thousands and make one edit cost thousands of lines.
pub const MAX_LISTENS: usize = 16;

/// The longest `id` of a `subscriptions/listen` request, as compact JSON: it is kept while the
/// stream is open and echoed in every notification of it.
pub const LISTEN_ID_MAX_BYTES: usize = 256;

/// Announcements waiting for the server's loop; beyond it the listener drops them and asks for a
/// resync, which tells every subscriber that its targets may have changed.
const QUEUE: usize = 4096;

/// A session's connection, which must be polled for its statements to complete.
type Session = tokio_postgres::Connection<tokio_postgres::Socket, tokio_postgres::tls::NoTlsStream>;

/// How long a subscription waits for its listening session to register behind writers that
/// announced nothing ([`listen_once`]); beyond it, it is answered and resynced once registered.
const REGISTERED_WITHIN: Duration = Duration::from_secs(2);

/// How long the listener waits before it reconnects a lost session.
const RECONNECT: Duration = Duration::from_secs(1);
/// How often listening sessions through a router read the partitions' connection strings again
/// ([`LayoutProbe`]). A partition moved to another database (docs/scale-out.md, "Splitting a
/// shard") is then listened to at its new address within this time: before, the sessions kept
/// the strings they were opened with, and a moved partition's commits went unheard for as long
/// as any subscription stayed open (helper-59).
const LAYOUT_EVERY: Duration = Duration::from_secs(10);

/// How long [`Listener::start`] waits for its sessions to listen: a connection's own timeout
/// (10 s for a partition) and registration ([`REGISTERED_WITHIN`]), and a little more.
const READY_WITHIN: Duration = Duration::from_secs(15);

/// Reads the partitions' connection strings again, through the router (see [`LAYOUT_EVERY`]).
pub type LayoutProbe = Arc<
    dyn Fn() -> std::pin::Pin<
            Box<dyn Future<Output = Result<Vec<tokio_postgres::Config>, String>> + Send>,
        > + Send
        + Sync,
>;

/// Where a session connects, to compare two layouts.
fn address(c: &tokio_postgres::Config) -> String {
    format!(
        "{:?} {:?} {:?}",
        c.get_hosts(),
        c.get_ports(),
        c.get_dbname()
    )
}

/// How often a listening session reads the count of changes committed without their
/// announcement ([`SILENCES`]).
const SILENCE_POLL: Duration = Duration::from_secs(1);

/// The least time between two resyncs a listening session sends because of that count: each
/// makes every subscriber read every target it watches again (up to [`MAX_WATCHED`] per
/// connection), and a role that holds the notification queue over the limit moves the count at
/// every write of anyone's (helper-47).
const SILENCE_RESYNC_EVERY: Duration = Duration::from_secs(5);

/// The count of changes committed without their announcement because PostgreSQL's notification
/// queue was at or over `patchdiff.notify_queue_limit`: the sequence `patchdiff.feed_silences`,
/// read through `pg_sequence_last_value`, which needs no access to the extension's schema (NULL
/// until the first). No row where the extension predates the count (an earlier build of 0.2.0):
/// the session then does not watch it.
const SILENCES: &str = "SELECT pg_catalog.pg_sequence_last_value(c.oid) \
  FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
 WHERE n.nspname = 'patchdiff' AND c.relname = 'feed_silences' AND c.relkind = 'S'";

/// The most transactions a listening session keeps track of one by one ([`IN_PROGRESS`]);
/// beyond, it waits for every transaction older than its own ID instead. A role can open as many
/// subtransactions as it likes, each with an ID of its own.
const MAX_TRACKED: usize = 10_000;

/// The transactions in progress now, which an unannounced writer counted before (it has its
/// transaction ID before it counts) may still be among, as 64-bit IDs: those of the statement's
/// snapshot, and every ID from the snapshot's `xmax` up to an ID this statement takes for itself
/// afterwards (a snapshot lists none at or past its `xmax`, and the newest writer is there:
/// helper-47), at most [`MAX_TRACKED`] and one more; and that ID of its own, on every row. Run
/// after the count was read.
const IN_PROGRESS: &str = "SELECT a.mine, y.x::text::int8 FROM \
  (SELECT pg_catalog.pg_current_xact_id()::text::int8 AS mine, \
          pg_catalog.pg_current_snapshot() AS s) a \
  LEFT JOIN LATERAL (SELECT x FROM (SELECT x FROM pg_catalog.pg_snapshot_xip(a.s) x \
           UNION ALL \
           SELECT g::text::pg_catalog.xid8 \
             FROM pg_catalog.generate_series(pg_catalog.pg_snapshot_xmax(a.s)::text::int8, a.mine - 1) g) z \
   WHERE pg_catalog.pg_xact_status(z.x) = 'in progress' LIMIT $1) y ON true";

/// Whether every transaction older than the given ID has ended.
const ALL_OLDER_ENDED: &str =
    "SELECT pg_catalog.pg_snapshot_xmin(pg_catalog.pg_current_snapshot())::text::int8 > $1";

/// Of the given transaction IDs, those still in progress.
const STILL_IN_PROGRESS: &str = "SELECT x FROM pg_catalog.unnest($1::int8[]) x \
 WHERE pg_catalog.pg_xact_status(x::text::pg_catalog.xid8) = 'in progress'";

/// What a listening session knows of the changes committed without their announcement: the last
/// count it read; the transactions that were in progress when it moved and have not ended (the
/// unannounced writers may be among them, and their commits come later); whether a resync is
/// due; and when the last one was sent.
struct Silences {
    last: i64,
    pending: Vec<i64>,
    /// Too many to track one by one: the ID the session took when the count last moved, once
    /// every older transaction has ended.
    older_than: Option<i64>,
    owed: bool,
    told: Option<tokio::time::Instant>,
}

/// A target's resource URI.
pub fn uri(target_file_id: &str) -> String {
    format!("{URI_PREFIX}{target_file_id}")
}

/// The target a resource URI names: `patchdiff://targets/` and a UUID in its canonical
/// lowercase form, nothing before or after it.
pub fn target_of(uri: &str) -> Option<&str> {
    let id = uri.strip_prefix(URI_PREFIX)?;
    feed::is_canonical_id(id).then_some(id)
}

/// What the listener tells the server's loop.
#[derive(Debug, PartialEq, Eq)]
pub enum Signal {
    /// A watched target changed (committed).
    Changed(String),
    /// Announcements may have been missed (the session was lost and is back, or the queue was
    /// full): every watched target may have changed.
    Resync,
}

/// What one front-end connection hears of the change feed: the signals of the targets it
/// watches. Either from listening sessions of its own ([`Listener::start`], stdio), or from a
/// [`Hub`] that many connections share (the HTTP endpoint's streams), so that a server holds one
/// listening session per database however many streams it serves.
pub struct Listener {
    watched: Arc<Mutex<BTreeSet<String>>>,
    signals: mpsc::Receiver<Signal>,
    /// Whether a signal was dropped for it (its queue was full): the next receive is then a
    /// resync. Set by its sessions ([`Tell`]) or its hub.
    lagged: Arc<AtomicBool>,
    source: Source,
}

enum Source {
    /// Its own sessions' tasks.
    Own(Vec<tokio::task::JoinHandle<()>>),
    /// Its place among a hub's subscribers.
    Hub { hub: Arc<Hub>, key: u64 },
}

impl Drop for Listener {
    fn drop(&mut self) {
        match &self.source {
            Source::Own(tasks) => {
                for task in tasks {
                    task.abort();
                }
            }
            Source::Hub { hub, key, .. } => hub.leave(*key),
        }
    }
}

impl Listener {
    /// Opens a session on each of `databases` (`setup`: the session settings and `SET ROLE` of
    /// the server's own session) and returns once each has either LISTENed or failed, so no
    /// change committed after this returns is missed on a database that was reachable. It fails
    /// only if none was: a partition that is down is retried every second, and once it listens
    /// every subscriber hears that its targets may have changed (as after a lost session).
    ///
    /// With a `layout` probe (through a router), the partitions' connection strings are read
    /// again every [`LAYOUT_EVERY`]; when they differ from the ones the sessions were opened
    /// with, the sessions end and the listener with them (`recv` answers `None`), so that its
    /// owner listens afresh at the new addresses and resyncs.
    pub async fn start(
        databases: Vec<tokio_postgres::Config>,
        setup: String,
        layout: Option<LayoutProbe>,
    ) -> Result<Listener, String> {
        let watched = Arc::new(Mutex::new(BTreeSet::new()));
        let (tx, signals) = mpsc::channel(QUEUE);
        let lagged = Arc::new(AtomicBool::new(false));
        let tx = Tell {
            tx,
            lagged: lagged.clone(),
        };
        let mut waits = Vec::with_capacity(databases.len());
        let mut tasks = Vec::with_capacity(databases.len() + 1);
        let mut opened: Vec<String> = databases.iter().map(address).collect();
        opened.sort();
        for config in databases {
            let (ready, listening) = oneshot::channel();
            waits.push(listening);
            tasks.push(tokio::spawn(run(
                config,
                setup.clone(),
                watched.clone(),
                tx.clone(),
                ready,
            )));
        }
        if let Some(probe) = layout {
            let sessions: Vec<tokio::task::AbortHandle> =
                tasks.iter().map(|t| t.abort_handle()).collect();
            tasks.push(tokio::spawn(async move {
                // A probe that keeps failing is reported once, not every time.
                let mut answered = true;
                loop {
                    tokio::time::sleep(LAYOUT_EVERY).await;
                    // A router that does not answer is asked again next time, not waited for.
                    let read = match tokio::time::timeout(LAYOUT_EVERY, probe()).await {
                        Ok(read) => read,
                        Err(_) => Err("the router did not answer within 10 s".to_owned()),
                    };
                    match read {
                        Ok(now) => {
                            answered = true;
                            let mut now: Vec<String> = now.iter().map(address).collect();
                            now.sort();
                            if now != opened {
                                tracing::warn!(
                                    "change feed: the router's partitions moved; listening afresh"
                                );
                                // The sessions' senders go with them: the listener ends.
                                sessions.iter().for_each(tokio::task::AbortHandle::abort);
                                return;
                            }
                        }
                        // The router is away: the sessions go on; asked again next time.
                        Err(why) if answered => {
                            answered = false;
                            tracing::warn!(
                                "change feed: cannot read the router's partitions ({why}); a partition that moves meanwhile goes unheard"
                            );
                        }
                        Err(why) => tracing::debug!("change feed: {why}"),
                    }
                }
            }));
        }
        let listener = Listener {
            watched,
            signals,
            lagged,
            source: Source::Own(tasks),
        };
        let mut failed = None;
        let mut listening = 0;
        // All the sessions are waited for together, each at most READY_WITHIN: a database that
        // takes a connection and never answers must not hold up the others (helper-60: a
        // partition moved to such an address stopped the whole feed, and over stdio the server's
        // answers too).
        let deadline = tokio::time::Instant::now() + READY_WITHIN;
        for wait in waits {
            match tokio::time::timeout_at(deadline, wait).await {
                Ok(Ok(Ok(()))) => listening += 1,
                Ok(Ok(Err(why))) => failed = failed.or(Some(why)),
                Ok(Err(_)) => {
                    failed = failed.or(Some("the listener ended before it listened".into()))
                }
                Err(_) => {
                    failed = failed.or(Some(format!(
                        "a database did not let a session listen within {} s",
                        READY_WITHIN.as_secs()
                    )))
                }
            }
        }
        match failed {
            // Dropping the listener ends its sessions.
            Some(why) if listening == 0 => Err(why),
            Some(why) => {
                tracing::warn!("change feed: {why}; retrying that partition every second");
                Ok(listener)
            }
            None => Ok(listener),
        }
    }

    /// The targets whose announcements are passed on from now on.
    pub fn watch(&self, targets: BTreeSet<String>) {
        *self.watched.lock().expect("the watched set") = targets;
        if let Source::Hub { hub, .. } = &self.source {
            hub.rewatch();
        }
    }

    /// Whether a signal was dropped for this listener since it last asked.
    fn lagged(&self) -> bool {
        self.lagged.swap(false, Ordering::AcqRel)
    }

    /// The next signal; `None` if the listener is gone for good.
    pub async fn recv(&mut self) -> Option<Signal> {
        if self.lagged() {
            return Some(Signal::Resync);
        }
        self.signals.recv().await
    }

    /// A signal already waiting, without waiting.
    pub fn try_recv(&mut self) -> Option<Signal> {
        if self.lagged() {
            return Some(Signal::Resync);
        }
        self.signals.try_recv().ok()
    }
}

/// Where an HTTP endpoint keeps its [`Hub`] while any stream uses it: started by the first
/// stream that watches something, closed when the last one ends.
pub type HubSlot = Arc<tokio::sync::Mutex<std::sync::Weak<Hub>>>;

/// One set of listening sessions (one per database, as [`Listener::start`] opens them) whose
/// signals go to every subscribed [`Listener`] that watches the target; what the sessions watch
/// is the union of what the subscribers watch. Each subscriber has its own queue: one that does
/// not keep up gets a resync instead of holding up the others. The sessions close when the last
/// subscriber leaves and the hub is dropped.
pub struct Hub {
    subscribers: Mutex<HubState>,
    /// The sessions' watched set (the union).
    watched: Arc<Mutex<BTreeSet<String>>>,
    task: tokio::task::JoinHandle<()>,
}

#[derive(Default)]
struct HubState {
    next: u64,
    /// Each subscriber's watched set, its queue and its lag flag.
    by_key: std::collections::BTreeMap<u64, Subscriber>,
}

struct Subscriber {
    watched: Arc<Mutex<BTreeSet<String>>>,
    tx: mpsc::Sender<Signal>,
    lagged: Arc<AtomicBool>,
}

impl Drop for Hub {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Hub {
    /// Opens the shared sessions (see [`Listener::start`]: it returns once each database has
    /// either LISTENed or failed, and fails only if none listens).
    pub async fn start(
        databases: Vec<tokio_postgres::Config>,
        setup: String,
        layout: Option<LayoutProbe>,
    ) -> Result<Arc<Hub>, String> {
        Ok(Hub::over(Listener::start(databases, setup, layout).await?))
    }

    /// Whether its sessions still listen: a hub whose sessions ended (the partitions moved) is
    /// not given new subscribers; the next stream starts another.
    pub fn is_running(&self) -> bool {
        !self.task.is_finished()
    }

    /// A hub over `base`, whose signals it passes on.
    fn over(base: Listener) -> Arc<Hub> {
        Arc::new_cyclic(|weak: &std::sync::Weak<Hub>| Hub {
            subscribers: Mutex::new(HubState::default()),
            watched: base.watched.clone(),
            task: tokio::spawn(fan_out(base, weak.clone())),
        })
    }

    /// A listener fed by this hub; it watches nothing until told to.
    pub fn subscribe(self: &Arc<Hub>) -> Listener {
        let (tx, signals) = mpsc::channel(QUEUE);
        let watched = Arc::new(Mutex::new(BTreeSet::new()));
        let lagged = Arc::new(AtomicBool::new(false));
        let mut state = self.subscribers.lock().expect("the hub's subscribers");
        let key = state.next;
        state.next += 1;
        state.by_key.insert(
            key,
            Subscriber {
                watched: watched.clone(),
                tx,
                lagged: lagged.clone(),
            },
        );
        drop(state);
        Listener {
            watched,
            signals,
            lagged,
            source: Source::Hub {
                hub: self.clone(),
                key,
            },
        }
    }

    /// How many listeners it feeds.
    pub fn subscribers(&self) -> usize {
        self.subscribers
            .lock()
            .expect("the hub's subscribers")
            .by_key
            .len()
    }

    fn leave(&self, key: u64) {
        self.subscribers
            .lock()
            .expect("the hub's subscribers")
            .by_key
            .remove(&key);
        self.rewatch();
    }

    /// The sessions watch what the subscribers watch, together.
    fn rewatch(&self) {
        let state = self.subscribers.lock().expect("the hub's subscribers");
        let mut all = BTreeSet::new();
        for s in state.by_key.values() {
            all.extend(s.watched.lock().expect("the watched set").iter().cloned());
        }
        *self.watched.lock().expect("the watched set") = all;
    }
}

/// Passes each signal of the shared sessions on to the subscribers it concerns, until the hub
/// is dropped (which aborts this task) or the sessions are gone for good (then every
/// subscriber's queue closes, and each hears `None`).
async fn fan_out(mut base: Listener, hub: std::sync::Weak<Hub>) {
    while let Some(signal) = base.recv().await {
        let Some(hub) = hub.upgrade() else { return };
        let state = hub.subscribers.lock().expect("the hub's subscribers");
        for s in state.by_key.values() {
            let concerned = match &signal {
                Signal::Changed(t) => s.watched.lock().expect("the watched set").contains(t),
                Signal::Resync => true,
            };
            if !concerned {
                continue;
            }
            let copy = match &signal {
                Signal::Changed(t) => Signal::Changed(t.clone()),
                Signal::Resync => Signal::Resync,
            };
            if let Err(mpsc::error::TrySendError::Full(_)) = s.tx.try_send(copy) {
                s.lagged.store(true, Ordering::Release);
            }
        }
    }
    if let Some(hub) = hub.upgrade() {
        hub.subscribers
            .lock()
            .expect("the hub's subscribers")
            .by_key
            .clear();
    }
}

async fn run(
    config: tokio_postgres::Config,
    setup: String,
    watched: Arc<Mutex<BTreeSet<String>>>,
    tx: Tell,
    ready: oneshot::Sender<Result<(), String>>,
) {
    let mut ready = Some(ready);
    loop {
        match listen_once(&config, &setup, &watched, &tx, &mut ready).await {
            // The server's loop is gone: nobody to tell.
            Ok(()) => return,
            Err(why) => match ready.take() {
                // The first attempt failed: [`Listener::start`] decides, and drops this task
                // if no database listens; else it retries and resyncs once it listens.
                Some(r) => {
                    let _ = r.send(Err(why));
                }
                None => tracing::warn!("change feed: {why}; reconnecting"),
            },
        }
        if tx.is_closed() {
            return;
        }
        tokio::time::sleep(RECONNECT).await;
    }
}

/// Sends a cancel request for the statement of the session whose token it holds when dropped,
/// without waiting for it (the session's wait for the feed's key, [`listen_once`]), unless
/// emptied once the wait was granted.
struct CancelWhenDropped(Option<tokio_postgres::CancelToken>);

impl Drop for CancelWhenDropped {
    fn drop(&mut self) {
        let (Some(token), Ok(runtime)) = (self.0.take(), tokio::runtime::Handle::try_current())
        else {
            return;
        };
        runtime.spawn(async move {
            let sent = tokio::time::timeout(
                Duration::from_secs(5),
                token.cancel_query(tokio_postgres::NoTls),
            )
            .await;
            if !matches!(sent, Ok(Ok(()))) {
                tracing::debug!("change feed: the cancel request for a given-up wait failed");
            }
        });
    }
}

/// One session: connect, LISTEN, register as a listener (the feed's lock), pass on announcements
/// until the session ends (`Err`) or the receiver is dropped (`Ok`). After a reconnection, a
/// resync covers what the gap missed.
///
/// Registration: with `patchdiff.notify = listened` (the extension's default) a writer announces
/// a change only while some session holds or awaits `pg_advisory_lock_shared` on the feed's key,
/// and a writer that announced nothing holds the key until its COMMIT (docs/sql-api.md "The
/// change feed"). So the session LISTENs first, then asks for the key without waiting: granted,
/// nothing can have been missed, and it is ready. Refused, some writers that announced nothing
/// are still open: a second session waits for the key (while this one passes on what it hears),
/// then this one takes it. The session is ready once that is done, or after
/// [`REGISTERED_WITHIN`] at the latest (a subscription does not wait long for another
/// transaction), and then sends a resync once registered, which covers those writers' changes.
async fn listen_once(
    config: &tokio_postgres::Config,
    setup: &str,
    watched: &Mutex<BTreeSet<String>>,
    tx: &Tell,
    ready: &mut Option<oneshot::Sender<Result<(), String>>>,
) -> Result<(), String> {
    let (client, mut connection) = connect_with(config.clone()).await?;
    let sql = if setup.is_empty() {
        format!("LISTEN {}", feed::CHANNEL)
    } else {
        format!("{setup}; LISTEN {}", feed::CHANNEL)
    };
    let mut early = Vec::new();
    polling(&mut connection, &mut early, client.batch_execute(&sql))
        .await?
        .map_err(|e| format!("cannot LISTEN {}: {}", feed::CHANNEL, describe(&e)))?;
    // Read before registering: a writer that finds this session registered and the queue over
    // the limit counts itself after this, so every such change moves the count seen later.
    let mut silences = read_silences(&client, &mut connection, &mut early)
        .await?
        .map(|last| Silences {
            last,
            pending: Vec::new(),
            older_than: None,
            owed: false,
            told: None,
        });
    let keys = format!("{}, {}", feed::LISTENER_LOCK_KEY1, feed::LISTENER_LOCK_KEY2);
    let registered = try_key(&client, &mut connection, &mut early, &keys).await?;
    // After a reconnection the gap is covered at once (and again once registered, below).
    if ready.is_none() && !tx.send(Signal::Resync) {
        return Ok(());
    }
    for n in early.drain(..) {
        if !pass_on(&n, watched, tx) {
            return Ok(());
        }
    }
    // A second session that registers on this one's behalf while this one cannot yet (below);
    // kept only if this one still cannot once it has.
    let mut holder = None;
    if !registered {
        // Writers that tried the key before this session asked for it hold it until they end;
        // once it is granted they have all committed or rolled back. A second session waits
        // for it: a backend delivers notifications only between statements, so this one,
        // waiting itself behind a transaction left open for an hour, would hold back every
        // announcement meanwhile. While the second one waits, writers announce (they see the
        // waiter), and this one passes their announcements on. The subscription is answered
        // once the key is granted, or after REGISTERED_WITHIN at the latest; then a resync
        // covers the writers that were still open.
        let (waiter, mut waiter_connection) = connect_with(config.clone()).await?;
        // A wait this session gives up (the last stream closed, the front end stopped or died)
        // must end in the server too: a backend waiting for a lock does not notice that its
        // client has gone, and until 2026-12-07 each such wait stayed, one more backend every
        // time the key was held (any role may hold it) when a listening session opened, until
        // no role could connect (helper-110). Its server checks every second that this front
        // end is still there (`PIN_SEARCH_PATH`), and a wait given up is cancelled at once.
        let mut given_up = CancelWhenDropped(Some(waiter.cancel_token()));
        let wait = format!(
            "{}; SELECT pg_catalog.pg_advisory_lock_shared({keys})",
            crate::database::PIN_SEARCH_PATH
        );
        {
            let waited = waiter.batch_execute(&wait);
            tokio::pin!(waited);
            let late = tokio::time::sleep(REGISTERED_WITHIN);
            tokio::pin!(late);
            loop {
                tokio::select! {
                    r = &mut waited => {
                        r.map_err(|e| format!("cannot register as a listener of {}: {}", feed::CHANNEL, describe(&e)))?;
                        given_up.0 = None;
                        break;
                    }
                    () = &mut late, if ready.is_some() => {
                        if !answer(ready, tx).await {
                            return Ok(());
                        }
                    }
                    m = std::future::poll_fn(|cx| waiter_connection.poll_message(cx)) => {
                        said(m, "registering")?;
                    }
                    m = std::future::poll_fn(|cx| connection.poll_message(cx)) => {
                        if !forward(m, watched, tx).await? {
                            return Ok(());
                        }
                    }
                    () = tx.closed() => return Ok(()),
                }
            }
        }
        // Registered through the second session; now this one (at once, unless a session asks
        // for the key in exclusive mode meanwhile: then the second one stays, holding it).
        let mut heard = Vec::new();
        let mine = try_key(&client, &mut connection, &mut heard, &keys).await?;
        for n in heard.drain(..) {
            if !pass_on(&n, watched, tx) {
                return Ok(());
            }
        }
        if !mine {
            holder = Some((waiter, waiter_connection));
        }
    }
    // Not answered yet: nothing was missed. Answered (a reconnection, or the wait above was
    // long) before the writers that announced nothing had ended: the resync covers them.
    if (ready.is_some() || !registered) && !answer(ready, tx).await {
        return Ok(());
    }
    let mut poll = tokio::time::interval(SILENCE_POLL);
    poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let message = tokio::select! {
            m = std::future::poll_fn(|cx| connection.poll_message(cx)) => Some(m),
            m = async {
                match holder.as_mut() {
                    Some((_, c)) => std::future::poll_fn(|cx| c.poll_message(cx)).await,
                    None => std::future::pending().await,
                }
            } => {
                // The registration ends with it: start again (and resync).
                said(m, "registering")?;
                continue;
            }
            _ = poll.tick(), if silences.is_some() => None,
            () = tx.closed() => return Ok(()),
        };
        let go_on = match (message, silences.as_mut()) {
            (Some(m), _) => forward(m, watched, tx).await?,
            (None, Some(s)) => watch_silences(&client, &mut connection, watched, tx, s).await?,
            (None, None) => true,
        };
        if !go_on {
            return Ok(());
        }
    }
}

/// [`SILENCES`]: the count (0 before the first), or `None` without the count.
async fn read_silences(
    client: &tokio_postgres::Client,
    connection: &mut Session,
    heard: &mut Vec<tokio_postgres::Notification>,
) -> Result<Option<i64>, String> {
    let row = polling(connection, heard, client.query_opt(SILENCES, &[]))
        .await?
        .map_err(|e| format!("cannot read patchdiff.feed_silences: {}", describe(&e)))?;
    Ok(row.map(|r| r.get::<_, Option<i64>>(0).unwrap_or(0)))
}

/// Runs one of the statements on the writers' transactions with `params`.
async fn writers_state(
    client: &tokio_postgres::Client,
    connection: &mut Session,
    heard: &mut Vec<tokio_postgres::Notification>,
    sql: &str,
    params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
) -> Result<Vec<tokio_postgres::Row>, String> {
    polling(connection, heard, client.query(sql, params))
        .await?
        .map_err(|e| format!("cannot read the writers' state: {}", describe(&e)))
}

/// Changes committed without their announcement (`patchdiff.notify_queue_limit`; docs/sql-api.md
/// "The change feed") are counted, never announced. When the count has moved, every subscriber
/// is told that its targets may have changed (for the writers that have committed), and again
/// whenever some of the transactions that were in progress at that moment have ended since (the
/// unannounced writers among them commit later, and nothing else would tell of them; waiting for
/// all of them would let one transaction left open hold back the news of every other's). At most
/// one such resync every [`SILENCE_RESYNC_EVERY`]; one that is due then is sent late, never
/// dropped. `false` once nobody is there to tell.
async fn watch_silences(
    client: &tokio_postgres::Client,
    connection: &mut Session,
    watched: &Mutex<BTreeSet<String>>,
    tx: &Tell,
    s: &mut Silences,
) -> Result<bool, String> {
    let mut heard = Vec::new();
    if !s.pending.is_empty() {
        let rows = writers_state(
            client,
            connection,
            &mut heard,
            STILL_IN_PROGRESS,
            &[&s.pending],
        )
        .await?;
        s.owed |= rows.len() < s.pending.len();
        s.pending = rows.iter().map(|r| r.get(0)).collect();
    }
    if let Some(mine) = s.older_than {
        let rows = writers_state(client, connection, &mut heard, ALL_OLDER_ENDED, &[&mine]).await?;
        if rows.first().is_some_and(|r| r.get::<_, bool>(0)) {
            s.owed = true;
            s.older_than = None;
        }
    }
    if let Some(count) = read_silences(client, connection, &mut heard).await?
        && count > s.last
    {
        tracing::warn!(
            unannounced = count - s.last,
            "change feed: changes were committed without their announcement (PostgreSQL's \
             notification queue is at or over patchdiff.notify_queue_limit); subscribers are \
             told to read their targets again"
        );
        s.last = count;
        s.owed = true;
        let limit = MAX_TRACKED as i64 + 1;
        let rows = writers_state(client, connection, &mut heard, IN_PROGRESS, &[&limit]).await?;
        let open: Vec<i64> = rows.iter().filter_map(|r| r.get(1)).collect();
        if open.len() + s.pending.len() > MAX_TRACKED {
            s.pending.clear();
            s.older_than = rows.first().map(|r| r.get(0));
        } else {
            s.pending.extend(open);
            s.pending.sort_unstable();
            s.pending.dedup();
        }
    }
    for n in heard.drain(..) {
        if !pass_on(&n, watched, tx) {
            return Ok(false);
        }
    }
    if !s.owed || s.told.is_some_and(|t| t.elapsed() < SILENCE_RESYNC_EVERY) {
        return Ok(true);
    }
    s.owed = false;
    s.told = Some(tokio::time::Instant::now());
    Ok(tx.send(Signal::Resync))
}

/// Tells [`Listener::start`] that this session listens, or, once it was told, every subscriber
/// that each watched target may have changed; `false` once nobody is there to tell.
async fn answer(ready: &mut Option<oneshot::Sender<Result<(), String>>>, tx: &Tell) -> bool {
    match ready.take() {
        // Told in time. [`Listener::start`] stops waiting for a session after [`READY_WITHIN`]:
        // one that listens later resyncs, since changes may have been missed meanwhile.
        Some(r) => r.send(Ok(())).is_ok() || tx.send(Signal::Resync),
        None => tx.send(Signal::Resync),
    }
}

/// Asks for the feed's key without waiting (`keys`: its two numbers); whether it was granted.
async fn try_key(
    client: &tokio_postgres::Client,
    connection: &mut Session,
    heard: &mut Vec<tokio_postgres::Notification>,
    keys: &str,
) -> Result<bool, String> {
    let sql = format!("SELECT pg_catalog.pg_try_advisory_lock_shared({keys})");
    polling(connection, heard, client.query_one(&sql, &[]))
        .await?
        .and_then(|row| row.try_get::<_, bool>(0))
        .map_err(|e| {
            format!(
                "cannot register as a listener of {}: {}",
                feed::CHANNEL,
                describe(&e)
            )
        })
}

/// What the listening session's connection said: an announcement is passed on; `Ok(false)` once
/// the server's loop is gone, `Err` once the session is.
async fn forward(
    m: Option<Result<AsyncMessage, tokio_postgres::Error>>,
    watched: &Mutex<BTreeSet<String>>,
    tx: &Tell,
) -> Result<bool, String> {
    match said(m, "listening")? {
        Some(n) => Ok(pass_on(&n, watched, tx)),
        None => Ok(true),
    }
}

/// What a session's connection said: an announcement, nothing to act on, or (`Err`) that the
/// `which` session is gone.
fn said(
    m: Option<Result<AsyncMessage, tokio_postgres::Error>>,
    which: &str,
) -> Result<Option<tokio_postgres::Notification>, String> {
    match m {
        Some(Ok(AsyncMessage::Notification(n))) => Ok(Some(n)),
        Some(Ok(_)) => Ok(None),
        Some(Err(e)) => Err(format!("the {which} session failed: {e}")),
        None => Err(format!("the {which} session ended")),
    }
}

/// Drives `f` (a statement of `connection`'s client) to its end while polling the connection,
/// which must be polled for it to complete; announcements heard meanwhile go to `heard`.
async fn polling<F: std::future::Future>(
    connection: &mut Session,
    heard: &mut Vec<tokio_postgres::Notification>,
    f: F,
) -> Result<F::Output, String> {
    tokio::pin!(f);
    loop {
        tokio::select! {
            r = &mut f => return Ok(r),
            m = std::future::poll_fn(|cx| connection.poll_message(cx)) => {
                heard.extend(said(m, "listening")?);
            }
        }
    }
}

/// Passes on one announcement if it is a well-formed one of a watched target; `false` once the
/// server's loop is gone. Never waits (see [`Tell`]).
fn pass_on(n: &tokio_postgres::Notification, watched: &Mutex<BTreeSet<String>>, tx: &Tell) -> bool {
    if n.channel() != feed::CHANNEL {
        return true;
    }
    // Any role may NOTIFY on any channel: only well-formed announcements of watched
    // targets go on, and the server checks access before anyone hears of them.
    let Some(a) = feed::parse(n.payload()) else {
        return true;
    };
    if !watched
        .lock()
        .expect("the watched set")
        .contains(&a.target_file_id)
    {
        return true;
    }
    tx.send(Signal::Changed(a.target_file_id))
}

/// Where a listening session's signals go: a bounded queue that is never waited on. A session
/// that waited for room stopped reading its connection, so its backend stopped taking
/// notifications, and PostgreSQL's notification queue, one for the whole database, stopped
/// draining behind it: every tenant's announcements piled up toward
/// `patchdiff.notify_queue_limit` (helper-63: a stdio host that stopped reading its stdout held
/// the queue's tail while writers went on). When the queue is full the signal is dropped and
/// the listener's next receive is a resync, as for a hub's subscriber.
#[derive(Clone)]
struct Tell {
    tx: mpsc::Sender<Signal>,
    lagged: Arc<AtomicBool>,
}

impl Tell {
    /// Passes `signal` on, or marks the listener lagged; `false` once the receiver is gone.
    fn send(&self, signal: Signal) -> bool {
        match self.tx.try_send(signal) {
            Ok(()) => true,
            Err(mpsc::error::TrySendError::Closed(_)) => false,
            Err(mpsc::error::TrySendError::Full(_)) => {
                self.lagged.store(true, Ordering::Release);
                // Had the receiver emptied the queue meanwhile, this wakes it (a receive looks at
                // `lagged` first); still full, it looks at `lagged` on its next receive.
                !matches!(
                    self.tx.try_send(Signal::Resync),
                    Err(mpsc::error::TrySendError::Closed(_))
                )
            }
        }
    }

    fn is_closed(&self) -> bool {
        self.tx.is_closed()
    }

    async fn closed(&self) {
        self.tx.closed().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A listener with no session, fed by the returned sender instead.
    fn fed() -> (Listener, mpsc::Sender<Signal>) {
        let (tx, signals) = mpsc::channel(QUEUE);
        let listener = Listener {
            watched: Arc::new(Mutex::new(BTreeSet::new())),
            signals,
            lagged: Arc::new(AtomicBool::new(false)),
            source: Source::Own(Vec::new()),
        };
        (listener, tx)
    }

    fn set(ids: &[&str]) -> BTreeSet<String> {
        ids.iter().map(|s| s.to_string()).collect()
    }

    /// docs/http.md "Subscriptions": the streams of an endpoint share one set of listening
    /// sessions. The sessions watch the union of what the streams watch; a signal reaches only
    /// the streams that watch its target (a resync reaches all); a stream that does not keep up
    /// gets a resync instead of holding up the others; a stream that leaves is no longer
    /// watched for.
    #[tokio::test]
    async fn a_hub_passes_each_signal_to_the_listeners_that_watch_it() {
        let (base, tx) = fed();
        let hub = Hub::over(base);
        let mut a = hub.subscribe();
        let mut b = hub.subscribe();
        a.watch(set(&["t1", "t2"]));
        b.watch(set(&["t2", "t3"]));
        assert_eq!(*hub.watched.lock().unwrap(), set(&["t1", "t2", "t3"]));
        assert_eq!(hub.subscribers(), 2);

        let within = Duration::from_secs(5);
        tx.send(Signal::Changed("t1".into())).await.unwrap();
        tx.send(Signal::Changed("t3".into())).await.unwrap();
        tx.send(Signal::Resync).await.unwrap();
        let next = async |l: &mut Listener| tokio::time::timeout(within, l.recv()).await.unwrap();
        assert_eq!(next(&mut a).await, Some(Signal::Changed("t1".into())));
        assert_eq!(next(&mut a).await, Some(Signal::Resync));
        assert_eq!(next(&mut b).await, Some(Signal::Changed("t3".into())));
        assert_eq!(next(&mut b).await, Some(Signal::Resync));

        // b does not read while more than its queue holds arrives for t2: a gets every one,
        // b gets what its queue held, then a resync, and nothing was lost for a.
        for _ in 0..QUEUE + 10 {
            tx.send(Signal::Changed("t2".into())).await.unwrap();
            assert_eq!(next(&mut a).await, Some(Signal::Changed("t2".into())));
        }
        assert_eq!(b.try_recv(), Some(Signal::Resync), "the lag is told first");
        let mut held = 0;
        while let Some(s) = b.try_recv() {
            assert_eq!(s, Signal::Changed("t2".into()));
            held += 1;
        }
        assert_eq!(held, QUEUE);

        // b leaves: only a's targets are watched; the last one leaving watches nothing.
        drop(b);
        assert_eq!(*hub.watched.lock().unwrap(), set(&["t1", "t2"]));
        assert_eq!(hub.subscribers(), 1);
        drop(a);
        assert!(hub.watched.lock().unwrap().is_empty());
        assert_eq!(hub.subscribers(), 0);
    }

    /// helper-63: a listening session never waits for its listener. Past a full queue its
    /// signals are dropped at once and the listener's next receive is a resync, then what the
    /// queue held; a receiver that is gone ends the session.
    #[tokio::test]
    async fn a_session_never_waits_for_a_listener_that_does_not_read() {
        let (tx, signals) = mpsc::channel(QUEUE);
        let lagged = Arc::new(AtomicBool::new(false));
        let tell = Tell {
            tx,
            lagged: lagged.clone(),
        };
        let mut listener = Listener {
            watched: Arc::new(Mutex::new(BTreeSet::new())),
            signals,
            lagged,
            source: Source::Own(Vec::new()),
        };
        // Synchronous: nothing here can wait. 2 * QUEUE signals into a queue of QUEUE.
        for _ in 0..2 * QUEUE {
            assert!(tell.send(Signal::Changed("t".into())));
        }
        assert!(tell.send(Signal::Resync));
        assert_eq!(
            listener.try_recv(),
            Some(Signal::Resync),
            "the lag is told first"
        );
        let mut held = 0;
        while let Some(s) = listener.try_recv() {
            assert_eq!(s, Signal::Changed("t".into()));
            held += 1;
        }
        assert_eq!(held, QUEUE);
        // Room again: signals flow as before, with no resync owed.
        assert!(tell.send(Signal::Changed("u".into())));
        assert_eq!(listener.try_recv(), Some(Signal::Changed("u".into())));
        assert_eq!(listener.try_recv(), None);
        drop(listener);
        assert!(!tell.send(Signal::Changed("t".into())), "nobody to tell");
        assert!(tell.is_closed());
    }

    /// A resource URI names exactly one canonical target ID; anything else is not a target.
    #[test]
    fn uris_name_canonical_target_ids() {
        let id = "0f0f0f0f-0f0f-4f0f-8f0f-0f0f0f0f0f0f";
        assert_eq!(target_of(&uri(id)), Some(id));
        for bad in [
            "patchdiff://targets/",
            "patchdiff://targets/0F0F0F0F-0F0F-4F0F-8F0F-0F0F0F0F0F0F",
            "patchdiff://targets/0f0f0f0f-0f0f-4f0f-8f0f-0f0f0f0f0f0f/x",
            "patchdiff://targets/../0f0f0f0f-0f0f-4f0f-8f0f-0f0f0f0f0f",
            "file:///etc/passwd",
            "patchdiff://target/0f0f0f0f-0f0f-4f0f-8f0f-0f0f0f0f0f0f",
        ] {
            assert_eq!(target_of(bad), None, "{bad}");
        }
    }
}
