//! Bounded history pages: `patchdiff_get_pdcp_log` and `patchdiff_get_manifest_ledger`
//! (contract, "patchdiff_get_pdcp_log", "patchdiff_get_manifest_ledger" and the history rows of
//! "Bounded Wire & Context Budgets").
//!
//! Both tools select the newest `limit` rows below an exclusive `before_sequence`, fetching
//! `limit + 1` after every filter to know whether another page exists. Attempts are displayed
//! newest first; the ledger reverses only its selected page, so it reads oldest first. The
//! extension runs the queries; this module checks arguments, decides which stored records fit
//! the page budget and shapes the answers.

use crate::contract::args::{ArgError, Args};
use crate::contract::json::{as_int, is_big_int, type_name, write_str};
use crate::contract::limits::{
    HISTORY_DEFAULT_LIMIT, HISTORY_MAX_LIMIT, LOG_CONTENT_PAGE_BYTES, LOG_INTENT_MAX_CHARS,
};
use crate::contract::time::write_rfc3339_utc;
use crate::submission::submit::AttemptRow;
use crate::text::{char_len, head_chars, text_defect};
use serde_json::{Map, Value, json};

pub const LOG_ARGS: &[&str] = &[
    "target_file_id",
    "limit",
    "before_sequence",
    "status",
    "content_hash",
    "client_request_id",
    "include_content",
];
pub const LEDGER_ARGS: &[&str] = &[
    "target_file_id",
    "include_previous_cycles",
    "limit",
    "before_sequence",
];

/// Which rows a page may hold: the newest `limit` with a sequence `<= max_sequence`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Page {
    pub limit: usize,
    /// `before_sequence - 1`, or `i64::MAX` without a cursor (an inclusive bound keeps the
    /// query one index range for every value, a cursor above i64 included).
    pub max_sequence: i64,
}

impl Page {
    /// How many rows to fetch: one more than the page, to learn whether another exists.
    pub fn fetch(&self) -> i64 {
        self.limit as i64 + 1
    }
}

/// `limit`: a positive non-bool integer or null; omitted or null selects 50, values above 200
/// select 200; zero, negative, boolean, float and string values are `invalid_argument`.
/// `before_sequence`: an exclusive cursor, a non-bool integer >= 1 or null.
pub fn parse_page(a: &Args) -> Result<Page, ArgError> {
    let limit = match a.get("limit") {
        None | Some(Value::Null) => HISTORY_DEFAULT_LIMIT,
        Some(v) => match as_int(v) {
            Some(n) if n >= 1 => (n as u64).min(HISTORY_MAX_LIMIT as u64) as usize,
            None if is_big_int(v) => HISTORY_MAX_LIMIT,
            _ => {
                return Err(ArgError::new(
                    "invalid_limit",
                    format!(
                        "limit must be a positive non-boolean integer or null, not {}",
                        describe(v)
                    ),
                ));
            }
        },
    };
    let max_sequence = match a.get("before_sequence") {
        None | Some(Value::Null) => i64::MAX,
        Some(v) => match as_int(v) {
            Some(n) if n >= 1 => n - 1,
            None if is_big_int(v) => i64::MAX,
            _ => {
                return Err(ArgError::new(
                    "invalid_before_sequence",
                    format!(
                        "before_sequence must be a non-boolean integer >= 1 or null, not {}",
                        describe(v)
                    ),
                ));
            }
        },
    };
    Ok(Page {
        limit,
        max_sequence,
    })
}

fn describe(v: &Value) -> String {
    match v {
        Value::Number(n) => n.to_string(),
        v => type_name(v).to_owned(),
    }
}

/// An optional exact-match string filter. A string PostgreSQL text cannot hold could never
/// match a stored value, and is refused like invalid read text.
fn filter_str(a: &Args, k: &str, code: &'static str) -> Result<Option<String>, ArgError> {
    match a.opt_str(k, true, code)? {
        Some(s) if text_defect(s).is_some() => Err(ArgError::new(
            code,
            format!("{k} contains U+0000, which no stored value can"),
        )),
        s => Ok(s.map(str::to_owned)),
    }
}

/// A parsed `patchdiff_get_pdcp_log` call.
#[derive(Debug, Clone, PartialEq)]
pub struct LogQuery {
    pub target_file_id: String,
    pub page: Page,
    pub status: Option<&'static str>,
    pub content_hash: Option<String>,
    /// Exact lookup of any stored key: no new-submission key syntax applies.
    pub client_request_id: Option<String>,
    pub include_content: bool,
}

pub fn parse_log(text: &str) -> Result<LogQuery, ArgError> {
    let a = Args::parse(text, LOG_ARGS, &["target_file_id"])?;
    let target_file_id = a.target_file_id()?;
    let page = parse_page(&a)?;
    let status = match a.get("status") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if s == "accepted" => Some("accepted"),
        Some(Value::String(s)) if s == "rejected" => Some("rejected"),
        Some(_) => {
            return Err(ArgError::new(
                "invalid_status",
                "status must be \"accepted\", \"rejected\" or null",
            ));
        }
    };
    Ok(LogQuery {
        target_file_id,
        page,
        status,
        content_hash: filter_str(&a, "content_hash", "invalid_content_hash")?,
        client_request_id: filter_str(&a, "client_request_id", "invalid_client_request_id")?,
        include_content: a.bool_or("include_content", false, "invalid_include_content")?,
    })
}

