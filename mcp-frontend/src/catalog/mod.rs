//! The tool catalog: declarations (`tools/list`), argument names, profiles and examples.
//!
//! Each family of tools ([`Family`]) is declared in a module of its own, in catalog order:
//! targets, reads, submissions, save, history, observed, observed_v2, then the families beyond
//! the contract (issue 19): changeset and diff (Family::Extended), files (Family::Files);
//! `schema` holds the fragments they share.
//!
//! Schemas use only keywords that mean the same in JSON Schema draft-07 and 2020-12, patterns
//! that RE2 accepts, and a root `type: "object"`. Strict end-of-string identifier patterns pair
//! `$` with `not: {pattern: "\n$"}`, because `$` also matches before a final LF in some engines.

mod changeset;
mod diff;
mod files;
mod history;
mod observed;
mod observed_v2;
mod reads;
mod save;
mod schema;
mod submissions;
mod targets;
#[cfg(test)]
mod tests;

use crate::config::Profile;
use crate::tool::{Family, Tool};
use serde_json::{Map, Value, json};

/// Revisions of MCP this server speaks, newest last.
pub const REVISIONS: [&str; 3] = ["2024-11-05", "2025-06-18", "2025-11-25"];

/// What a tool does to state, for annotations and for compact projections.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Read,
    Create,
    /// Issues observations: writes authority rows, changes no target.
    Observe,
    Submit,
    Checkpoint,
}

/// One of a tool's exclusive argument forms (patchdiff_submit_observed_operations: single or
/// batch). A call uses the form whose `names` it sends, as the SQL function tells them apart.
pub struct Form {
    /// The names that select this form.
    pub names: &'static [&'static str],
    /// The names this form requires, beyond the tool's `required`.
    pub required: &'static [&'static str],
}

/// A tool's declaration: what `tools/list` says of it and the argument names a call may use.
pub struct Declaration {
    pub tool: Tool,
    /// `_meta` of the declaration on revisions after 2024-11-05 (observed_v2: alwaysLoad).
    pub meta: Option<Value>,
    pub title: &'static str,
    pub description: String,
    pub kind: Kind,
    /// Argument name, schema, required.
    pub params: Vec<(&'static str, Value, bool)>,
    /// Extra root keywords of the input schema (anyOf for guards, capabilities).
    pub root: Vec<(&'static str, Value)>,
    /// Exclusive argument forms, each with names that are required when it is the form a call
    /// uses; advertised as the root `anyOf` and enforced before SQL like `required`.
    pub forms: &'static [Form],
    pub output: Value,
    pub examples: Vec<Value>,
}

impl Declaration {
    pub fn name(&self) -> &'static str {
        self.tool.name()
    }

    /// The SQL function one call of this tool makes.
    pub fn function(&self) -> &'static str {
        self.tool.function()
    }

    pub fn allowed(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.params.iter().map(|p| p.0)
    }

    pub fn required(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.params.iter().filter(|p| p.2).map(|p| p.0)
    }

