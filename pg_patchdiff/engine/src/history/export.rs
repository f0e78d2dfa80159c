//! `patchdiff_export_target`: the canonical text written in an explicit line-ending format
//! (contract, "Line endings and export formats").
//!
//! Storage is canonical LF; an export only rewrites each LF. `hash` and `current_hash` stay the
//! canonical identity, `content_sha256` names the returned bytes. An export returns what is
//! stored: it never canonicalizes or repairs content (replay reports corrupt storage).

use crate::contract::args::{ArgError, Args};
use crate::contract::interrupt;
use crate::target::TargetView;
use crate::text::{LineEndingStyle, SourceLineEndings, sha256_hex};
use serde_json::{Value, json};
use std::borrow::Cow;

pub const EXPORT_ARGS: &[&str] = &["target_file_id", "format"];

/// Every accepted `format`, in the contract's order (`allowed_formats`).
pub const ALLOWED_FORMATS: &[&str] = &["original_text", "canonical_lf", "crlf", "original_eol"];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExportFormat {
    /// The default: canonical LF text. A legacy alias of `canonical_lf`; never original bytes.
    OriginalText,
    CanonicalLf,
    Crlf,
    /// The recorded uniform style of the upload: none/lf -> LF, crlf -> CRLF, cr -> CR.
    OriginalEol,
}

impl ExportFormat {
    pub fn as_str(self) -> &'static str {
        ALLOWED_FORMATS[self as usize]
    }
}

/// The line ending an export writes (`content_eol`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Eol {
    Lf,
    Crlf,
    Cr,
}

impl Eol {
    pub fn as_str(self) -> &'static str {
        match self {
            Eol::Lf => "lf",
            Eol::Crlf => "crlf",
            Eol::Cr => "cr",
        }
    }

    fn text(self) -> &'static str {
        match self {
            Eol::Lf => "\n",
            Eol::Crlf => "\r\n",
            Eol::Cr => "\r",
        }
    }
}

/// `format`: omitted or null selects `original_text`; anything else that is not one of
/// [`ALLOWED_FORMATS`] (another string or another JSON type) is `unsupported_export_format`.
pub fn parse_format(a: &Args) -> Result<ExportFormat, ArgError> {
    let formats = [
        ExportFormat::OriginalText,
        ExportFormat::CanonicalLf,
        ExportFormat::Crlf,
        ExportFormat::OriginalEol,
    ];
    match a.get("format") {
        None | Some(Value::Null) => Ok(ExportFormat::OriginalText),
        Some(Value::String(s)) if ALLOWED_FORMATS.contains(&s.as_str()) => {
            Ok(formats[ALLOWED_FORMATS.iter().position(|f| f == s).unwrap_or(0)])
        }
        Some(v) => Err(ArgError::new(
            "unsupported_export_format",
            format!(
                "format {} is not supported; use one of {}",
                crate::contract::json::to_string(v, crate::contract::json::LITERAL),
                ALLOWED_FORMATS.join(", ")
            ),
        )
        .with("allowed_formats", json!(ALLOWED_FORMATS))),
    }
}

/// The line ending `format` writes for a target whose recorded upload facts are
/// `source_line_endings` (the stored object, or null when unknown).
pub fn content_eol(format: ExportFormat, source_line_endings: &Value) -> Result<Eol, ArgError> {
    match format {
        ExportFormat::OriginalText | ExportFormat::CanonicalLf => Ok(Eol::Lf),
        ExportFormat::Crlf => Ok(Eol::Crlf),
        ExportFormat::OriginalEol => {
            let Some(facts) = SourceLineEndings::from_json(source_line_endings) else {
                return Err(ArgError::new(
                    "source_line_endings_unknown",
                    "original_eol needs the upload's recorded line endings, and this target has none (source_line_endings is null); choose canonical_lf or crlf",
                ));
            };
            match facts.style() {
                LineEndingStyle::None | LineEndingStyle::Lf => Ok(Eol::Lf),
                LineEndingStyle::Crlf => Ok(Eol::Crlf),
                LineEndingStyle::Cr => Ok(Eol::Cr),
                LineEndingStyle::Mixed => Err(ArgError::new(
                    "original_eol_unrecoverable",
                    "the upload mixed line-ending styles and per-line endings were never stored; choose canonical_lf or crlf",
                )),
            }
        }
    }
}

/// `content` with every LF written as `eol`.
pub fn write_eol(content: &str, eol: Eol) -> Cow<'_, str> {
    if eol == Eol::Lf || memchr::memchr(b'\n', content.as_bytes()).is_none() {
        return Cow::Borrowed(content);
    }
    let extra = if eol == Eol::Crlf {
        memchr::memchr_iter(b'\n', content.as_bytes()).count()
    } else {
        0
    };
    let mut out = String::with_capacity(content.len() + extra);
    let mut last = 0;
    let mut ticks = interrupt::Every::new(interrupt::SEARCH_INTERVAL);
    for at in memchr::memchr_iter(b'\n', content.as_bytes()) {
        ticks.tick();
        out.push_str(&content[last..at]);
        out.push_str(eol.text());
        last = at + 1;
    }
    out.push_str(&content[last..]);
    Cow::Owned(out)
}

/// Stored metadata an export repeats.
pub struct ExportMeta<'a> {
    pub filename: &'a str,
    pub target_type: &'a str,
    /// The stored object, or null for a target without recorded facts.
    pub source_line_endings: &'a Value,
}

