//! The storage port: what one call needs of the database, in the caller's transaction.
//!
//! The engine decides the order of the contract's checks ([`crate::drive`]); a [`Store`] only
//! locks, reads and writes rows. The extension implements it with SPI; the engine's unit tests
//! with a few vectors. Every method sees the caller's identity through the store itself, so a
//! row the caller may not see is, to the engine, no row at all.

use crate::contract::args::ArgError;
use crate::history::export::{self, ExportFormat, ExportMeta};
use crate::history::pages::{LedgerRow, LogQuery};
use crate::scope::observation::{ObservationLink, ObservationRow, ScopeView};
use crate::scope::{Language, Outline, ParserLimit};
use crate::submission::submit::{Attempt, AttemptRow, Parent};
use crate::target::tenancy::{ListQuery, ListedTarget, Privilege};
use crate::target::{NewTarget, TargetView, WorkspaceBinding};
use serde_json::Value;
use std::rc::Rc;

/// A target's stored row, as the lock or a plain read returns it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredTarget {
    pub target_file_id: String,
    pub version: i64,
    pub current_hash: String,
    pub content: String,
    pub active_editing_cycle_id: String,
    pub filename: String,
    pub target_type: String,
    /// The recorded source line endings (JSON text), if any.
    pub source_line_endings: Option<String>,
}

impl StoredTarget {
    pub fn view(&self) -> TargetView<'_> {
        TargetView {
            target_file_id: &self.target_file_id,
            version: self.version,
            current_hash: &self.current_hash,
            content: &self.content,
        }
    }

    /// The recorded source line endings, or null for a target without them.
    pub fn line_endings(&self) -> Value {
        self.source_line_endings
            .as_deref()
            .and_then(|s| serde_json::from_str(s).ok())
            .unwrap_or(Value::Null)
    }

    /// The `patchdiff_export_target` answer for this row.
    pub fn export(&self, format: ExportFormat) -> Result<Value, ArgError> {
        let facts = self.line_endings();
        let meta = ExportMeta {
            filename: &self.filename,
            target_type: &self.target_type,
            source_line_endings: &facts,
        };
        export::export(&self.view(), &meta, format)
    }
}

/// What every port that may create rows or answer for an unreachable target offers.
pub trait Session {
    /// A new ID (a UUID) for a row or an answer.
    fn new_id(&mut self) -> String;
    /// The ID of a new target: a new ID, or, on a shard, one of the partition the router chose
    /// (crate::target::partition).
    fn new_target_id(&mut self) -> String {
        self.new_id()
    }
    /// Whether the caller may read the target (to tell `write_not_granted` from `not_found`).
    fn readable(&mut self, target_file_id: &str) -> bool;
}

/// The rows a submission locks, reads and writes.
pub trait Store: Session {
    /// Takes the row lock of a target the caller may write, held until the transaction ends,
    /// and reads it; `None`, having locked nothing, when there is none the caller may write.
    fn lock_target(&mut self, target_file_id: &str) -> Option<StoredTarget>;
    /// Reads a target the caller may write, without a lock and without writing anything, as
    /// of now: after every commit an earlier read of this call saw. `None` when there is none
    /// the caller may write.
    fn writable_target(&mut self, target_file_id: &str) -> Option<StoredTarget>;
    /// The size of a target's text in UTF-8 bytes, for a target the caller may write, without a
    /// lock; `None` when there is none the caller may write. A store that can tell the size
    /// without reading the text should (PostgreSQL reads it from the value's header).
    fn target_bytes(&mut self, target_file_id: &str) -> Option<usize> {
        self.writable_target(target_file_id)
            .map(|t| t.content.len())
    }
    /// What the log knows of a parent attempt the caller may read.
    fn parent(&mut self, pdcp_log_id: &str) -> Parent;
    /// The attempt stored under a request key on a target the caller may write, with its
    /// ledger facts; none on a target it may not write, whatever the log holds (an unlocked
    /// keyed recovery runs this before any other look at the target: it must neither read
    /// another tenant's attempt nor take longer for a key that tenant used).
    fn keyed_attempt(
        &mut self,
        target_file_id: &str,
        client_request_id: &str,
    ) -> Option<AttemptRow>;
    /// Reads the named observations the caller may read, with their consumption, in no
    /// particular order; unknown ones are absent. Those of `target_file_id` (the target this
    /// transaction has locked) are locked (`FOR UPDATE`); those of other targets are only read,
    /// to be refused as `OBSERVATION_TARGET_MISMATCH`: a role that may only read them must not
    /// hold a lock its owner's submissions wait on (helper-58).
    fn lock_observations(
        &mut self,
        target_file_id: &str,
        observation_ids: &[String],
    ) -> Vec<ObservationRow>;
    /// The observations an accepted attempt consumed, in group order.
    fn consumed_by(&mut self, pdcp_log_id: &str) -> Vec<ObservationRow>;
    /// Writes the attempt row, its ledger rows and, for an acceptance, the new target state.
    /// `new_content` is an acceptance's new text (the attempt's own `new_content` has been taken
    /// out of it), given by value so that the store lets it go as soon as the database holds
    /// its copy: a large target's text is then not held twice while the statement runs.
    fn write_attempt(
        &mut self,
        attempt: &Attempt,
        new_content: Option<String>,
        pdcp_log_id: &str,
        target_file_id: &str,
        editing_cycle_id: &str,
    );
    /// Records that an accepted attempt consumed observations.
    fn write_consumptions(&mut self, pdcp_log_id: &str, links: &[ObservationLink]);
}

