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
use crate::contract::json::{as_int, is_big_int, type_name};
use crate::contract::limits::{
    HISTORY_DEFAULT_LIMIT, HISTORY_MAX_LIMIT, LOG_CONTENT_PAGE_BYTES, LOG_INTENT_MAX_CHARS,
};
use crate::contract::time::rfc3339_utc;
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

#[cfg(test)]
mod tests {
    use super::*;

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
            derived: json!({}),
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