/// The export response, in the contract's key order: status, filename, content_type,
/// target_type, content, version, hash, current_hash, format, content_eol, content_sha256,
/// source_line_endings.
pub fn export(t: &TargetView, m: &ExportMeta, format: ExportFormat) -> Result<Value, ArgError> {
    let eol = content_eol(format, m.source_line_endings)?;
    let content = write_eol(t.content, eol);
    let content_sha256 = sha256_hex(&content);
    Ok(json!({
        "status": "ok",
        "filename": m.filename,
        "content_type": m.target_type,
        "target_type": m.target_type,
        "content": content,
        "version": t.version,
        "hash": t.current_hash,
        "current_hash": t.current_hash,
        "format": format.as_str(),
        "content_eol": eol.as_str(),
        "content_sha256": content_sha256,
        "source_line_endings": m.source_line_endings,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(content: &str) -> TargetView<'_> {
        TargetView {
            target_file_id: "t",
            version: 3,
            current_hash: "h",
            content,
        }
    }

    fn run(content: &str, raw_upload: Option<&str>, format: &str) -> Result<Value, ArgError> {
        let facts = raw_upload.map_or(Value::Null, |r| SourceLineEndings::of(r).to_json());
        let a = Args::parse(
            &json!({"target_file_id": "x", "format": format}).to_string(),
            EXPORT_ARGS,
            &[],
        )
        .unwrap();
        let meta = ExportMeta {
            filename: "doc.md",
            target_type: "text/markdown",
            source_line_endings: &facts,
        };
        export(&view(content), &meta, parse_format(&a)?)
    }

    /// Contract "Line endings and export formats": an unedited CRLF upload exported with
    /// original_eol has content_sha256 == source_line_endings.source_sha256.
    #[test]
    fn unedited_crlf_upload_round_trips_with_original_eol() {
        let raw = "alpha\r\nbeta\r\n\r\nend";
        let r = run("alpha\nbeta\n\nend", Some(raw), "original_eol").unwrap();
        assert_eq!(r["content"], raw);
        assert_eq!(r["content_eol"], "crlf");
        assert_eq!(r["content_sha256"], sha256_hex(raw));
        assert_eq!(
            r["content_sha256"],
            r["source_line_endings"]["source_sha256"]
        );
        let keys: Vec<&String> = r.as_object().unwrap().keys().collect();
        assert_eq!(
            keys,
            [
                "status",
                "filename",
                "content_type",
                "target_type",
                "content",
                "version",
                "hash",
                "current_hash",
                "format",
                "content_eol",
                "content_sha256",
                "source_line_endings"
            ]
        );
        let cr = run("a\nb\n", Some("a\rb\r"), "original_eol").unwrap();
        assert_eq!(
            (&cr["content"], &cr["content_eol"]),
            (&json!("a\rb\r"), &json!("cr"))
        );
        // none and lf both write LF.
        let none = run("a\nb", Some("ab"), "original_eol").unwrap();
        assert_eq!(
            (&none["content"], &none["content_eol"]),
            (&json!("a\nb"), &json!("lf"))
        );
    }

    /// original_text is the default and, like canonical_lf, canonical LF text; crlf writes
    /// every LF as CRLF; hash and current_hash stay the canonical identity.
    #[test]
    fn formats_write_each_lf() {
        let a = Args::parse(r#"{"target_file_id":"x"}"#, EXPORT_ARGS, &[]).unwrap();
        assert_eq!(parse_format(&a), Ok(ExportFormat::OriginalText));
        let a = Args::parse(r#"{"format":null}"#, EXPORT_ARGS, &[]).unwrap();
        assert_eq!(parse_format(&a), Ok(ExportFormat::OriginalText));
        for f in ["original_text", "canonical_lf"] {
            let r = run("x\ny\n", Some("x\r\ny\r\n"), f).unwrap();
            assert_eq!(
                (&r["content"], &r["content_eol"]),
                (&json!("x\ny\n"), &json!("lf"))
            );
            assert_eq!(r["format"], f);
            assert_eq!(r["content_sha256"], sha256_hex("x\ny\n"));
        }
        let r = run("x\ny\n", None, "crlf").unwrap();
        assert_eq!(
            (&r["content"], &r["content_eol"]),
            (&json!("x\r\ny\r\n"), &json!("crlf"))
        );
        assert_eq!((&r["hash"], &r["current_hash"]), (&json!("h"), &json!("h")));
        assert_eq!(r["source_line_endings"], Value::Null);
        assert_eq!(write_eol("", Eol::Crlf), "");
        assert_eq!(write_eol("\n\n", Eol::Cr), "\r\r");
    }

    /// original_eol_unrecoverable for a mixed upload, source_line_endings_unknown without
    /// recorded facts, unsupported_export_format with allowed_formats for anything else.
    #[test]
    fn export_refusals() {
        let code = |r: Result<Value, ArgError>| r.err().map(|e| e.code);
        assert_eq!(
            code(run("a\nb\n", Some("a\nb\r\n"), "original_eol")),
            Some("original_eol_unrecoverable")
        );
        assert_eq!(
            code(run("a\n", None, "original_eol")),
            Some("source_line_endings_unknown")
        );
        let e = run("a\n", None, "lf").err().unwrap();
        assert_eq!(e.code, "unsupported_export_format");
        assert_eq!(
            e.to_json("patchdiff_export_target")["allowed_formats"],
            json!(["original_text", "canonical_lf", "crlf", "original_eol"])
        );
        let a = Args::parse(r#"{"format":1}"#, EXPORT_ARGS, &[]).unwrap();
        assert_eq!(
            parse_format(&a).err().unwrap().code,
            "unsupported_export_format"
        );
        // A mixed upload can still be exported in an explicit style.
        assert!(run("a\nb\n", Some("a\nb\r\n"), "crlf").is_ok());
    }
}
