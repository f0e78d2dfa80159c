//! The trusted manifest: the host's mapping (filename -> target) and the guards of each
//! target's last accepted receipt, validated whole before anything is called.

use serde_json::{Value, json};
use std::collections::BTreeSet;

const TARGET_KEYS: [&str; 5] = [
    "filename",
    "target_file_id",
    "expected_target_version",
    "expected_current_hash",
    "accepted_pdcp_log_id",
];

/// One target of the trusted manifest: the host's mapping and its last accepted receipt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub filename: String,
    pub target_file_id: String,
    pub expected_target_version: i64,
    pub expected_current_hash: String,
    pub accepted_pdcp_log_id: Option<String>,
}

impl Target {
    pub(crate) fn to_json(&self) -> Value {
        json!({
            "filename": self.filename,
            "target_file_id": self.target_file_id,
            "expected_target_version": self.expected_target_version,
            "expected_current_hash": self.expected_current_hash,
            "accepted_pdcp_log_id": self.accepted_pdcp_log_id,
        })
    }
}

/// Validates the whole manifest and reports every problem found, not just the first: an array
/// of targets, or `{"targets": [...]}`. Unknown keys are refused, so that a misspelt guard is
/// never silently dropped.
pub fn parse_manifest(text: &str) -> Result<Vec<Target>, Vec<String>> {
    let value: Value =
        serde_json::from_str(text).map_err(|e| vec![format!("the manifest is not JSON: {e}")])?;
    // A key given twice in one object would be read as its last value: a guard given twice, one
    // of them wrong, would go unnoticed (helper-46).
    serde_json::from_str::<NoRepeatedKeys>(text).map_err(|e| vec![e.to_string()])?;
    let items = match value {
        Value::Array(items) => items,
        Value::Object(mut o)
            if o.len() == 1 && matches!(o.get("targets"), Some(Value::Array(_))) =>
        {
            match o.remove("targets") {
                Some(Value::Array(items)) => items,
                _ => unreachable!("checked above"),
            }
        }
        _ => {
            return Err(vec![
                "the manifest must be an array of targets or {\"targets\": [...]}".into(),
            ]);
        }
    };
    if items.is_empty() {
        return Err(vec!["the manifest lists no targets".into()]);
    }
    let mut problems = Vec::new();
    let mut targets = Vec::new();
    for (i, item) in items.iter().enumerate() {
        match parse_target(item) {
            Ok(t) => targets.push(t),
            Err(p) => problems.extend(p.into_iter().map(|p| format!("targets[{i}]: {p}"))),
        }
    }
    let mut ids = BTreeSet::new();
    let mut names = BTreeSet::new();
    for t in &targets {
        if !ids.insert(t.target_file_id.as_str()) {
            problems.push(format!(
                "target_file_id {} is listed twice",
                t.target_file_id
            ));
        }
        if !names.insert(t.filename.as_str()) {
            problems.push(format!("filename {:?} is listed twice", t.filename));
        }
    }
    // exports/a and exports/a/b cannot both be files.
    for t in &targets {
        let parts: Vec<&str> = t.filename.split('/').collect();
        for k in 1..parts.len() {
            let dir = parts[..k].join("/");
            if names.contains(dir.as_str()) {
                problems.push(format!(
                    "filename {:?} is inside {dir:?}, which is also a target's filename",
                    t.filename
                ));
            }
        }
    }
    if problems.is_empty() {
        Ok(targets)
    } else {
        Err(problems)
    }
}