/// A parsed `patchdiff_get_manifest_ledger` call.
#[derive(Debug, Clone, PartialEq)]
pub struct LedgerQuery {
    pub target_file_id: String,
    pub page: Page,
    pub include_previous_cycles: bool,
}

pub fn parse_ledger(text: &str) -> Result<LedgerQuery, ArgError> {
    let a = Args::parse(text, LEDGER_ARGS, &["target_file_id"])?;
    let target_file_id = a.target_file_id()?;
    let include_previous_cycles = a.bool_or(
        "include_previous_cycles",
        false,
        "invalid_include_previous_cycles",
    )?;
    Ok(LedgerQuery {
        target_file_id,
        page: parse_page(&a)?,
        include_previous_cycles,
    })
}

/// The empty continuation every history answer without rows carries.
fn no_continuation(m: &mut Map<String, Value>) {
    m.insert("entries".into(), json!([]));
    m.insert("has_more".into(), json!(false));
    m.insert("next_sequence".into(), Value::Null);
}

/// An `invalid_argument` answer of a history tool: the argument error plus the empty page.
pub fn invalid(e: &ArgError, tool: &str) -> Value {
    let Value::Object(mut m) = e.to_json(tool) else {
        unreachable!("ArgError::to_json returns an object")
    };
    no_continuation(&mut m);
    Value::Object(m)
}

/// The `not_found` answer of a history tool: the usual not_found plus the empty page.
pub fn not_found(target_file_id: &str) -> Value {
    let Value::Object(mut m) = crate::contract::args::not_found(target_file_id) else {
        unreachable!("not_found returns an object")
    };
    no_continuation(&mut m);
    Value::Object(m)
}

/// Which rows of a page carry their record under the 1,048,576-byte page budget: the first
/// row always (so `limit: 1` fetches any record), each later one only while the records kept
/// so far plus its own stay within the budget. A later row that does not fit is omitted and
/// the next ones are still considered.
pub fn content_plan(rows: &[AttemptRow]) -> Vec<bool> {
    let mut used: i64 = 0;
    rows.iter()
        .enumerate()
        .map(|(i, r)| {
            let keep = i == 0 || used + r.pdcp_content_bytes <= LOG_CONTENT_PAGE_BYTES as i64;
            if keep {
                used += r.pdcp_content_bytes;
            }
            keep
        })
        .collect()
}

/// A page's `{"entries":[...],"has_more":...,"next_sequence":...}`, written straight into one
/// string in the key order and spelling [`LITERAL`](crate::contract::json::LITERAL) gives the `Value` the contract describes:
/// no map is built and no stored JSON is parsed (issue 21, item 4). `entry` writes one entry.
fn page_text<R>(
    rows: impl ExactSizeIterator<Item = R>,
    has_more: bool,
    next_sequence: Option<i64>,
    per_row: usize,
    mut entry: impl FnMut(&mut Writer, R),
) -> String {
    let mut w = Writer(String::with_capacity(64 + rows.len() * per_row));
    w.0.push_str("{\"entries\":[");
    for (i, r) in rows.enumerate() {
        if i > 0 {
            w.0.push(',');
        }
        entry(&mut w, r);
    }
    w.0.push_str("],\"has_more\":");
    w.0.push_str(if has_more { "true" } else { "false" });
    w.0.push_str(",\"next_sequence\":");
    w.opt_int(next_sequence);
    w.0.push('}');
    w.0
}

/// Compact JSON written as [`LITERAL`](crate::contract::json::LITERAL) writes it. Keys are passed with their punctuation
/// (`"{\"key\":"`, `",\"key\":"`): every key of a history entry is plain ASCII.
struct Writer(String);

impl Writer {
    fn key(&mut self, k: &str) -> &mut Self {
        self.0.push_str(k);
        self
    }
    fn int(&mut self, n: i64) {
        let mut digits = [0u8; 20];
        let mut i = digits.len();
        let mut m = n.unsigned_abs();
        loop {
            i -= 1;
            digits[i] = b'0' + (m % 10) as u8;
            m /= 10;
            if m == 0 {
                break;
            }
        }
        if n < 0 {
            self.0.push('-');
        }
        // Only ASCII digits were written.
        self.0
            .push_str(std::str::from_utf8(&digits[i..]).unwrap_or_default());
    }
    fn opt_int(&mut self, n: Option<i64>) {
        match n {
            Some(n) => self.int(n),
            None => self.0.push_str("null"),
        }
    }
    fn str(&mut self, s: &str) {
        write_str(s, false, &mut self.0);
    }
    fn opt_str(&mut self, s: Option<&str>) {
        match s {
            Some(s) => self.str(s),
            None => self.0.push_str("null"),
        }
    }
    /// A timestamp: its RFC 3339 form needs no escape.
    fn time(&mut self, micros: i64) {
        self.0.push('"');
        write_rfc3339_utc(micros, &mut self.0);
        self.0.push('"');
    }
    /// Stored JSON text already in literal form ([`crate::contract::json::stored_literal`]).
    fn literal(&mut self, text: Option<&str>) {
        self.0.push_str(text.unwrap_or("null"));
    }
}