/// A stored state of a target: the target row or one of its snapshots.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredState {
    pub version: i64,
    pub hash: String,
    pub content: String,
}

/// What replay reads, all from one consistent state of the caller's transaction.
pub trait History {
    /// The stored target the caller may read and its initial snapshot, if it has one; `None`
    /// when there is no target the caller may read.
    fn replay_start(&mut self, target_file_id: &str) -> Option<(StoredState, Option<StoredState>)>;
    /// Sequence ranges `(after, upto]` of the next accepted attempts, each a batch of bounded
    /// size; empty at the end of the log.
    fn next_batches(&mut self, target_file_id: &str, after: i64) -> Vec<(i64, i64)>;
    /// The accepted attempts in `(after, upto]`, in sequence order, with the observations they
    /// consumed.
    fn accepted(&mut self, target_file_id: &str, after: i64, upto: i64) -> Vec<AttemptRow>;
    /// The target's version as a statement run now sees it, without a lock. Inside a transaction
    /// that has written, each statement reads a fresh snapshot, so this can be later than
    /// [`History::replay_start`]'s; otherwise it is the same. `None` when the caller may not
    /// read the target.
    fn version_now(&mut self, target_file_id: &str) -> Option<i64>;
}

/// What a diff reads (issue 19, item 3): the target the caller may read, then, by ID, its
/// snapshots and its accepted log (the [`History`] batches).
pub trait Versions: History {
    /// The target the caller may read; `None` when there is none.
    fn diff_target(&mut self, target_file_id: &str) -> Option<StoredTarget>;
    /// The version of the target's initial snapshot, if it has one.
    fn first_version(&mut self, target_file_id: &str) -> Option<i64>;
    /// The newest snapshot (initial or SAVE) at or below `version`, with the `log_sequence` of
    /// the accepted attempt that produced its version (0 when none did).
    fn snapshot_at_or_below(
        &mut self,
        target_file_id: &str,
        version: i64,
    ) -> Option<(StoredState, i64)>;
}

/// A target as a SAVE locks it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SaveLock {
    pub version: i64,
    pub current_hash: String,
    pub active_editing_cycle_id: String,
    /// What only a publishing SAVE reads.
    pub publish: Option<PublishFacts>,
}

/// The content, recorded line endings and workspace binding a publishing SAVE reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublishFacts {
    pub content: String,
    pub source_line_endings: Value,
    pub binding: Option<WorkspaceBinding>,
}

/// What a SAVE locks, reads and writes.
pub trait Checkpoints: Session {
    /// Takes the row lock of a target the caller may write (`publish`: with what a publishing
    /// SAVE reads); `None`, having locked nothing, when there is none.
    fn lock_for_save(&mut self, target_file_id: &str, publish: bool) -> Option<SaveLock>;
    /// Snapshots the locked target into its active cycle `cycle`, closes that at `version` and
    /// opens `new_cycle`.
    fn save_checkpoint(
        &mut self,
        target_file_id: &str,
        cycle: &str,
        new_cycle: &str,
        version: i64,
        snapshot_id: &str,
    );
    /// Moves a published target's workspace baseline to the content just installed.
    fn move_workspace_baseline(&mut self, target_file_id: &str, sha256: &str, bytes: i64);
    /// The target just saved, read again (it is locked, so it is there).
    fn saved_target(&mut self, target_file_id: &str) -> StoredTarget;
}

/// What target creation writes.
pub trait Targets: Session {
    /// Inserts a target owned by the caller, with its first editing cycle and its initial
    /// snapshot; false, having written nothing, when the workspace binding's nonce already binds
    /// another target.
    fn insert_target(
        &mut self,
        target: &NewTarget,
        target_file_id: &str,
        cycle_id: &str,
        snapshot_id: &str,
    ) -> bool;
}

