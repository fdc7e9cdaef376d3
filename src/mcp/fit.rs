//! A result's text fitted to what its client shows the model (issue 22).
//!
//! Owns: the per-client budget of a result's text, and cutting a text over it. Does not own
//! the per-channel caps (`output.rs`, the engine's), which apply to every client alike.
//!
//! Clients cut long tool results themselves, and where they cut decides what the model loses.
//! Codex 0.171 keeps about 12 000 characters of a result and cuts its *middle*, exactly where
//! a cut channel's `[pi-repl: … the full output is in …]` marker sits; Claude Code warns at about
//! 10 000 tokens and cuts the end past `MAX_MCP_OUTPUT_TOKENS` (25 000 by default). So:
//!
//! - what the model must not lose (that output was cut, how much, the file holding all of it)
//!   is on the first lines of the text (`render.rs` puts each cut channel's pointer there, and
//!   a cut here adds its own before it), which every client keeps;
//! - the text of a result is cut to the client's budget here, head and tail at line
//!   boundaries, with the whole text saved to a file named on the first line, so the client's
//!   own cut never happens.
//!
//! Invariants: a fitted text is at most its budget in characters (a budget too small for the
//! pointer itself keeps the pointer alone); nothing is cut without the whole being saved or
//! the first line saying why it could not be.

use std::path::Path;

use rmcp::model::{CallToolResult, ContentBlock};

use crate::engine::output::{prefix_chars, suffix_chars, whole_lines_head, whole_lines_tail};

/// Codex's `clientInfo.name` (Codex CLI 0.171).
pub const CODEX_CLIENT: &str = "codex-mcp-client";
/// Claude Code's `clientInfo.name` (2.1.x, in each request's `_meta`).
pub const CLAUDE_CODE_CLIENT: &str = "claude-code";

/// Codex keeps about 12 000 characters of a result (its own `Wall time` line included) and
/// cuts the middle of a longer one; 10 000 leaves room for multi-byte text.
pub const CODEX_RESULT_CHARS: usize = 10_000;

/// Claude Code warns at about 10 000 tokens and cuts at 25 000 (`MAX_MCP_OUTPUT_TOKENS`);
/// 40 000 characters stay under the cut even for dense text (numbers, about 2.5 characters a
/// token) and keep one cut channel (30 000) whole.
pub const CLAUDE_CODE_RESULT_CHARS: usize = 40_000;

/// The key of a tool definition's `_meta` where Claude Code reads how long a result may be
/// before it saves the result to a file and shows the model a 2 000-character preview of it
/// instead (2.1.332: a text-only result whose texts' JavaScript length, UTF-16 units, is over
/// the limit; 50 000 for an MCP tool that declares nothing).
pub const CLAUDE_CODE_MAX_RESULT_META: &str = "anthropic/maxResultSizeChars";

/// The most Claude Code 2.1.332 takes from [`CLAUDE_CODE_MAX_RESULT_META`].
pub const CLAUDE_CODE_MAX_RESULT_CEILING: usize = 500_000;

/// How long a result's text may be (`--max-result-chars`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ResultLimit {
    /// By client: Codex and Claude Code get their budgets, other clients no limit.
    #[default]
    Auto,
    /// This many characters for every client; `0` is no limit.
    Chars(usize),
}

impl ResultLimit {
    /// The budget for a client named `client` (its `clientInfo.name`), if any.
    pub fn for_client(self, client: Option<&str>) -> Option<usize> {
        match self {
            ResultLimit::Chars(0) => None,
            ResultLimit::Chars(n) => Some(n),
            ResultLimit::Auto => match client {
                Some(CODEX_CLIENT) => Some(CODEX_RESULT_CHARS),
                Some(CLAUDE_CODE_CLIENT) => Some(CLAUDE_CODE_RESULT_CHARS),
                _ => None,
            },
        }
    }
}