/// The page answer. `rows` are newest first, at most `page.limit + 1` of them; `cut` when the
/// page's text budget left further rows unread; `contents[i]` is the record of `rows[i]` when it
/// was fetched (`include_content` only).
pub fn log_page(
    page: &Page,
    mut rows: Vec<AttemptRow>,
    cut: bool,
    include_content: bool,
    mut contents: Vec<Option<String>>,
) -> String {
    let has_more = cut || rows.len() > page.limit;
    rows.truncate(page.limit);
    let next_sequence = if has_more {
        rows.iter().map(|r| r.log_sequence).min()
    } else {
        None
    };
    contents.resize(rows.len(), None);
    let per_row =
        1024 + contents.iter().flatten().map(String::len).sum::<usize>() / rows.len().max(1);
    page_text(
        rows.iter().zip(&contents),
        has_more,
        next_sequence,
        per_row,
        |w, (r, c)| log_entry(w, r, include_content.then_some(c.as_deref())),
    )
}

/// A log entry in the contract's key order; `diagnostic` is the stored text as it is.
fn log_entry(w: &mut Writer, r: &AttemptRow, content: Option<Option<&str>>) {
    w.key("{\"log_sequence\":").int(r.log_sequence);
    w.key(",\"pdcp_log_id\":").str(&r.pdcp_log_id);
    w.key(",\"target_file_id\":").str(&r.target_file_id);
    w.key(",\"editing_cycle_id\":").str(&r.editing_cycle_id);
    w.key(",\"status\":").str(&r.status);
    w.key(",\"protocol_version\":").str(&r.protocol_version);
    w.key(",\"runtime_version\":").str(&r.runtime_version);
    w.key(",\"pdcp_content_hash\":").str(&r.pdcp_content_hash);
    w.key(",\"request_fingerprint\":")
        .str(&r.request_fingerprint);
    w.key(",\"client_request_id\":")
        .opt_str(r.client_request_id.as_deref());
    w.key(",\"conflicts_with_pdcp_log_id\":")
        .opt_str(r.conflicts_with_pdcp_log_id.as_deref());
    w.key(",\"before_version\":").int(r.before_version);
    w.key(",\"before_hash\":").str(&r.before_hash);
    w.key(",\"after_version\":").opt_int(r.after_version);
    w.key(",\"after_hash\":").opt_str(r.after_hash.as_deref());
    w.key(",\"failure_reason\":")
        .opt_str(r.failure_reason.as_deref());
    w.key(",\"failure_detail\":")
        .opt_str(r.failure_detail.as_deref());
    w.key(",\"failure_stage\":")
        .opt_str(r.failure_stage.as_deref());
    w.key(",\"failed_change_id\":")
        .opt_str(r.failed_change_id.as_deref());
    w.key(",\"parent_pdcp_log_id\":")
        .opt_str(r.parent_pdcp_log_id.as_deref());
    w.key(",\"regeneration_attempt\":").opt_int(r.attempt);
    w.key(",\"attempt\":").opt_int(r.attempt);
    w.key(",\"source\":").str(&r.source);
    w.key(",\"diagnostic\":")
        .literal(r.diagnostic_text.as_deref());
    match &r.intent_head {
        None => w.key(",\"intent\":null,\"intent_truncated\":null"),
        Some(s) => {
            w.key(",\"intent\":")
                .str(head_chars(s, LOG_INTENT_MAX_CHARS));
            w.key(if char_len(s) > LOG_INTENT_MAX_CHARS {
                ",\"intent_truncated\":true"
            } else {
                ",\"intent_truncated\":false"
            })
        }
    };
    w.key(",\"created_at\":").time(r.created_at_us);
    if let Some(c) = content {
        w.key(",\"pdcp_content\":").opt_str(c);
        w.key(if c.is_none() {
            ",\"pdcp_content_omitted\":\"page_byte_budget\""
        } else {
            ",\"pdcp_content_omitted\":null"
        });
    }
    w.0.push('}');
}

/// One ledger row as the ledger query returns it, with its attempt's transaction intent.
#[derive(Debug, Clone, PartialEq)]
pub struct LedgerRow {
    pub ledger_sequence: i64,
    pub pdcp_log_id: String,
    pub log_sequence: i64,
    pub before_version: i64,
    pub after_version: i64,
    pub editing_cycle_id: String,
    pub change_index: i64,
    pub change_id: String,
    /// Stored meaning: the change's rationale when present, otherwise the transaction intent.
    pub intent: Option<String>,
    pub transaction_intent: Option<String>,
    pub rationale: Option<String>,
    pub risk: Option<String>,
    pub origin: String,
    /// The stored `derived` facts as literal-form JSON text
    /// ([`crate::contract::json::stored_literal`]); `None` shows as null.
    pub derived: Option<String>,
    pub created_at_us: i64,
}

/// The ledger answer. `rows` are the newest first, at most `page.limit + 1`; `cut` when the
/// page's text budget left further rows unread; the page is displayed oldest first and
/// `next_sequence` is its smallest ledger_sequence.
pub fn ledger_page(page: &Page, mut rows: Vec<LedgerRow>, cut: bool) -> String {
    let has_more = cut || rows.len() > page.limit;
    rows.truncate(page.limit);
    let next_sequence = if has_more {
        rows.iter().map(|r| r.ledger_sequence).min()
    } else {
        None
    };
    rows.sort_by_key(|r| r.ledger_sequence);
    page_text(rows.iter(), has_more, next_sequence, 768, ledger_entry)
}

