//! TypeScript and JavaScript naming rules (docs/structural-names.md "TypeScript / JavaScript").

mod support;

use patchdiff_waymark::Language;
use support::{assert_scope, checked, rows};

const TS: &str = r#"// 🌟 中 — retry settings
import { Base } from "./base";

export const FRAME_SYNC_STREAM = "frame-sync";
const retryCount = 3, timeout = 30;
let handler = (req: Request) => req;
var legacy = function named() { return retryCount; };

export interface RetryOptions {
  retryCount: number;
  timeout?: number;
}

export type Timeout = number | "none";

enum Mode { Fast, Slow }

export default class Client extends Base {
  @observable timeout: Timeout = 30;
  private retryCount = 3;

  constructor(opts: RetryOptions) {
    super();
  }

  get retries(): number {
    return this.retryCount;
  }

  set retries(v: number) {
    this.retryCount = v;
  }

  @log
  async send(body: string): Promise<void> {
    function backoff(n: number) {
      return n * timeout;
    }
    await backoff(1);
  }
}

function parse(x: string): number;
function parse(x: number): number;
function parse(x: any): number {
  return Number(x);
}

export function timeoutFor(retryCount: number) {
  const local = retryCount;
  return local * timeout;
}
"#;

const JS: &str = r#"/* 🌟 中 */
export const timeout = 30;
const Widget = class {
  retry_count = 3;
  static #secret = "s";
  *items() { yield this.retry_count; }
};
export function* ids() { yield 1; }
export default function () { return timeout; }
class Poller {
  timeout = timeout;
  poll() {
    const retry_count = 2;
    class Inner { run() {} }
    return retry_count;
  }
}
let { a, b } = obj;
const config = { retry_count: 1, nested() {} };
"#;

#[test]
fn typescript_symbols_have_exact_kinds_names_parents_and_paths() {
    let o = checked(Language::TypeScript, TS);
    assert!(!o.has_errors);
    assert_eq!(
        rows(&o),
        vec![
            ("variable", "FRAME_SYNC_STREAM", None, "FRAME_SYNC_STREAM"),
            ("variable", "retryCount", None, "retryCount"),
            ("variable", "timeout", None, "timeout"),
            ("function", "handler", None, "handler"),
            ("function", "legacy", None, "legacy"),
            ("interface", "RetryOptions", None, "RetryOptions"),
            ("type", "Timeout", None, "Timeout"),
            ("enum", "Mode", None, "Mode"),
            ("class", "Client", None, "Client"),
            ("variable", "timeout", Some("Client"), "Client.timeout"),
            (
                "variable",
                "retryCount",
                Some("Client"),
                "Client.retryCount"
            ),
            (
                "method",
                "constructor",
                Some("Client"),
                "Client.constructor"
            ),
            ("method", "retries", Some("Client"), "Client.retries"),
            ("method", "retries", Some("Client"), "Client.retries"),
            ("method", "send", Some("Client"), "Client.send"),
            (
                "function",
                "backoff",
                Some("Client.send"),
                "Client.send.backoff"
            ),
            ("function", "parse", None, "parse"),
            ("function", "timeoutFor", None, "timeoutFor"),
        ]
    );
}

#[test]
fn typescript_export_wrapped_declaration_scope_is_the_whole_export_statement() {
    let o = checked(Language::TypeScript, TS);
    assert_scope(
        TS,
        &o,
        "FRAME_SYNC_STREAM",
        4,
        4,
        "export const FRAME_SYNC_STREAM = \"frame-sync\";",
    );
    assert_scope(
        TS,
        &o,
        "Timeout",
        14,
        14,
        "export type Timeout = number | \"none\";",
    );
    assert_scope(
        TS,
        &o,
        "RetryOptions",
        9,
        12,
        "export interface RetryOptions {\n  retryCount: number;\n  timeout?: number;\n}",
    );
    let client = o.symbols.iter().find(|s| s.path == "Client").unwrap();
    assert_eq!((client.start_line, client.end_line), (18, 41));
    assert!(support::scope_text(TS, client).starts_with("export default class Client"));
}