impl ResultLimit {
    /// What `execute` declares under [`CLAUDE_CODE_MAX_RESULT_META`], so that Claude Code never
    /// swaps a result pi-repl fitted to it for a preview: twice Claude Code's budget (a
    /// character beyond U+FFFF is one character here and two UTF-16 units there), or Claude
    /// Code's ceiling when there is no budget.
    pub fn claude_code_declaration(self) -> usize {
        match self.for_client(Some(CLAUDE_CODE_CLIENT)) {
            Some(chars) => chars.saturating_mul(2).min(CLAUDE_CODE_MAX_RESULT_CEILING),
            None => CLAUDE_CODE_MAX_RESULT_CEILING,
        }
    }
}

/// What a silent cell's result holds for a client named `client`: nothing, except for a
/// client that would otherwise put a longer marker of its own in front of the model. Claude
/// Code 2.1.332 shows an empty result as `(mcp__pi-repl__execute completed with no output)`;
/// `(no output)` says the same in 11 characters. Codex shows its own `Wall time: …\nOutput:`
/// line with nothing after it, which says it already (docs/mcp.md, "A silent cell").
pub fn mark_silence(result: &mut CallToolResult, client: Option<&str>) {
    if result.content.is_empty() && client == Some(CLAUDE_CODE_CLIENT) {
        result.content.push(ContentBlock::text(NO_OUTPUT));
    }
}

/// The marker of a silent cell for a client that needs one ([`mark_silence`]).
pub const NO_OUTPUT: &str = "(no output)";

impl std::fmt::Display for ResultLimit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ResultLimit::Auto => f.write_str("auto"),
            ResultLimit::Chars(n) => write!(f, "{n}"),
        }
    }
}