/// What the read tools and the history pages read, without a lock.
pub trait Reads {
    /// A target the caller may read.
    fn target(&mut self, target_file_id: &str) -> Option<StoredTarget>;
    /// The active editing cycle of a target the caller may read.
    fn readable_cycle(&mut self, target_file_id: &str) -> Option<String>;
    /// A page of the query's attempts: at most `q.page.fetch()` rows, newest first, and `true`
    /// when the page's text budget (`HISTORY_PAGE_TEXT_BYTES`) ended it before them.
    fn log_page(&mut self, q: &LogQuery) -> (Vec<AttemptRow>, bool);
    /// One stored record.
    fn record(&mut self, pdcp_log_id: &str) -> String;
    /// A page of the target's ledger entries, newest first: at most `fetch` rows at or below
    /// `max_sequence`, of the editing cycle `cycle` or, without one, of every cycle, and `true`
    /// when the page's text budget ended it before them.
    fn ledger_page(
        &mut self,
        target_file_id: &str,
        cycle: Option<&str>,
        max_sequence: i64,
        fetch: i64,
    ) -> (Vec<LedgerRow>, bool);
}

/// What grants and the target directory read and write, for the caller.
pub trait Grants {
    /// A role, as the database names it.
    type Role: Copy;
    /// Whether the caller owns (or administers) a target; `None` when it may not read it.
    fn owns(&mut self, target_file_id: &str) -> Option<bool>;
    /// The role named `name`, if it exists.
    fn role(&mut self, name: &str) -> Option<Self::Role>;
    /// Gives `role` `privilege` on a target, replacing any grant it held; the caller grants it.
    fn grant(&mut self, target_file_id: &str, role: Self::Role, privilege: Privilege);
    /// Takes `role`'s grant on a target down to read (`write_only`) or away.
    fn revoke(&mut self, target_file_id: &str, role: Self::Role, write_only: bool);
    /// The grant `role` now holds on a target.
    fn current_grant(&mut self, target_file_id: &str, role: Self::Role) -> Option<Privilege>;
    /// The targets the caller may read, newest first: at most `q.limit + 1` of them.
    fn list_targets(&mut self, q: &ListQuery) -> Vec<ListedTarget>;
}

/// Why there is no outline of a target version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NoOutline {
    /// The parser helper died or answered garbage (the store has logged its detail).
    Crashed,
    /// The parser helper was stopped from outside (killed by the kernel's OOM killer or an
    /// operator, its pipe broken): not a property of the text, so a resend may succeed.
    Stopped,
    /// A documented limit: outline symbols or name bytes, memory, CPU, time, input size.
    Limit(ParserLimit),
    /// The parser helper could not be started.
    NotStarted(String),
    /// Every parse slot of the server, or the login's or role's share, stayed taken for as long as
    /// the parser's wall-clock limit; nothing was parsed, and a resend may succeed.
    Busy,
}

/// An observation to persist.
pub struct NewObservation<'a> {
    pub observation_id: &'a str,
    pub target_file_id: &'a str,
    pub editing_cycle_id: &'a str,
    /// The bundle and the 1-based ordinal in it of a bundle's observation.
    pub bundle: Option<(&'a str, i32)>,
    pub target_version: i64,
    pub target_current_hash: &'a str,
    pub scope: &'a ScopeView,
    pub requested_name: &'a str,
    pub requested_kind: Option<&'a str>,
    pub language: &'a str,
    pub engine: &'a str,
    pub grammar: &'a str,
}

/// A stored observation with what its pages repeat.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredObservation {
    pub row: ObservationRow,
    pub parent: Option<String>,
    pub language: String,
    pub engine: String,
    pub grammar: String,
    pub scope_start_line: usize,
    pub scope_end_line: usize,
}

/// What structural observation reads and issues.
pub trait Observations: Session {
    /// A target the caller may read (`write`: and write), read without a lock.
    fn target_for(&mut self, target_file_id: &str, write: bool) -> Option<StoredTarget>;
    /// The outline of this target version, in `language`.
    fn outline(
        &mut self,
        target: &TargetView,
        language: Language,
    ) -> Result<Rc<Outline>, NoOutline>;
    /// Persists one observation (an authority row).
    fn insert_observation(&mut self, observation: &NewObservation);
    /// An observation of a target the caller may read.
    fn observation(&mut self, observation_id: &str) -> Option<StoredObservation>;
}
