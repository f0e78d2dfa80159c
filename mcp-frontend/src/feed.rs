//! The change feed over MCP (issue 19, item 2; docs/profiles.md "extended: targets as
//! resources"): targets are resources `patchdiff://targets/{id}`, and a subscriber hears
//! `notifications/resources/updated` when one changes.
//!
//! The extension announces every acceptance and SAVE with `NOTIFY patchdiff` at COMMIT. A
//! [`Listener`] holds a dedicated session of the front end's own role (its session settings and
//! `SET ROLE` included) that LISTENs on that channel and passes on the IDs of the targets some
//! subscriber watches; the server then checks, through the API and as the subscriber's role,
//! that the subscriber may still read the target before it says anything (docs/security.md).
//! Behind a sharded router every shard announces its own commits (NOTIFY is per database), so
//! the listener holds one such session per partition database and merges what they hear
//! (docs/scale-out.md).

use crate::database::{connect_with, describe};
use patchdiff_engine::api::feed;
use std::collections::BTreeSet;
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

/// Announcements waiting for the server's loop; beyond it the listener drops them and asks for a
/// resync, which tells every subscriber that its targets may have changed.
const QUEUE: usize = 4096;

/// How long the listener waits before it reconnects a lost session.
const RECONNECT: Duration = Duration::from_secs(1);

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

/// A session that LISTENs on the extension's channel, for one front-end connection.
pub struct Listener {
    watched: Arc<Mutex<BTreeSet<String>>>,
    signals: mpsc::Receiver<Signal>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for Listener {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

impl Listener {
    /// Opens a session on each of `databases` (`setup`: the session settings and `SET ROLE` of
    /// the server's own session) and returns once each has either LISTENed or failed, so no
    /// change committed after this returns is missed on a database that was reachable. It fails
    /// only if none was: a partition that is down is retried every second, and once it listens
    /// every subscriber hears that its targets may have changed (as after a lost session).
    pub async fn start(
        databases: Vec<tokio_postgres::Config>,
        setup: String,
    ) -> Result<Listener, String> {
        let watched = Arc::new(Mutex::new(BTreeSet::new()));
        let (tx, signals) = mpsc::channel(QUEUE);
        let mut waits = Vec::with_capacity(databases.len());
        let mut listener = Listener {
            watched,
            signals,
            tasks: Vec::with_capacity(databases.len()),
        };
        for config in databases {
            let (ready, listening) = oneshot::channel();
            waits.push(listening);
            listener.tasks.push(tokio::spawn(run(
                config,
                setup.clone(),
                listener.watched.clone(),
                tx.clone(),
                ready,
            )));
        }
        let mut failed = None;
        let mut listening = 0;
        for wait in waits {
            match wait.await {
                Ok(Ok(())) => listening += 1,
                Ok(Err(why)) => failed = failed.or(Some(why)),
                Err(_) => failed = failed.or(Some("the listener ended before it listened".into())),
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
    }

    /// The next signal; `None` if the listener is gone for good.
    pub async fn recv(&mut self) -> Option<Signal> {
        self.signals.recv().await
    }

    /// A signal already waiting, without waiting.
    pub fn try_recv(&mut self) -> Option<Signal> {
        self.signals.try_recv().ok()
    }
}

async fn run(
    config: tokio_postgres::Config,
    setup: String,
    watched: Arc<Mutex<BTreeSet<String>>>,
    tx: mpsc::Sender<Signal>,
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

/// One session: connect, LISTEN, pass on announcements until the session ends (`Err`) or the
/// receiver is dropped (`Ok`). After a reconnection, a resync covers what the gap missed.
async fn listen_once(
    config: &tokio_postgres::Config,
    setup: &str,
    watched: &Mutex<BTreeSet<String>>,
    tx: &mpsc::Sender<Signal>,
    ready: &mut Option<oneshot::Sender<Result<(), String>>>,
) -> Result<(), String> {
    let (client, mut connection) = connect_with(config.clone()).await?;
    let sql = if setup.is_empty() {
        format!("LISTEN {}", feed::CHANNEL)
    } else {
        format!("{setup}; LISTEN {}", feed::CHANNEL)
    };
    let listened = client.batch_execute(&sql);
    tokio::pin!(listened);
    // The connection must be polled for the LISTEN to complete.
    let mut done = false;
    while !done {
        tokio::select! {
            r = &mut listened => {
                r.map_err(|e| format!("cannot LISTEN {}: {}", feed::CHANNEL, describe(&e)))?;
                done = true;
            }
            m = std::future::poll_fn(|cx| connection.poll_message(cx)) => match m {
                Some(Ok(_)) => {}
                Some(Err(e)) => return Err(format!("the listening session failed: {e}")),
                None => return Err("the listening session ended".into()),
            },
        }
    }
    match ready.take() {
        Some(r) => {
            if r.send(Ok(())).is_err() {
                return Ok(());
            }
        }
        None => {
            if tx.send(Signal::Resync).await.is_err() {
                return Ok(());
            }
        }
    }
    loop {
        let message = tokio::select! {
            m = std::future::poll_fn(|cx| connection.poll_message(cx)) => m,
            () = tx.closed() => return Ok(()),
        };
        let n = match message {
            Some(Ok(AsyncMessage::Notification(n))) => n,
            Some(Ok(_)) => continue,
            Some(Err(e)) => return Err(format!("the listening session failed: {e}")),
            None => return Err("the listening session ended".into()),
        };
        if n.channel() != feed::CHANNEL {
            continue;
        }
        // Any role may NOTIFY on any channel: only well-formed announcements of watched
        // targets go on, and the server checks access before anyone hears of them.
        let Some(a) = feed::parse(n.payload()) else {
            continue;
        };
        if !watched
            .lock()
            .expect("the watched set")
            .contains(&a.target_file_id)
        {
            continue;
        }
        match tx.try_send(Signal::Changed(a.target_file_id)) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full(_)) => {
                // Too many at once: the loop will tell every subscriber instead.
                if tx.send(Signal::Resync).await.is_err() {
                    return Ok(());
                }
            }
            Err(mpsc::error::TrySendError::Closed(_)) => return Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