/// Cuts the text of `result` (its first block) to `max_chars`: a first line saying so and
/// where the whole is, then the head and tail at line boundaries. The whole text is written
/// to `save_to`.
pub fn fit(result: &mut CallToolResult, max_chars: usize, save_to: Option<&Path>) {
    let Some(ContentBlock::Text(first)) = result.content.first_mut() else {
        return;
    };
    let total = first.text.chars().count();
    if total <= max_chars {
        return;
    }
    let saved = match save_to {
        Some(path) => match crate::fsutil::write_output(path, first.text.as_bytes()) {
            Ok(()) => format!("the whole result is in {}", path.display()),
            Err(error) => format!("the whole result could not be saved: {error:#}"),
        },
        None => "the whole result could not be saved: no output directory".to_string(),
    };
    // The pointer's and the marker's lengths depend on the count they give, whose digits are
    // at most `total`'s: room is reserved for that.
    let pointer_len = |omitted: usize| {
        format!(
            "[pi-repl: this result is {total} characters, cut to {max_chars} for this client: \
             {omitted} omitted from its middle; {saved}]\n"
        )
        .chars()
        .count()
    };
    let marker_len = |omitted: usize| {
        format!("[pi-repl: {omitted} characters omitted here]\n")
            .chars()
            .count()
            + 1
    };
    let room = max_chars.saturating_sub(pointer_len(total) + marker_len(total));
    let head = whole_lines_head(prefix_chars(&first.text, room / 2), room / 20);
    let tail = whole_lines_tail(suffix_chars(&first.text, room - room / 2), room / 20);
    let omitted = total - head.chars().count() - tail.chars().count();
    let mut text = format!(
        "[pi-repl: this result is {total} characters, cut to {max_chars} for this client: \
         {omitted} omitted from its middle; {saved}]\n"
    );
    if room > 0 {
        text.push_str(head);
        if !head.is_empty() && !head.ends_with('\n') {
            text.push('\n');
        }
        text.push_str(&format!("[pi-repl: {omitted} characters omitted here]\n"));
        text.push_str(tail);
    }
    first.text = text;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 22: the declaration covers every result fitted to Claude Code, even one made of
    /// characters that count twice in JavaScript, and never exceeds what Claude Code takes.
    #[test]
    fn claude_code_is_told_a_limit_above_its_budget() {
        assert_eq!(ResultLimit::Auto.claude_code_declaration(), 80_000);
        assert_eq!(ResultLimit::Chars(1_000).claude_code_declaration(), 2_000);
        assert_eq!(ResultLimit::Chars(0).claude_code_declaration(), 500_000);
        assert_eq!(
            ResultLimit::Chars(400_000).claude_code_declaration(),
            500_000
        );
    }

    /// Issue 22: a silent cell is empty for every client but Claude Code, which would say it
    /// in 48 characters of its own.
    #[test]
    fn only_claude_code_gets_a_silence_marker() {
        let mut empty = CallToolResult::success(vec![]);
        mark_silence(&mut empty, Some(CODEX_CLIENT));
        assert!(empty.content.is_empty());
        mark_silence(&mut empty, None);
        assert!(empty.content.is_empty());
        mark_silence(&mut empty, Some(CLAUDE_CODE_CLIENT));
        assert_eq!(text_of(&empty), "(no output)");
        let mut printed = text_result("x");
        mark_silence(&mut printed, Some(CLAUDE_CODE_CLIENT));
        assert_eq!(printed.content.len(), 1);
    }

    fn text_result(text: &str) -> CallToolResult {
        CallToolResult::success(vec![ContentBlock::text(text)])
    }

    fn text_of(result: &CallToolResult) -> &str {
        match &result.content[0] {
            ContentBlock::Text(t) => &t.text,
            other => panic!("not text: {other:?}"),
        }
    }

    #[test]
    fn each_client_gets_its_budget_and_an_override_wins() {
        assert_eq!(
            ResultLimit::Auto.for_client(Some("codex-mcp-client")),
            Some(CODEX_RESULT_CHARS)
        );
        assert_eq!(
            ResultLimit::Auto.for_client(Some("claude-code")),
            Some(CLAUDE_CODE_RESULT_CHARS)
        );
        assert_eq!(ResultLimit::Auto.for_client(Some("pi")), None);
        assert_eq!(ResultLimit::Auto.for_client(None), None);
        assert_eq!(ResultLimit::Chars(500).for_client(Some("pi")), Some(500));
        assert_eq!(ResultLimit::Chars(0).for_client(Some("claude-code")), None);
    }

    #[test]
    fn a_text_within_the_budget_is_left_alone() {
        let mut result = text_result("short\n");
        fit(&mut result, 100, None);
        assert_eq!(text_of(&result), "short\n");
    }

    /// Issue 22: Codex cut the middle of a long result, where the pointer to the full output
    /// was; the pointer now comes first and the text fits the client's budget.
    #[test]
    fn a_long_text_keeps_its_pointer_first_whole_lines_and_is_saved_whole() {
        let tmp = tempfile::tempdir().unwrap();
        let whole: String = (0..2000).map(|i| format!("row {i:04} of data\n")).collect();
        let mut result = text_result(&whole);
        let saved = tmp.path().join("call1.result.txt");
        fit(&mut result, 2_000, Some(&saved));
        let text = text_of(&result);
        assert!(text.chars().count() <= 2_000, "{}", text.chars().count());
        let first = text.lines().next().unwrap();
        assert!(
            first.starts_with(&format!(
                "[pi-repl: this result is {} characters",
                whole.len()
            )),
            "{first}"
        );
        assert!(first.contains(&saved.display().to_string()), "{first}");
        assert_eq!(std::fs::read_to_string(&saved).unwrap(), whole);
        let body: Vec<&str> = text.lines().skip(1).collect();
        assert_eq!(body[0], "row 0000 of data");
        assert_eq!(*body.last().unwrap(), "row 1999 of data");
        let marker = body.iter().find(|l| l.starts_with("[pi-repl:")).unwrap();
        assert!(marker.ends_with("characters omitted here]"), "{marker}");
        assert!(
            body.iter()
                .filter(|l| !l.starts_with("[pi-repl:"))
                .all(|l| l.starts_with("row ") && l.ends_with(" of data")),
            "every kept line is whole"
        );
    }

    #[test]
    fn a_budget_smaller_than_the_pointer_keeps_the_pointer() {
        let mut result = text_result(&"x".repeat(1000));
        fit(&mut result, 10, None);
        let text = text_of(&result);
        assert!(text.starts_with("[pi-repl: this result is 1000 characters"));
        assert!(!text.contains("xxx"));
    }
}