    /// The required names a call lacks, given the names it sends (`has`), in declaration
    /// order. Contract "Discovery, argument errors and examples": "A call with unknown or
    /// missing argument names never reaches the tool". Of exclusive forms, a call naming none
    /// lacks the first form's names; a call naming several lacks none of them: that is the
    /// SQL function's own `observed_form_conflict`, which writes nothing either.
    pub fn missing(&self, has: impl Fn(&str) -> bool) -> Vec<&'static str> {
        let named: Vec<&Form> = self
            .forms
            .iter()
            .filter(|f| f.names.iter().any(|n| has(n)))
            .collect();
        let form: &[&str] = match (named.as_slice(), self.forms.first()) {
            ([one], _) => one.required,
            ([], Some(first)) => first.required,
            _ => &[],
        };
        self.params
            .iter()
            .filter(|p| p.2 || form.contains(&p.0))
            .map(|p| p.0)
            .filter(|n| !has(n))
            .collect()
    }

    pub fn input_schema(&self) -> Value {
        let mut props = Map::new();
        for (name, schema, _) in &self.params {
            props.insert((*name).into(), schema.clone());
        }
        let mut s = Map::new();
        s.insert("type".into(), json!("object"));
        s.insert("properties".into(), Value::Object(props));
        let required: Vec<&str> = self.required().collect();
        if !required.is_empty() {
            s.insert("required".into(), json!(required));
        }
        s.insert("additionalProperties".into(), json!(false));
        if !self.forms.is_empty() {
            let any_of: Vec<Value> = self
                .forms
                .iter()
                .map(|f| json!({"required": f.required}))
                .collect();
            s.insert("anyOf".into(), json!(any_of));
        }
        for (k, v) in &self.root {
            s.insert((*k).into(), v.clone());
        }
        if !self.examples.is_empty() {
            s.insert("examples".into(), json!(self.examples));
        }
        Value::Object(s)
    }

    pub fn annotations(&self) -> Value {
        let (read_only, destructive, idempotent) = match self.kind {
            Kind::Read => (true, false, true),
            Kind::Create => (false, false, false),
            Kind::Observe => (false, false, false),
            Kind::Submit => (false, true, false),
            Kind::Checkpoint => (false, false, false),
        };
        json!({
            "title": self.title,
            "readOnlyHint": read_only,
            "destructiveHint": destructive,
            "idempotentHint": idempotent,
            "openWorldHint": false,
        })
    }

    /// The declaration for a connection on `revision`; newer revisions add outputSchema and
    /// annotations.
    pub fn declaration(&self, revision: &str) -> Value {
        let mut d = Map::new();
        d.insert("name".into(), json!(self.name()));
        d.insert("description".into(), json!(self.description));
        d.insert("inputSchema".into(), self.input_schema());
        if revision != REVISIONS[0] {
            d.insert("title".into(), json!(self.title));
            d.insert("outputSchema".into(), self.output.clone());
            d.insert("annotations".into(), self.annotations());
            if let Some(meta) = &self.meta {
                d.insert("_meta".into(), meta.clone());
            }
        }
        Value::Object(d)
    }
}

/// Every tool this front end can serve, in catalog order: family by family.
pub fn all_tools() -> Vec<Declaration> {
    let mut tools = targets::tools();
    tools.extend(reads::tools());
    tools.extend(submissions::tools());
    tools.extend(save::tools());
    tools.extend(history::tools());
    tools.extend(observed::tools());
    tools.extend(observed_v2::tools());
    tools.extend(changeset::tools());
    tools.extend(diff::tools());
    tools.extend(files::tools());
    tools
}

/// `_meta` of every observed_v2 declaration (observed-editor-v2.txt: "All five tools carry
/// _meta: {"antigravity/alwaysLoad": true} on modern connections").
pub fn always_load() -> Value {
    json!({"antigravity/alwaysLoad": true})
}

/// The catalog of a profile, in catalog order, before the installed-function filter: the
/// profile's tools, with observed_v2's `_meta`.
pub fn profile_tools(profile: Profile) -> Vec<Declaration> {
    let mut tools: Vec<Declaration> = all_tools()
        .into_iter()
        .filter(|t| in_profile(t.tool, profile))
        .collect();
    if profile == Profile::ObservedV2 {
        for t in &mut tools {
            t.meta = Some(always_load());
        }
    }
    tools
}

/// The tools each profile advertises and accepts.
pub fn in_profile(tool: Tool, profile: Profile) -> bool {
    use Tool::*;
    match profile {
        // The observed_v2 aliases: no other profile lists them (full lists the tools they
        // route to).
        Profile::Full => !matches!(
            tool.family(),
            Family::ObservedV2 | Family::Extended | Family::Files
        ),
        Profile::Extended => in_profile(tool, Profile::Full) || tool.family() == Family::Extended,
        Profile::Files => tool.family() == Family::Files,
        Profile::Workspace => matches!(
            tool,
            InitializeTarget | ReadTarget | FindOccurrences | SubmitEdits | Save
        ),
        Profile::Editor => matches!(
            tool,
            GetTarget
                | ReadTarget
                | ReadLines
                | FindOccurrences
                | SubmitEdits
                | SubmitOperations
                | Preview
        ),
        Profile::ObservedWorkspace => matches!(
            tool,
            InitializeTarget
                | ReadTarget
                | ReadLines
                | FindOccurrences
                | ObserveScope
                | SubmitObservedOperations
                | Save
        ),
        Profile::ObservedEditor => matches!(
            tool,
            ReadTarget | ReadLines | FindOccurrences | ObserveScope | SubmitObservedOperations
        ),
        Profile::ObservedV2 => matches!(
            tool,
            ReadTarget | FindOccurrences | ListScopes | ObserveScopes | CommitBundle
        ),
    }
}