fn parse_target(item: &Value) -> Result<Target, Vec<String>> {
    let Value::Object(o) = item else {
        return Err(vec!["a target must be an object".into()]);
    };
    let mut problems: Vec<String> = o
        .keys()
        .filter(|k| !TARGET_KEYS.contains(&k.as_str()))
        .map(|k| format!("unknown key {k:?}"))
        .collect();
    problems.extend(
        TARGET_KEYS
            .iter()
            .filter(|k| !o.contains_key(**k))
            .map(|k| format!("missing {k}")),
    );
    let text = |k: &str| o.get(k).and_then(Value::as_str);
    let filename = text("filename");
    match filename {
        Some(f) => {
            if let Err(why) = check_filename(f) {
                problems.push(format!("filename {f:?} {why}"));
            }
        }
        None if o.contains_key("filename") => problems.push("filename must be a string".into()),
        None => {}
    }
    let id = text("target_file_id");
    if o.contains_key("target_file_id") && !id.is_some_and(is_uuid) {
        problems.push("target_file_id must be a lowercase UUID".into());
    }
    let version = match o.get("expected_target_version") {
        Some(Value::Number(n)) => n.as_i64().filter(|v| *v >= 0),
        _ => None,
    };
    if o.contains_key("expected_target_version") && version.is_none() {
        problems.push("expected_target_version must be an integer >= 0".into());
    }
    let hash = text("expected_current_hash");
    if o.contains_key("expected_current_hash") && !hash.is_some_and(is_sha256) {
        problems.push("expected_current_hash must be 64 lowercase hexadecimal characters".into());
    }
    let receipt = match o.get("accepted_pdcp_log_id") {
        Some(Value::Null) => Some(None),
        Some(Value::String(s)) if is_uuid(s) => Some(Some(s.clone())),
        _ => None,
    };
    match receipt {
        None if o.contains_key("accepted_pdcp_log_id") => {
            problems.push("accepted_pdcp_log_id must be a lowercase UUID (or null)".into());
        }
        Some(None) if version.is_some_and(|v| v != 0) => problems.push(
            "accepted_pdcp_log_id may be null only for expected_target_version 0 (no accepted edit)"
                .into(),
        ),
        _ => {}
    }
    if !problems.is_empty() {
        return Err(problems);
    }
    match (filename, id, version, hash, receipt) {
        (Some(f), Some(i), Some(v), Some(h), Some(r)) => Ok(Target {
            filename: f.to_owned(),
            target_file_id: i.to_owned(),
            expected_target_version: v,
            expected_current_hash: h.to_owned(),
            accepted_pdcp_log_id: r,
        }),
        _ => Err(vec!["incomplete target".into()]),
    }
}

/// The filename becomes `exports/<filename>`: a relative path of plain components.
fn check_filename(f: &str) -> Result<(), &'static str> {
    if f.is_empty() || f.len() > 4096 {
        return Err("must be 1 to 4096 bytes");
    }
    if f.contains('\0') {
        return Err("must not contain NUL");
    }
    if f.starts_with('/') {
        return Err("must be a relative path");
    }
    for part in f.split('/') {
        if part.is_empty() || part == "." || part == ".." {
            return Err("must be a relative path of plain components (no empty, . or ..)");
        }
        if part.len() > 255 {
            return Err("has a path component over 255 bytes");
        }
    }
    Ok(())
}

pub(crate) fn is_uuid(s: &str) -> bool {
    s.len() == 36
        && s.bytes().enumerate().all(|(i, b)| match i {
            8 | 13 | 18 | 23 => b == b'-',
            _ => b.is_ascii_digit() || (b'a'..=b'f').contains(&b),
        })
}

fn is_sha256(s: &str) -> bool {
    s.len() == 64
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// Reads JSON and keeps nothing, refusing an object that names a key twice.
struct NoRepeatedKeys;

impl<'de> serde::Deserialize<'de> for NoRepeatedKeys {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(NoRepeatedKeys)
    }
}

impl<'de> serde::de::Visitor<'de> for NoRepeatedKeys {
    type Value = NoRepeatedKeys;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("JSON")
    }

    fn visit_bool<E>(self, _: bool) -> Result<Self, E> {
        Ok(self)
    }

    fn visit_i64<E>(self, _: i64) -> Result<Self, E> {
        Ok(self)
    }

    fn visit_u64<E>(self, _: u64) -> Result<Self, E> {
        Ok(self)
    }

    fn visit_f64<E>(self, _: f64) -> Result<Self, E> {
        Ok(self)
    }

    fn visit_str<E>(self, _: &str) -> Result<Self, E> {
        Ok(self)
    }

    fn visit_unit<E>(self) -> Result<Self, E> {
        Ok(self)
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Self, A::Error> {
        while seq.next_element::<NoRepeatedKeys>()?.is_some() {}
        Ok(self)
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Self, A::Error> {
        let mut seen = BTreeSet::new();
        while let Some(key) = map.next_key::<String>()? {
            if seen.contains(&key) {
                return Err(serde::de::Error::custom(format!(
                    "the key {key:?} appears twice in one object of the manifest"
                )));
            }
            map.next_value::<NoRepeatedKeys>()?;
            seen.insert(key);
        }
        Ok(self)
    }
}