#[test]
fn typescript_multi_declarator_statement_scopes_each_declarator() {
    let o = checked(Language::TypeScript, TS);
    assert_scope(TS, &o, "retryCount", 5, 5, "retryCount = 3");
    assert_scope(TS, &o, "timeout", 5, 5, "timeout = 30");
    // A single declarator's scope is the whole statement.
    assert_scope(
        TS,
        &o,
        "handler",
        6,
        6,
        "let handler = (req: Request) => req;",
    );
}

#[test]
fn typescript_class_members_include_decorators_and_semicolons() {
    let o = checked(Language::TypeScript, TS);
    assert_scope(
        TS,
        &o,
        "Client.timeout",
        19,
        19,
        "@observable timeout: Timeout = 30;",
    );
    assert_scope(
        TS,
        &o,
        "Client.retryCount",
        20,
        20,
        "private retryCount = 3;",
    );
    assert_scope(
        TS,
        &o,
        "Client.retries",
        26,
        28,
        "get retries(): number {\n    return this.retryCount;\n  }",
    );
    assert_scope(
        TS,
        &o,
        "Client.retries",
        30,
        32,
        "set retries(v: number) {\n    this.retryCount = v;\n  }",
    );
    let send = o.symbols.iter().find(|s| s.path == "Client.send").unwrap();
    assert_eq!((send.start_line, send.end_line), (34, 40));
    assert!(support::scope_text(TS, send).starts_with("@log\n  async send("));
}

#[test]
fn typescript_overload_signatures_join_their_implementation() {
    let o = checked(Language::TypeScript, TS);
    assert_scope(
        TS,
        &o,
        "parse",
        43,
        47,
        "function parse(x: string): number;\nfunction parse(x: number): number;\nfunction parse(x: any): number {\n  return Number(x);\n}",
    );
    let text = "class K {\n  m(a: string): void;\n  m(a: any) {}\n  n(): void;\n}\ndeclare function h(): void;\n";
    let o = checked(Language::TypeScript, text);
    assert_eq!(
        rows(&o),
        vec![
            ("class", "K", None, "K"),
            ("method", "m", Some("K"), "K.m"),
            ("method", "n", Some("K"), "K.n"),
            ("function", "h", None, "h"),
        ]
    );
    assert_scope(text, &o, "K.m", 2, 3, "m(a: string): void;\n  m(a: any) {}");
    assert_scope(text, &o, "h", 6, 6, "declare function h(): void;");
}

#[test]
fn typescript_tsx_text_is_parsed_with_the_tsx_dialect() {
    let text = "// 🌟\nexport const App = () => <div className=\"x\">{retry_count}</div>;\nfunction Item() { return <li/>; }\n";
    let o = checked(Language::TypeScript, text);
    assert!(!o.has_errors);
    assert_eq!(
        rows(&o),
        vec![
            ("function", "App", None, "App"),
            ("function", "Item", None, "Item")
        ]
    );
}

#[test]
fn javascript_symbols_have_exact_kinds_names_parents_and_paths() {
    let o = checked(Language::JavaScript, JS);
    assert!(!o.has_errors);
    assert_eq!(
        rows(&o),
        vec![
            ("variable", "timeout", None, "timeout"),
            ("class", "Widget", None, "Widget"),
            (
                "variable",
                "retry_count",
                Some("Widget"),
                "Widget.retry_count"
            ),
            ("variable", "#secret", Some("Widget"), "Widget.#secret"),
            ("method", "items", Some("Widget"), "Widget.items"),
            ("function", "ids", None, "ids"),
            ("class", "Poller", None, "Poller"),
            ("variable", "timeout", Some("Poller"), "Poller.timeout"),
            ("method", "poll", Some("Poller"), "Poller.poll"),
            ("class", "Inner", Some("Poller.poll"), "Poller.poll.Inner"),
            (
                "method",
                "run",
                Some("Poller.poll.Inner"),
                "Poller.poll.Inner.run"
            ),
            ("variable", "config", None, "config"),
        ]
    );
    assert_scope(JS, &o, "timeout", 2, 2, "export const timeout = 30;");
    assert_scope(JS, &o, "Poller.timeout", 11, 11, "timeout = timeout;");
    assert_scope(JS, &o, "Widget.retry_count", 4, 4, "retry_count = 3;");
    assert_scope(JS, &o, "ids", 8, 8, "export function* ids() { yield 1; }");
}