/// A ledger entry in the contract's key order. Typed rows make no claim about input/output
/// state, affected region or visible change: the four prose fields are null.
fn ledger_entry(w: &mut Writer, r: &LedgerRow) {
    w.key("{\"ledger_sequence\":").int(r.ledger_sequence);
    w.key(",\"pdcp_log_id\":").str(&r.pdcp_log_id);
    w.key(",\"log_sequence\":").int(r.log_sequence);
    w.key(",\"before_version\":").int(r.before_version);
    w.key(",\"after_version\":").int(r.after_version);
    w.key(",\"editing_cycle_id\":").str(&r.editing_cycle_id);
    w.key(",\"change_index\":").int(r.change_index);
    w.key(",\"change_id\":").str(&r.change_id);
    w.key(",\"intent\":").opt_str(r.intent.as_deref());
    w.key(",\"transaction_intent\":")
        .opt_str(r.transaction_intent.as_deref());
    w.key(",\"rationale\":").opt_str(r.rationale.as_deref());
    w.key(",\"input_state\":null,\"output_state\":null,\"affected_region\":null,\"user_visible_change\":null");
    w.key(",\"risk\":").opt_str(r.risk.as_deref());
    w.key(",\"origin\":").str(&r.origin);
    w.key(",\"derived\":").literal(r.derived.as_deref());
    w.key(",\"created_at\":").time(r.created_at_us);
    w.0.push('}');
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The implementation before issue 21, item 4 (a `Value` per row, stored JSON parsed), kept
    /// as the oracle the written pages are compared with.
    mod before {
        use super::*;
        use crate::contract::time::rfc3339_utc;

        /// The page answer. `rows` are newest first, at most `page.limit + 1` of them; `contents[i]`
        /// is the record of `rows[i]` when it was fetched (`include_content` only).
        pub fn log_page(
            page: &Page,
            mut rows: Vec<AttemptRow>,
            include_content: bool,
            mut contents: Vec<Option<String>>,
        ) -> Value {
            let has_more = rows.len() > page.limit;
            rows.truncate(page.limit);
            let next_sequence = if has_more {
                rows.iter().map(|r| r.log_sequence).min()
            } else {
                None
            };
            contents.resize(rows.len(), None);
            let entries: Vec<Value> = rows
                .into_iter()
                .zip(contents)
                .map(|(r, c)| log_entry(r, include_content.then_some(c)))
                .collect();
            json!({
                "entries": entries,
                "has_more": has_more,
                "next_sequence": next_sequence,
            })
        }

        fn log_entry(r: AttemptRow, content: Option<Option<String>>) -> Value {
            let (intent, intent_truncated) = match &r.intent_head {
                None => (Value::Null, Value::Null),
                Some(s) => (
                    json!(head_chars(s, LOG_INTENT_MAX_CHARS)),
                    json!(char_len(s) > LOG_INTENT_MAX_CHARS),
                ),
            };
            let mut m = Map::new();
            let mut put = |k: &str, v: Value| {
                m.insert(k.to_owned(), v);
            };
            put("log_sequence", json!(r.log_sequence));
            put("pdcp_log_id", json!(r.pdcp_log_id));
            put("target_file_id", json!(r.target_file_id));
            put("editing_cycle_id", json!(r.editing_cycle_id));
            put("status", json!(r.status));
            put("protocol_version", json!(r.protocol_version));
            put("runtime_version", json!(r.runtime_version));
            put("pdcp_content_hash", json!(r.pdcp_content_hash));
            put("request_fingerprint", json!(r.request_fingerprint));
            put("client_request_id", json!(r.client_request_id));
            put(
                "conflicts_with_pdcp_log_id",
                json!(r.conflicts_with_pdcp_log_id),
            );
            put("before_version", json!(r.before_version));
            put("before_hash", json!(r.before_hash));
            put("after_version", json!(r.after_version));
            put("after_hash", json!(r.after_hash));
            put("failure_reason", json!(r.failure_reason));
            put("failure_detail", json!(r.failure_detail));
            put("failure_stage", json!(r.failure_stage));
            put("failed_change_id", json!(r.failed_change_id));
            put("parent_pdcp_log_id", json!(r.parent_pdcp_log_id));
            put("regeneration_attempt", json!(r.attempt));
            put("attempt", json!(r.attempt));
            put("source", json!(r.source));
            put("diagnostic", r.diagnostic.unwrap_or(Value::Null));
            put("intent", intent);
            put("intent_truncated", intent_truncated);
            put("created_at", json!(rfc3339_utc(r.created_at_us)));
            if let Some(c) = content {
                let omitted = if c.is_none() {
                    json!("page_byte_budget")
                } else {
                    Value::Null
                };
                put("pdcp_content", json!(c));
                put("pdcp_content_omitted", omitted);
            }
            Value::Object(m)
        }

        /// One ledger row as the ledger query returns it, with its attempt's transaction intent.
        #[derive(Debug, Clone, PartialEq)]
        pub struct LedgerRow {
            pub ledger_sequence: i64,
            pub pdcp_log_id: String,
            pub log_sequence: i64,
            pub before_version: i64,
            pub after_version: i64,
            pub editing_cycle_id: String,
            pub change_index: i64,
            pub change_id: String,
            /// Stored meaning: the change's rationale when present, otherwise the transaction intent.
            pub intent: Option<String>,
            pub transaction_intent: Option<String>,
            pub rationale: Option<String>,
            pub risk: Option<String>,
            pub origin: String,
            pub derived: Value,
            pub created_at_us: i64,
        }

        /// The ledger answer. `rows` are the newest first, at most `page.limit + 1`; the page is
        /// displayed oldest first and `next_sequence` is its smallest ledger_sequence.
        pub fn ledger_page(page: &Page, mut rows: Vec<LedgerRow>) -> Value {
            let has_more = rows.len() > page.limit;
            rows.truncate(page.limit);
            let next_sequence = if has_more {
                rows.iter().map(|r| r.ledger_sequence).min()
            } else {
                None
            };
            rows.sort_by_key(|r| r.ledger_sequence);
            let entries: Vec<Value> = rows.into_iter().map(ledger_entry).collect();
            json!({
                "entries": entries,
                "has_more": has_more,
                "next_sequence": next_sequence,
            })
        }

        /// A ledger entry in the contract's key order. Typed rows make no claim about input/output
        /// state, affected region or visible change: the four prose fields are null.
        fn ledger_entry(r: LedgerRow) -> Value {
            json!({
                "ledger_sequence": r.ledger_sequence,
                "pdcp_log_id": r.pdcp_log_id,
                "log_sequence": r.log_sequence,
                "before_version": r.before_version,
                "after_version": r.after_version,
                "editing_cycle_id": r.editing_cycle_id,
                "change_index": r.change_index,
                "change_id": r.change_id,
                "intent": r.intent,
                "transaction_intent": r.transaction_intent,
                "rationale": r.rationale,
                "input_state": null,
                "output_state": null,
                "affected_region": null,
                "user_visible_change": null,
                "risk": r.risk,
                "origin": r.origin,
                "derived": r.derived,
                "created_at": rfc3339_utc(r.created_at_us),
            })
        }
    }

    /// The written pages, read back as values for the tests that check their content.
    fn log_page(p: &Page, rows: Vec<AttemptRow>, inc: bool, c: Vec<Option<String>>) -> Value {
        serde_json::from_str(&super::log_page(p, rows, false, inc, c)).unwrap()
    }
    fn ledger_page(p: &Page, rows: Vec<LedgerRow>) -> Value {
        serde_json::from_str(&super::ledger_page(p, rows, false)).unwrap()
    }

    /// A small deterministic generator for whole pages of rows.
    struct Gen(crate::contract::rng::XorShift);

    impl Gen {
        fn next(&mut self) -> u64 {
            self.0.next_u64()
        }
        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
        fn chance(&mut self) -> bool {
            self.below(2) == 0
        }
        fn int(&mut self) -> i64 {
            match self.below(4) {
                0 => i64::MIN,
                1 => i64::MAX,
                2 => self.below(1000) as i64 - 500,
                _ => self.next() as i64,
            }
        }
        fn text(&mut self, max: u64) -> String {
            const CHARS: &[char] = &[
                'a', 'Z', '0', ' ', '"', '\\', '/', '\n', '\r', '\t', '\u{0}', '\u{1}', '\u{8}',
                '\u{c}', '\u{1f}', '\u{7f}', 'é', '中', '🌍', '\u{2028}', '\u{feff}',
            ];
            let n = self.below(max + 1);
            (0..n)
                .map(|_| CHARS[self.below(CHARS.len() as u64) as usize])
                .collect()
        }
        fn opt_text(&mut self, max: u64) -> Option<String> {
            self.chance().then(|| self.text(max))
        }
        /// A stored `json` column's text: mostly as this extension writes it, sometimes in a
        /// spelling only a hand-written row could have.
        fn stored(&mut self) -> String {
            const ODD: &[&str] = &[
                r#"{"a": 1}"#,
                r#" {"é":"\u00e9"} "#,
                r#"{"k":1,"k":2,"j":3}"#,
                "[1.0,-0,1e2,18446744073709551616,-9223372036854775809,0.1]",
                r#""\/\u0041\u001F\u000a""#,
                "{}",
                "null",
                "[]",
            ];
            if self.below(4) == 0 {
                return ODD[self.below(ODD.len() as u64) as usize].to_owned();
            }
            let v = json!({
                "warnings": [self.text(6), self.int()],
                "count": self.next(),
                "nested": {"s": self.text(4), "n": self.int(), "z": null, "b": self.chance()},
            });
            let style = match self.below(3) {
                0 => crate::contract::json::ASCII,
                _ => crate::contract::json::LITERAL,
            };
            crate::contract::json::to_string(&v, style)
        }
    }

    fn any_log_row(g: &mut Gen, seq: i64) -> (AttemptRow, Option<Value>) {
        let stored = g.chance().then(|| g.stored());
        let row = AttemptRow {
            log_sequence: seq,
            pdcp_log_id: g.text(8),
            target_file_id: g.text(8),
            editing_cycle_id: g.text(8),
            status: g.text(3),
            protocol_version: g.text(3),
            runtime_version: g.text(3),
            pdcp_content_hash: g.text(3),
            request_fingerprint: g.text(3),
            client_request_id: g.opt_text(5),
            conflicts_with_pdcp_log_id: g.opt_text(5),
            before_version: g.int(),
            before_hash: g.text(3),
            after_version: g.chance().then(|| g.int()),
            after_hash: g.opt_text(3),
            failure_reason: g.opt_text(3),
            failure_detail: g.opt_text(12),
            failure_stage: g.opt_text(3),
            failed_change_id: g.opt_text(3),
            parent_pdcp_log_id: g.opt_text(3),
            attempt: g.chance().then(|| g.int()),
            source: g.text(3),
            diagnostic_text: stored
                .clone()
                .map(|t| crate::contract::json::stored_literal(t).unwrap()),
            intent_head: g.chance().then(|| g.text(300)),
            pdcp_content_bytes: g.below(100) as i64,
            created_at_us: g.int() / 1000,
            ..AttemptRow::default()
        };
        let parsed = stored.map(|t| serde_json::from_str(&t).unwrap());
        (row, parsed)
    }

    fn any_ledger_row(g: &mut Gen, seq: i64) -> (LedgerRow, before::LedgerRow) {
        let stored = g.stored();
        let old = before::LedgerRow {
            ledger_sequence: seq,
            pdcp_log_id: g.text(8),
            log_sequence: g.int(),
            before_version: g.int(),
            after_version: g.int(),
            editing_cycle_id: g.text(8),
            change_index: g.int(),
            change_id: g.text(6),
            intent: g.opt_text(20),
            transaction_intent: g.opt_text(20),
            rationale: g.opt_text(20),
            risk: g.opt_text(5),
            origin: g.text(5),
            derived: serde_json::from_str(&stored).unwrap(),
            created_at_us: g.int() / 1000,
        };
        let new = LedgerRow {
            ledger_sequence: old.ledger_sequence,
            pdcp_log_id: old.pdcp_log_id.clone(),
            log_sequence: old.log_sequence,
            before_version: old.before_version,
            after_version: old.after_version,
            editing_cycle_id: old.editing_cycle_id.clone(),
            change_index: old.change_index,
            change_id: old.change_id.clone(),
            intent: old.intent.clone(),
            transaction_intent: old.transaction_intent.clone(),
            rationale: old.rationale.clone(),
            risk: old.risk.clone(),
            origin: old.origin.clone(),
            derived: Some(crate::contract::json::stored_literal(stored).unwrap()),
            created_at_us: old.created_at_us,
        };
        (new, old)
    }

    proptest::proptest! {
        /// Issue 21, item 4 ("no behaviour change"): for any rows, stored JSON spellings, limit
        /// and contents, the pages written straight into text are byte for byte what the
        /// `Value`-building pages serialised with LITERAL (as the extension answers) were.
        #[test]
        fn same_bytes(seed in 1u64.., limit in 1usize..8, n in 0usize..10, include_content: bool) {
            use crate::contract::json::{LITERAL, to_string};
            let mut g = Gen(crate::contract::rng::XorShift(seed));
            let p = Page { limit, max_sequence: i64::MAX };
            let (new_rows, diagnostics): (Vec<AttemptRow>, Vec<Option<Value>>) =
                (0..n).map(|i| any_log_row(&mut g, 100 - i as i64)).unzip();
            let old_rows: Vec<AttemptRow> = new_rows
                .iter()
                .zip(diagnostics)
                .map(|(r, d)| AttemptRow { diagnostic: d, diagnostic_text: None, ..r.clone() })
                .collect();
            let contents: Vec<Option<String>> =
                (0..g.below(n as u64 + 1)).map(|_| g.opt_text(40)).collect();
            let new = super::log_page(&p, new_rows, false, include_content, contents.clone());
            let old = to_string(&before::log_page(&p, old_rows, include_content, contents), LITERAL);
            proptest::prop_assert_eq!(new, old);

            let (new_rows, old_rows): (Vec<LedgerRow>, Vec<before::LedgerRow>) =
                (0..n).map(|i| any_ledger_row(&mut g, 100 - i as i64)).unzip();
            let new = super::ledger_page(&p, new_rows, false);
            let old = to_string(&before::ledger_page(&p, old_rows), LITERAL);
            proptest::prop_assert_eq!(new, old);
        }
    }

    /// limits::HISTORY_PAGE_TEXT_BYTES: a page its text budget ended early (fewer rows than its
    /// limit) says `has_more: true` and continues below its smallest sequence, for the log and
    /// the ledger; otherwise it is the page those rows always made.
    #[test]
    fn a_page_its_budget_ended_continues_where_it_stopped() {
        use crate::contract::json::{LITERAL, to_string};
        let mut g = Gen(crate::contract::rng::XorShift(7));
        let p = Page {
            limit: 50,
            max_sequence: i64::MAX,
        };
        let rows: Vec<AttemptRow> = (0..2).map(|i| any_log_row(&mut g, 90 - i).0).collect();
        let v: Value =
            serde_json::from_str(&super::log_page(&p, rows.clone(), true, false, vec![])).unwrap();
        assert_eq!(
            (&v["has_more"], &v["next_sequence"]),
            (&json!(true), &json!(89))
        );
        assert_eq!(v["entries"].as_array().unwrap().len(), 2);
        let whole: Value =
            serde_json::from_str(&super::log_page(&p, rows, false, false, vec![])).unwrap();
        assert_eq!(
            (&whole["has_more"], &whole["next_sequence"]),
            (&json!(false), &Value::Null)
        );
        assert_eq!(whole["entries"], v["entries"]);
        let (rows, old): (Vec<LedgerRow>, Vec<before::LedgerRow>) =
            (0..3).map(|i| any_ledger_row(&mut g, 40 - i)).unzip();
        let v: Value = serde_json::from_str(&super::ledger_page(&p, rows, true)).unwrap();
        assert_eq!(
            (&v["has_more"], &v["next_sequence"]),
            (&json!(true), &json!(38))
        );
        let entries: Value =
            serde_json::from_str(&to_string(&before::ledger_page(&p, old), LITERAL)).unwrap();
        assert_eq!(v["entries"], entries["entries"]);
    }

    fn page(v: Value) -> Result<Page, ArgError> {
        parse_page(&Args::parse(&v.to_string(), LOG_ARGS, &[]).unwrap())
    }

    /// Contract "patchdiff_get_manifest_ledger": omitted/null select 50, values above 200
    /// clamp, zero/negative/boolean/float/string are invalid_argument; before_sequence is a
    /// positive non-bool integer.
    #[test]
    fn limit_and_cursor_rules() {
        let lim = |v: Value| page(json!({"limit": v})).map(|p| p.limit);
        assert_eq!(page(json!({})).unwrap().limit, 50);
        assert_eq!(lim(Value::Null), Ok(50));
        assert_eq!(lim(json!(1)), Ok(1));
        assert_eq!(lim(json!(200)), Ok(200));
        assert_eq!(lim(json!(201)), Ok(200));
        assert_eq!(lim(json!(u64::MAX)), Ok(200));
        for bad in [
            json!(0),
            json!(-1),
            json!(true),
            json!(1.5),
            json!(3.0),
            json!("3"),
        ] {
            assert_eq!(
                lim(bad.clone()).err().unwrap().code,
                "invalid_limit",
                "{bad}"
            );
        }
        let cur = |v: Value| page(json!({"before_sequence": v})).map(|p| p.max_sequence);
        assert_eq!(cur(Value::Null), Ok(i64::MAX));
        assert_eq!(cur(json!(8)), Ok(7));
        assert_eq!(cur(json!(1)), Ok(0));
        assert_eq!(cur(json!(u64::MAX)), Ok(i64::MAX));
        for bad in [json!(0), json!(-5), json!(false), json!(2.0), json!("8")] {
            assert_eq!(
                cur(bad.clone()).err().unwrap().code,
                "invalid_before_sequence",
                "{bad}"
            );
        }
    }

    #[test]
    fn log_filters_and_flags() {
        let q = parse_log(
            r#"{"target_file_id":"11111111-1111-4111-8111-111111111111","status":"rejected","content_hash":"abc","client_request_id":"legacy key with spaces","include_content":true}"#,
        )
        .unwrap();
        assert_eq!(q.status, Some("rejected"));
        assert_eq!(q.content_hash.as_deref(), Some("abc"));
        assert_eq!(
            q.client_request_id.as_deref(),
            Some("legacy key with spaces")
        );
        assert!(q.include_content);
        let code = |s: &str| parse_log(s).err().map(|e| e.code);
        let t = r#""target_file_id":"11111111-1111-4111-8111-111111111111""#;
        assert_eq!(
            code(&format!(r#"{{{t},"status":"ok"}}"#)),
            Some("invalid_status")
        );
        assert_eq!(
            code(&format!(r#"{{{t},"include_content":1}}"#)),
            Some("invalid_include_content")
        );
        assert_eq!(
            code(&format!(r#"{{{t},"content_hash":5}}"#)),
            Some("invalid_content_hash")
        );
        assert_eq!(
            code(&format!(r#"{{{t},"client_request_id":"a\u0000"}}"#)),
            Some("invalid_client_request_id")
        );
        assert_eq!(
            parse_ledger(&format!(r#"{{{t},"include_previous_cycles":"yes"}}"#))
                .err()
                .map(|e| e.code),
            Some("invalid_include_previous_cycles")
        );
        let e = invalid(
            &ArgError::new("invalid_limit", "x"),
            "patchdiff_get_pdcp_log",
        );
        assert_eq!(
            (
                &e["status"],
                &e["entries"],
                &e["has_more"],
                &e["next_sequence"]
            ),
            (
                &json!("invalid_argument"),
                &json!([]),
                &json!(false),
                &Value::Null
            )
        );
        let n = not_found("t");
        assert_eq!(
            (&n["status"], &n["entries"]),
            (&json!("not_found"), &json!([]))
        );
    }

    fn log_row(seq: i64, bytes: i64) -> AttemptRow {
        AttemptRow {
            log_sequence: seq,
            pdcp_log_id: format!("id{seq}"),
            target_file_id: "t".into(),
            editing_cycle_id: "c".into(),
            status: "accepted".into(),
            protocol_version: "patchdiff-tx/1".into(),
            runtime_version: "patchdiff-mvp-0.2.2".into(),
            pdcp_content_hash: "h".into(),
            request_fingerprint: "f".into(),
            client_request_id: None,
            conflicts_with_pdcp_log_id: None,
            before_version: 0,
            before_hash: "b".into(),
            after_version: Some(1),
            after_hash: Some("a".into()),
            failure_reason: None,
            failure_detail: None,
            failure_stage: None,
            failed_change_id: None,
            parent_pdcp_log_id: None,
            attempt: None,
            source: "sql".into(),
            diagnostic: None,
            intent_head: Some("x".repeat(257)),
            pdcp_content_bytes: bytes,
            created_at_us: 0,
            ..AttemptRow::default()
        }
    }

    /// Contract "patchdiff_get_pdcp_log": for sequences 1..10 with limit 3 the page is
    /// [10,9,8] with next_sequence 8; intent keeps 256 code points with intent_truncated.
    #[test]
    fn log_page_is_newest_first_with_cursor() {
        let p = Page {
            limit: 3,
            max_sequence: i64::MAX,
        };
        let rows: Vec<AttemptRow> = (7..=10).rev().map(|s| log_row(s, 10)).collect();
        let v = log_page(&p, rows, false, vec![]);
        let seqs: Vec<i64> = v["entries"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["log_sequence"].as_i64().unwrap())
            .collect();
        assert_eq!(seqs, [10, 9, 8]);
        assert_eq!(
            (&v["has_more"], &v["next_sequence"]),
            (&json!(true), &json!(8))
        );
        let e = &v["entries"][0];
        assert_eq!(char_len(e["intent"].as_str().unwrap()), 256);
        assert_eq!(e["intent_truncated"], true);
        assert!(e.get("pdcp_content").is_none());
        assert_eq!(e["created_at"], "1970-01-01T00:00:00.000000Z");
        let last = log_page(
            &p,
            (1..=3).rev().map(|s| log_row(s, 1)).collect(),
            false,
            vec![],
        );
        assert_eq!(
            (&last["has_more"], &last["next_sequence"]),
            (&json!(false), &Value::Null)
        );
    }

    /// The 1,048,576-byte page budget: the first record always whole, later ones only while
    /// they fit, each omitted one marked page_byte_budget.
    #[test]
    fn content_budget() {
        let mib = LOG_CONTENT_PAGE_BYTES as i64;
        let rows = vec![log_row(5, mib + 1), log_row(4, 1), log_row(3, 10)];
        assert_eq!(content_plan(&rows), [true, false, false]);
        let rows = vec![
            log_row(5, mib - 10),
            log_row(4, 11),
            log_row(3, 10),
            log_row(2, 1),
        ];
        assert_eq!(content_plan(&rows), [true, false, true, false]);
        let p = Page {
            limit: 2,
            max_sequence: i64::MAX,
        };
        let v = log_page(
            &p,
            vec![log_row(5, 3), log_row(4, mib)],
            true,
            vec![Some("abc".into()), None],
        );
        assert_eq!(v["entries"][0]["pdcp_content"], "abc");
        assert_eq!(v["entries"][0]["pdcp_content_omitted"], Value::Null);
        assert_eq!(v["entries"][1]["pdcp_content"], Value::Null);
        assert_eq!(v["entries"][1]["pdcp_content_omitted"], "page_byte_budget");
    }

    fn ledger_row(seq: i64) -> LedgerRow {
        LedgerRow {
            ledger_sequence: seq,
            pdcp_log_id: "p".into(),
            log_sequence: seq,
            before_version: 0,
            after_version: 1,
            editing_cycle_id: "c".into(),
            change_index: 1,
            change_id: "chg_001".into(),
            intent: Some("Rename alpha".into()),
            transaction_intent: Some("Rename alpha".into()),
            rationale: None,
            risk: None,
            origin: "typed".into(),
            derived: Some("{}".into()),
            created_at_us: 1_792_711_700_000_000,
        }
    }

    /// Contract ordering example: ledger 1..10 with limit 3 displays [8,9,10], next 8; below 8
    /// it displays [5,6,7].
    #[test]
    fn ledger_page_reverses_the_newest_page() {
        let p = Page {
            limit: 3,
            max_sequence: i64::MAX,
        };
        let seqs = |v: &Value| -> Vec<i64> {
            v["entries"]
                .as_array()
                .unwrap()
                .iter()
                .map(|e| e["ledger_sequence"].as_i64().unwrap())
                .collect()
        };
        let v = ledger_page(&p, (7..=10).rev().map(ledger_row).collect());
        assert_eq!(seqs(&v), [8, 9, 10]);
        assert_eq!(
            (&v["has_more"], &v["next_sequence"]),
            (&json!(true), &json!(8))
        );
        let v = ledger_page(&p, (4..=7).rev().map(ledger_row).collect());
        assert_eq!(seqs(&v), [5, 6, 7]);
        let keys: Vec<&String> = v["entries"][0].as_object().unwrap().keys().collect();
        assert_eq!(
            keys,
            [
                "ledger_sequence",
                "pdcp_log_id",
                "log_sequence",
                "before_version",
                "after_version",
                "editing_cycle_id",
                "change_index",
                "change_id",
                "intent",
                "transaction_intent",
                "rationale",
                "input_state",
                "output_state",
                "affected_region",
                "user_visible_change",
                "risk",
                "origin",
                "derived",
                "created_at"
            ]
        );
        assert_eq!(v["entries"][0]["created_at"], "2026-10-22T23:28:20.000000Z");
    }
}
